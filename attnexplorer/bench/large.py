"""The large-session row of ``attnexplorer bench``, measured in a fresh process.

n = 4,096 tokens, 4 heads: the longest time the GUI thread was blocked while a computation
ran (target ≤ 50 ms), the longest block overall (the redraw included), and the peak memory of
the process (target < 2 GB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .harness import child_env, load_average, median_of, open_window, start_app, table_scroll_ms

TARGETS = {"large_block_ms": 50.0, "large_peak_mb": 2048.0}


# Edits measured in the one process: each figure is the median over them.
EDITS = 5


def large_probe(n: int, heads: int, edits: int = EDITS) -> None:
    """Run in a child process: print one JSON line with the large-session figures, those of
    each of ``edits`` edits under ``edits``."""
    import resource

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from ..core.inputs.presets import build_preset

    start_app()
    built = build_preset("random", {"n": n, "d": 64, "d_k": 16, "d_v": 16, "heads": heads, "seed": 0})
    start = time.perf_counter()
    document, window = open_window(built.session)
    document.compute.wait_idle(120.0)
    QApplication.processEvents()
    window.repaint()
    first_ms = (time.perf_counter() - start) * 1000.0

    gaps = {"computing": 0.0, "all": 0.0}
    state = {"last": time.perf_counter()}

    def tick():
        now = time.perf_counter()
        gap = (now - state["last"]) * 1000.0
        state["last"] = now
        gaps["all"] = max(gaps["all"], gap)
        if document.compute.computing:
            gaps["computing"] = max(gaps["computing"], gap)

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    timer.start()
    drawn = {"done": False}
    document.result_changed.connect(lambda _r: drawn.__setitem__("done", True))  # before: small ones are inline
    rows = []
    for k in range(edits):  # each a different cell, each its own compute
        x = document.session.embeddings.copy()
        x[k, 0] += 1.0
        gaps["computing"] = gaps["all"] = 0.0
        drawn["done"] = False
        start = time.perf_counter()
        state["last"] = start
        document.edit(document.session.replace(embeddings=x), "bench edit")
        while not drawn["done"] and time.perf_counter() - start < 120:
            QApplication.processEvents()
            time.sleep(0.001)
        QApplication.processEvents()
        window.repaint()
        rows.append({"edit_to_drawn_ms": (time.perf_counter() - start) * 1000.0,
                     "compute_ms": document.compute.last_compute_ms,
                     "max_block_while_computing_ms": gaps["computing"], "max_block_ms": gaps["all"]})
    table_ms = table_scroll_ms(window)
    timer.stop()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"n": n, "heads": heads, "first_window_ms": first_ms, "edits": rows, "scroll_step_ms": table_ms,
                      "peak_mb": peak_mb}))
    sys.stdout.flush()
    os._exit(0)  # skip teardown of a 4,096-token window: its figures are printed


def bench_large(n: int, heads: int, edits: int = EDITS) -> dict:
    """The row: each figure the median over ``edits`` edits in one fresh process (the peak
    memory is the process's, over all of them)."""
    code = f"from attnexplorer.bench.large import large_probe; large_probe({n}, {heads}, {edits})"
    load_before = load_average()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=child_env())
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"n": n, "heads": heads, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    probe = json.loads(lines[-1])
    row = median_of(probe.pop("edits"), ("max_block_while_computing_ms", "max_block_ms", "edit_to_drawn_ms",
                                         "compute_ms"))
    row = {**probe, **row, "load_before": load_before, "load_after": load_average()}
    row["met"] = (row["max_block_while_computing_ms"] <= TARGETS["large_block_ms"]
                  and row["peak_mb"] < TARGETS["large_peak_mb"])
    return row
