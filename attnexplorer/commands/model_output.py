"""What the model commands (``import-model``, ``heads``) share: the progress bar a long run
shows on stderr, the --figures/--out-figures check, and the figures they draw offscreen (the
head-score heatmaps of the model window's Heads tab)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..models.sources import ModelError


class LayerBar:
    """``[#####-----] running smollm2 on 4,096 tokens: layer 12 of 30`` on one stderr line, at most ~10 times a second."""

    def __init__(self, stream=None, width: int = 30, from_fraction: float = 0.0):
        self.stream, self.width, self.from_fraction = stream or sys.stderr, width, from_fraction
        self._last = 0.0
        self.shown = False

    def __call__(self, fraction: float, message: str) -> None:
        if fraction < self.from_fraction:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and fraction < 1.0:
            return
        self._last = now
        filled = int(self.width * min(max(fraction, 0.0), 1.0))
        self.stream.write(f"\r[{'#' * filled}{'-' * (self.width - filled)}] {message}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def check_figures(args) -> None:
    """``--figures FORMATS`` and ``--out-figures DIR``: both or neither, known formats, a folder
    whose parent exists; sets ``args.figure_formats``. ModelError otherwise."""
    from ..io.export_command import FIGURE_FORMATS, parse_formats

    args.figure_formats = parse_formats(args.figures, FIGURE_FORMATS, "--figures")
    if bool(args.figure_formats) != (args.out_figures is not None):
        raise ModelError("give --figures FORMATS and --out-figures DIR together")
    if args.out_figures is not None:
        folder = Path(args.out_figures)
        if not folder.parent.is_dir():
            raise ModelError(f"--out-figures {args.out_figures}: the folder {folder.parent} does not exist")
        if folder.exists() and not folder.is_dir():
            raise ModelError(f"--out-figures {args.out_figures} is a file; the figures go into a folder")
        writable_parent(folder, "--out-figures")


def writable_parent(path: Path, flag: str) -> None:
    """ModelError, before the model is opened, when ``path`` cannot be made where it is asked
    (a folder without write permission: the figures failed after the model had run)."""
    import os

    where = path if path.is_dir() else path.parent
    if not os.access(where, os.W_OK | os.X_OK):
        raise ModelError(f"{flag} {path}: cannot write into {where} (no permission)")


def make_folder(folder: Path, flag: str) -> None:
    """``folder`` created if missing; ModelError (not a traceback) when it cannot be."""
    try:
        folder.mkdir(exist_ok=True)
    except OSError as err:
        raise ModelError(f"{flag} {folder}: cannot create the folder: {err.strerror or err}") from None


def figure_app() -> None:
    """The offscreen QApplication figures are drawn in; ModelError when Qt is missing."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from ..ui.exports.figures import ensure_app
    except ImportError as err:
        raise ModelError(f"figure export needs PySide6 and pyqtgraph: {err}") from None
    ensure_app()


def score_figures(columns: dict, formats: list[str], folder: Path, quiet: bool = False) -> list[Path]:
    """Each column's heatmap as ``heads-<column>.<format>`` in ``folder`` (created if missing)."""
    import re

    figure_app()
    from ..ui.exports.figures import discard, export_panel
    from ..ui.model.head_scores_panel import HeadScoresPanel

    make_folder(folder, "--out-figures")
    panel = HeadScoresPanel()
    written = []
    try:
        panel.set_scores(columns)
        for name in columns:
            panel.colour_by(name)
            stem = "heads-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
            for fmt in formats:
                written.append(export_panel(panel, folder / f"{stem}.{fmt}", width=640, height=480))
    finally:
        panel.shutdown()
        discard(panel)
    if not quiet:
        print(f"{folder}: {len(written)} figures", file=sys.stderr)
    return written
