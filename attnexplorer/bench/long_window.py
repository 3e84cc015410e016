"""The ``long_window`` row of ``attnexplorer bench``: the window itself at 16,384 tokens.

A fresh process opens the window exactly as ``attnexplorer --preset random --set n=16384 ...``
does (``ui.app.open_window``: d = d_k = d_v = 64, 4 heads), waits for the first complete
overview, then makes ``EDITS`` edits one after another (an embedding cell each; each figure
below is the median over them, every edit counted) and measures, while the streamed compute
runs on the worker and the autosave writes the recovery file on its thread:

- the GUI thread's longest block: a 1 ms precise timer, the longest gap between two ticks,
  with the GUI thread's own CPU time in that gap (on a loaded machine the rest of a gap is
  time the thread waited for a core) and, from a watchdog thread, where the GUI thread was
  when the gap was longest (``sys._current_frames``);
- how many times the heatmap showed a partial overview while it filled in;
- the edit → drawn time, a scroll step through the 16,384-row embedding table, the latency of
  an exact zoom region and of an intermediate zoom (pooled from exact tiles), and the peak
  resident memory.

Run alone: ``python3 -c "from attnexplorer.bench.long_window import bench_window;
print(bench_window(16384, 4))"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from .harness import child_env, load_average, median_of

# The block target of the long-inputs issue (GUI never blocked more than this).
BLOCK_TARGET_MS = 50.0


def _where(frame, depth: int = 4) -> str:
    import traceback

    if frame is None:
        return "Qt (no Python frame)"
    stack = traceback.extract_stack(frame)[-depth:]
    return " < ".join(f"{os.path.basename(fs.filename)}:{fs.lineno} {fs.name}" for fs in reversed(stack))


# Edits measured in the one process: each figure is the median over them.
EDITS = 3


def window_probe(n: int, heads: int, edits: int = EDITS) -> None:
    """Run in a child process: print one JSON line with the window's figures, those of each
    of ``edits`` edits under ``edits``."""
    import resource

    import numpy as np
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from ..commands.arguments import build_parser
    from ..ui.app import open_window
    from .harness import table_scroll_ms

    argv = ["--preset", "random"] + [a for k, v in (("n", n), ("d", 64), ("d_k", 64), ("d_v", 64), ("heads", heads),
                                                      ("seed", 0)) for a in ("--set", f"{k}={v}")]
    start = time.perf_counter()
    opened = open_window(build_parser().parse_args(argv))
    if opened is None:
        raise SystemExit("the window did not open")
    app, window = opened
    window.resize(1280, 800)
    document = window.document
    while document.result is None and time.perf_counter() - start < 300:
        QApplication.processEvents()
        time.sleep(0.002)
    QApplication.processEvents()
    window.repaint()
    first_s = time.perf_counter() - start

    main = threading.main_thread().ident
    state = {"last": time.perf_counter(), "cpu": time.thread_time(), "stop": False, "worst": 0.0,
             "worst_cpu": 0.0, "worst_all": 0.0, "where": "", "seen_where": ""}
    partials = {"count": 0}

    def tick():
        now, cpu = time.perf_counter(), time.thread_time()
        gap = (now - state["last"]) * 1000.0
        gap_cpu = (cpu - state["cpu"]) * 1000.0
        state["last"], state["cpu"] = now, cpu
        state["worst_all"] = max(state["worst_all"], gap)
        if document.compute.computing and gap > state["worst"]:
            state["worst"], state["worst_cpu"], state["where"] = gap, gap_cpu, state["seen_where"]
        state["seen_where"] = ""

    def watch():
        # Where the GUI thread is while a tick is late (it may itself be waiting for the
        # interpreter's lock: then it shows where it waits, and the other threads hold it).
        while not state["stop"]:
            time.sleep(0.005)
            if time.perf_counter() - state["last"] > BLOCK_TARGET_MS / 1000.0 and not state["seen_where"]:
                frames = sys._current_frames()
                others = "; ".join(f"{t.name}: {_where(frames.get(t.ident), 2)}" for t in threading.enumerate()
                                   if t.ident not in (main, threading.get_ident()))
                state["seen_where"] = f"GUI: {_where(frames.get(main))} | {others}"

    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.setInterval(1)
    timer.timeout.connect(tick)
    watcher = threading.Thread(target=watch, name="bench-watchdog", daemon=True)
    runner = document.compute
    if hasattr(runner, "overview_progress"):
        runner.overview_progress.connect(lambda *_: partials.__setitem__("count", partials["count"] + 1))
    drawn = {"done": False}
    document.result_changed.connect(lambda _r: drawn.__setitem__("done", True))
    saver = window.actions.autosaver
    timer.start()
    watcher.start()
    rows = []
    for k in range(edits):  # each a different cell, each its own compute and autosave
        x = document.session.embeddings.copy()
        x[k, 0] += 1.0
        drawn["done"] = False
        partials["count"] = 0
        state.update(worst=0.0, worst_cpu=0.0, worst_all=0.0, where="")
        start = time.perf_counter()
        state["last"], state["cpu"] = start, time.thread_time()
        document.edit(document.session.replace(embeddings=x), "bench edit")
        while not drawn["done"] and time.perf_counter() - start < 300:
            QApplication.processEvents()
            time.sleep(0.0005)
        QApplication.processEvents()
        window.repaint()
        edit_s = time.perf_counter() - start
        # The autosave's write of the edited session (it starts 3-4 s after the edit) counts too.
        end = time.perf_counter() + 5.0
        while time.perf_counter() < end and saver is not None and (saver.pending or saver.writing):
            QApplication.processEvents()
            time.sleep(0.0005)
        rows.append({"edit_to_drawn_ms": edit_s * 1000.0, "max_block_while_computing_ms": state["worst"],
                     "gui_cpu_in_that_block_ms": state["worst_cpu"], "block_where": state["where"],
                     "max_block_ms": state["worst_all"], "partial_overviews": partials["count"]})
    timer.stop()
    state["stop"] = True
    table_ms = table_scroll_ms(window)
    zoom = _zoom_latencies(window, document)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    row = {"n": n, "heads": heads, "d": 64, "first_overview_s": first_s, "edits": rows,
           "scroll_step_ms": table_ms, "peak_mb": peak_mb, "load": load, **zoom}
    print(json.dumps(row, default=lambda v: float(v) if isinstance(v, np.floating) else str(v)))
    sys.stdout.flush()
    os._exit(0)  # skip the teardown of a 16,384-token window: its figures are printed


def _zoom_latencies(window, document) -> dict:
    """Zoom the weights heatmap into a 64 × 64 region (exact cells) and a 2,048 × 2,048 one
    (pooled from exact tiles): the time until each is shown."""
    from PySide6.QtWidgets import QApplication

    panel = next((p for p in window.panels if p.kind == "weights"), None)
    if panel is None:
        return {}
    window.docks["weights"].raise_()
    QApplication.processEvents()
    view = panel.view
    n = document.session.n
    out = {}
    for name, span in (("zoom_exact_ms", min(64, n // 8)), ("zoom_pooled_ms", min(2048, n // 2))):
        view.reset_zoom()
        QApplication.processEvents()
        r0 = n // 2
        t0 = time.perf_counter()
        view.vb.setRange(xRange=(r0, r0 + span), yRange=(r0, r0 + span), padding=0)
        shown = False
        while time.perf_counter() - t0 < 10:
            QApplication.processEvents()
            if 0 < view.image_rect.width() < n and not view.zoom_pending:
                shown = True
                break
            time.sleep(0.001)
        window.repaint()
        out[name] = (time.perf_counter() - t0) * 1000.0 if shown else None
        out[name.replace("_ms", "_factor")] = list(view.image_factor)
    return out


def bench_window(n: int, heads: int, edits: int = EDITS) -> dict:
    """The window row, from a fresh process (``window_probe``): each edit's figure the median
    over ``edits`` edits (where the block fell and the GUI work in it: that of the median)."""
    code = f"from attnexplorer.bench.long_window import window_probe; window_probe({n}, {heads}, {edits})"
    load_before = load_average()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                              env=child_env())
    except subprocess.TimeoutExpired:
        return {"n": n, "heads": heads, "error": "took more than 600 s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"n": n, "heads": heads, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    probe = json.loads(lines[-1])
    row = median_of(probe.pop("edits"), ("max_block_while_computing_ms", "max_block_ms", "edit_to_drawn_ms",
                                         "partial_overviews"))
    row = {**probe, **row, "load_before": load_before, "load_after": load_average()}
    row["met"] = row["max_block_while_computing_ms"] <= BLOCK_TARGET_MS
    return row
