"""The start-up row of ``attnexplorer bench``: a fresh ``attnexplorer --preset pronoun`` process
(``startup_probe.py``) to its first painted window and to every panel drawn, beside a fresh
process that only imports torch and Qt (what a start that waited for torch would take at the
least). Targets: the first paint ≤ 1.2 s, every panel drawn ≤ 2.5 s."""

from __future__ import annotations

import subprocess
import sys
import time
from statistics import median

from .harness import child_env

TARGETS = {"startup_paint_s": 1.2, "startup_drawn_s": 2.5}


def _stamps(proc) -> dict[str, list[str]]:
    """``{word: [the rest of its line split]}`` for the lines the probes print."""
    return {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.strip()}


def bench_startup(repeats: int) -> dict:
    """Fresh app processes to their first painted window and to every panel drawn, against
    fresh processes importing torch, PySide6.QtWidgets and pyqtgraph, interleaved. Each is
    timed from launch to the moment it says so (the app at its paints, the baseline after its
    imports), so the interpreter's exit (about 0.4 s with torch loaded) counts on neither side.
    The medians of ``repeats`` runs; ``torch_at_first_paint`` says whether any run had
    imported torch by its first paint (the window paints before torch loads)."""
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
    # The window opened as `attnexplorer --preset pronoun` opens it, then quit once every panel
    # is drawn (bench/startup_probe.py).
    app_cmd = [sys.executable, "-c", COMMAND, "--preset", "pronoun"]
    for cmd in (baseline_cmd, app_cmd):
        subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env())
    base, paint, drawn, torch_first = [], [], [], []
    for _ in range(repeats):
        for cmd, words in ((baseline_cmd, ("imported",)), (app_cmd, ("painted", "drawn"))):
            child = env()
            start = time.time()  # wall clock: compared with the child's own time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child)
            stamps = _stamps(proc)
            if proc.returncode != 0 or not all(w in stamps for w in words):
                return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            if words == ("imported",):
                base.append(float(stamps["imported"][0]) - start)
            else:
                paint.append(float(stamps["painted"][0]) - start)
                drawn.append(float(stamps["drawn"][0]) - start)
                torch_first.append("torch=1" in stamps["painted"])
    row = {"baseline_s": median(base), "first_paint_s": median(paint), "drawn_s": median(drawn),
           "torch_at_first_paint": any(torch_first), "repeats": repeats,
           "target_paint_s": TARGETS["startup_paint_s"], "target_drawn_s": TARGETS["startup_drawn_s"]}
    row["paint_met"] = row["first_paint_s"] <= row["target_paint_s"]
    row["drawn_met"] = row["drawn_s"] <= row["target_drawn_s"]
    row["met"] = row["paint_met"] and row["drawn_met"]
    return row
