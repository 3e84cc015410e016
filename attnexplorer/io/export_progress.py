"""Progress of a long export on stderr: ``[######------] writing 1.2 of about 8.5 GB``.

The writers (NPZ, NPY, JSON, the tables, figures) each write a block at a time into the
export's staging folder; rather than thread a callback through every one of them, a daemon
thread measures the staging folder a few times a second against the export's estimated size
(``export_choice.disk_bytes``). An export with nothing to say (under ``SHOWN_FROM_BYTES``) draws
nothing: a short export stays one line of output.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

SHOWN_FROM_BYTES = 50 * 10**6


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class StagingProgress:
    """``with StagingProgress(stage, expected):`` draws a bar on ``stream`` until the block ends."""

    def __init__(self, stage: Path, expected: int, stream=None, every_s: float = 0.5, width: int = 30):
        self.stage, self.expected, self.every_s, self.width = Path(stage), max(int(expected), 1), every_s, width
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.shown = False
        self.started = time.monotonic()

    def __enter__(self) -> "StagingProgress":
        if self.expected >= SHOWN_FROM_BYTES:
            self._thread = threading.Thread(target=self._run, name="export-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.draw(folder_bytes(self.stage))

    def draw(self, written: int) -> None:
        fraction = min(written / self.expected, 1.0)
        filled = int(self.width * fraction)
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r[{'#' * filled}{'-' * (self.width - filled)}] writing the export: "
                          f"{_size(written)} of about {_size(self.expected)} ({elapsed:.0f} s)")
        self.stream.flush()
        self.shown = True


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.0f} MB"
