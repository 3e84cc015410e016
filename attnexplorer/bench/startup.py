"""The start-up row of ``attnexplorer bench``: a fresh app process to its first painted window
(``startup_probe.py``), against a fresh process that only imports torch and Qt. Target: ≤ 0.7 s more."""

from __future__ import annotations

import subprocess
import sys
import time
from statistics import median

from .harness import child_env

TARGETS = {"startup_extra_s": 0.7}


def _stamp(proc, word: str) -> float | None:
    for line in proc.stdout.splitlines():
        if line.startswith(word + " "):
            return float(line.split()[1])
    return None


def bench_startup(repeats: int) -> dict:
    """A fresh app process to its first painted window, against a fresh process importing
    torch, PySide6.QtWidgets and pyqtgraph. Both are timed from launch to the moment they say
    they are there (the app after its first paint, the baseline after its imports), so the
    interpreter's exit (about 0.4 s with torch loaded) counts on neither side."""
    from .startup_probe import COMMAND

    def env() -> dict[str, str]:  # each window process starts from settings of its own
        out = child_env()
        # Installed packages start from compiled bytecode (pip compiles them); a checkout run with
        # PYTHONDONTWRITEBYTECODE would compile every module of ours on every start, which no
        # installed app does. An untimed first run of each command writes the bytecode (and warms
        # the file cache alike for both).
        out.pop("PYTHONDONTWRITEBYTECODE", None)
        return out

    baseline_cmd = [sys.executable, "-c",
                    "import torch, PySide6.QtWidgets, pyqtgraph; import time; print('imported', time.time())"]
    # The window opened as `attnexplorer --preset pronoun` opens it, then quit after its first
    # paint (bench/startup_probe.py).
    app_cmd = [sys.executable, "-c", COMMAND, "--preset", "pronoun"]
    for cmd in (baseline_cmd, app_cmd):
        subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env())
    base, app = [], []
    for _ in range(repeats):
        for cmd, word, into in ((baseline_cmd, "imported", base), (app_cmd, "painted", app)):
            child = env()
            start = time.time()  # wall clock: compared with the child's own time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child)
            stamp = _stamp(proc, word)
            if proc.returncode != 0 or stamp is None:
                return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            into.append(stamp - start)
    extra = median(app) - median(base)
    return {"baseline_s": median(base), "app_s": median(app), "extra_s": extra, "repeats": repeats,
            "target_extra_s": TARGETS["startup_extra_s"], "met": extra <= TARGETS["startup_extra_s"]}

