"""``attnexplorer bench``: the speed figures of issue 5, measured headlessly in one run.

What it measures (medians; every comparison is measured side by side, interleaved, in the
same run, so a busy machine slows both sides alike):

- ``engine``: ``compute()`` against a bare torch ``softmax((X·W_q)(X·W_k)ᵀ·s)·(X·W_v)`` on
  the same inputs, n = 16 … 4,096, d = 64, on the CPU (and CUDA when present; device work is
  synchronised before a clock is read). Target: ratio ≤ 1.3 at n ≥ 256.
- ``stages``: ``compute()`` on sessions with biases, grouped-query heads (8 sharing 2) and
  RoPE or ALiBi, d = 512, d_k = 64, against the same arithmetic in bare torch, n = 1,024 and
  2,048. Target: ratio ≤ 1.3.
- ``redraw``: one cell edit → engine → every visible panel and table of the real main window
  repainted, n = 16 … 512, d = 64, one head. Targets: ≤ 16 ms at n = 64, ≤ 50 ms at n = 512.
- ``drag``: redraws per second while the sine preset's τ slider is dragged at N = 512.
  Target: ≥ 40.
- ``heatmap``: one heatmap redraw (new matrix, fixed levels, repaint) against the habit it
  replaces, matplotlib ``imshow`` plus a canvas draw of the same matrix at the same pixel
  size, each timed in alternating runs of consecutive redraws (see ``bench_heatmap``).
  Target: ≥ 10× faster for n ≤ 512.
- ``large``: n = 4,096 tokens, 4 heads, in a fresh process: the longest time the GUI thread
  was blocked while a computation ran (target ≤ 50 ms), the longest block overall (the redraw
  included), and the peak memory of the process (target < 2 GB).
- ``fit_steps``, ``fit_gui``: fitting a head, steps per second at n = 16 with no window
  (target ≥ 200) and the GUI's longest block during a fit at n = 512 (target ≤ 50 ms); see
  ``bench/fit.py``.
- ``behaviour``: an edit or an ablation of a real model → its Predictions panel redrawn, and
  the logit lens's cost (``bench/behaviour.py``).
- ``generation``: a SmolLM2 step from its KV cache at a 256-token context beside recomputing
  the text (``bench/generation.py``). Targets: ≤ 60 ms, ≥ 5× faster.
- ``heads``: SmolLM2's 270 heads: every score on 64 tokens, the ``repeated:256`` induction
  probe, direct logit attribution and a zero-ablation sweep, and every score during the
  4,096-token forward with that child process's peak memory (``bench/heads.py``).
  Targets: ≤ 3 s, ≤ 20 s, ≤ 1 s, ≤ 30 s, < 2 GB.
- ``startup``: a fresh ``attnexplorer --preset pronoun`` to its first painted window (before
  torch has loaded) and to every panel drawn, beside ``python -c "import torch,
  PySide6.QtWidgets, pyqtgraph"`` to its imports done (none counts the interpreter's exit).
  Targets: first paint ≤ 1.2 s, every panel drawn ≤ 2.5 s.

Each row kind is measured by a module of this package that also holds its targets
(``engine``, ``stages``, ``window``, ``edit_cost``, ``large``, ``startup``, ``fit``, ``long``,
``real_models``, ``behaviour``, ``generation``, ``heads``; the window they open and close: ``harness``); the text report is
``report.py``.

``--json`` prints the same figures as one JSON object; its fields are listed in the README
("Speed") and checked by the tests. ``--quick`` uses fewer sizes and repeats and leaves out the
rows that open a real model (``models``, ``behaviour``, ``generation``, ``heads``) unless
``--only`` names them; ``--only engine,stages`` measures only those kinds of rows (``row_kinds``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from typing import Callable

from ..core.errors import AttnExplorerError
from . import behaviour, edit_cost, engine, export, fit, generation, heads, large, long, real_models, stages, startup, window
from .harness import load_average
from .report import format_report

# Each row kind's targets live with its measurement; the JSON lists them all in this order.
# The README's Speed section names no other (tests/test_bench.py checks it).
TARGETS = {**engine.TARGETS, **window.TARGETS, **edit_cost.TARGETS, **large.TARGETS, **startup.TARGETS,
           **export.TARGETS, **long.TARGETS, **fit.TARGETS, "models_open_s": real_models.TARGETS,
           "behaviour_ms": behaviour.TARGETS, "generation": generation.TARGETS,
           "heads": heads.TARGETS}


def machine_info() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from ..core.compute.engine import available_devices

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "devices": available_devices(),
    }
    try:
        import PySide6
        import pyqtgraph

        info["pyside6"] = PySide6.__version__
        info["pyqtgraph"] = pyqtgraph.__version__
    except ImportError:
        pass
    if "cuda" in info["devices"]:
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# -- the command ----------------------------------------------------------------------------------
def row_kinds(quick: bool = False, devices: tuple[str, ...] = ("cpu",)) -> dict[str, Callable[[], dict]]:
    """Each kind of row, in the report's order: its name (what ``--only`` takes) → a function
    that measures it and returns its JSON fields (one field of the same name; the long rows
    several, ``ROW_FIELDS``). ``quick``: fewer sizes and repeats."""
    from .fit import bench_fit_gui, bench_fit_steps
    from .long import bench_long

    # The real-model rows (REAL_MODEL_ROWS), each in fresh processes of its own. ``--quick``
    # measures them only when ``--only`` names them, and then once.
    def models() -> list:
        # Opening MiniLM and SmolLM2 (from its cache), fresh and in the app
        from .real_models import bench_models

        return bench_models(repeats=1 if quick else 3)

    def behaviour() -> list:
        # An edit or an ablation of a real model → its prediction
        from .behaviour import bench_behaviour

        return bench_behaviour(repeats=1 if quick else 7)

    def generation() -> dict:
        # A cached generation step vs recomputing the text, SmolLM2
        from .generation import bench_generation

        return bench_generation(repeats=1 if quick else 9)

    def head_scores() -> dict:
        # Head scores, the induction probe, DLA and an ablation sweep on SmolLM2
        from .heads import bench_heads

        return bench_heads()

    devices = list(devices)
    sizes = {"engine": [16, 256] if quick else [16, 64, 256, 512, 1024, 2048, 4096],
             "stages": [256] if quick else [1024, 2048], "redraw": [16, 64] if quick else [16, 64, 256, 512],
             "heatmap": [16, 64] if quick else [16, 64, 256, 512]}
    return {
        "engine": lambda: engine.bench_engine(sizes["engine"], devices, repeats=3 if quick else 9),
        "stages": lambda: stages.bench_stages(sizes["stages"], devices, repeats=2 if quick else 5),
        "redraw": lambda: window.bench_redraw(sizes["redraw"], repeats=3 if quick else 9),
        "drag": lambda: window.bench_drag(64, steps=4) if quick else window.bench_drag(512, steps=15),
        "edit_cost": lambda: edit_cost.bench_edit_cost(2, 64, edits=5) if quick else edit_cost.bench_edit_cost(16, 512),
        "heatmap": lambda: (window.bench_heatmap(sizes["heatmap"], repeats=2, runs=2) if quick
                            else window.bench_heatmap(sizes["heatmap"], repeats=7)),
        "large": lambda: large.bench_large(256, 2) if quick else large.bench_large(4096, 4),
        "startup": lambda: startup.bench_startup(1 if quick else 3),
        "export": lambda: export.bench_export(1 if quick else 3),
        "long": lambda: bench_long(quick),
        "fit_steps": lambda: bench_fit_steps(steps=100 if quick else 300, repeats=1 if quick else 3),
        "fit_gui": lambda: (bench_fit_gui(128, seconds=1.0, repeats=1) if quick
                            else bench_fit_gui(512, seconds=3.0, repeats=3)),
        "models": models,
        "behaviour": behaviour,
        "generation": generation,
        "heads": head_scores,
    }


# The JSON fields of a row kind that writes more than the one named after it.
ROW_FIELDS = {"long": ("long", "long_dense", "long_masked", "long_window")}
# The row kinds that draw with matplotlib.
NEEDS_MATPLOTLIB = frozenset({"heatmap"})
# The row kinds that open a real model (a minute each): ``--quick`` leaves them out unless
# ``--only`` names them.
REAL_MODEL_ROWS = frozenset({"models", "behaviour", "generation", "heads"})


def measured_rows(quick: bool, only: tuple[str, ...] | None, kinds) -> list[str]:
    """The row kinds a run measures, in the report's order."""
    if only is not None:
        return [name for name in kinds if name in only]
    return [name for name in kinds if not (quick and name in REAL_MODEL_ROWS)]


def collect(quick: bool = False, device: str | None = None, only: tuple[str, ...] | None = None) -> dict:
    """Every row kind's figures (or those of ``only``), with the machine and the targets."""
    from ..core.compute.engine import available_devices

    devices = (device,) if device else tuple(d for d in available_devices() if d in ("cpu", "cuda"))
    started = time.perf_counter()
    results = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "load_before": load_average(), "targets": {k: v for k, v in TARGETS.items() if k != "redraw_ms"}}
    results["targets"]["redraw_ms"] = {str(k): v for k, v in TARGETS["redraw_ms"].items()}
    kinds = row_kinds(quick, devices)
    row_seconds = {}
    for name in measured_rows(quick, only, kinds):
        load_before, began = load_average(), time.perf_counter()
        figures = kinds[name]()
        row_seconds[name] = round(time.perf_counter() - began, 1)
        rows = figures.values() if name in ROW_FIELDS else (figures,)
        for row in rows:
            _stamp_load(row, load_before, load_average())
        if name in ROW_FIELDS:
            results.update(figures)
        else:
            results[name] = figures
    results["load_after"] = load_average()
    results["row_seconds"] = row_seconds  # what each kind of row took, for a reader planning a run
    results["seconds"] = time.perf_counter() - started
    return results


def _stamp_load(row, before: float | None, after: float | None) -> None:
    """Record the load average around a row's measurement in the row (each row of a list),
    where the row did not take its own closer to its figures."""
    for one in row if isinstance(row, list) else (row,):
        if isinstance(one, dict):
            one.setdefault("load_before", before)
            one.setdefault("load_after", after)


def parse_only(text: str | None) -> tuple[str, ...] | None:
    """``--only engine,stages`` as the row kinds' names, or AttnExplorerError naming the choices."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    known = tuple(row_kinds())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        what = f"unknown row {unknown[0]!r}" if unknown else "no row named"
        raise AttnExplorerError(f"--only: {what}; choose from {', '.join(known)}")
    return names


def run_bench(args) -> int:
    only = parse_only(getattr(args, "only", None))
    if (only is None or NEEDS_MATPLOTLIB & set(only)) and importlib.util.find_spec("matplotlib") is None:
        # Found out now, not half a minute in, when the heatmap comparison needs it.
        print("attnexplorer bench: the heatmap comparison needs matplotlib, which is not installed; "
              "install it with: python3 -m pip install matplotlib", file=sys.stderr)
        return 2
    results = collect(quick=getattr(args, "quick", False), device=getattr(args, "device", None), only=only)
    if getattr(args, "json", False):
        print(json.dumps(results, indent=2))
    else:
        print(format_report(results))
    return 0
