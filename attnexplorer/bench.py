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
  Target: ≥ 30.
- ``heatmap``: one heatmap redraw (new matrix, fixed levels, repaint) against the habit it
  replaces, matplotlib ``imshow`` plus a canvas draw of the same matrix at the same pixel
  size, each timed in alternating runs of consecutive redraws (see ``bench_heatmap``).
  Target: ≥ 10× faster for n ≤ 512.
- ``large``: n = 4,096 tokens, 4 heads, in a fresh process: the longest time the GUI thread
  was blocked while a computation ran (target ≤ 50 ms), the longest block overall (the redraw
  included), and the peak memory of the process (target < 2 GB).
- ``fit_steps``, ``fit_gui``: fitting a head, steps per second at n = 16 with no window
  (target ≥ 200) and the GUI's longest block during a fit at n = 512 (target ≤ 50 ms); see
  ``commands/fit_bench.py``.
- ``startup``: a fresh ``attnexplorer --preset pronoun`` to its first painted window, against
  ``python -c "import torch, PySide6.QtWidgets, pyqtgraph"`` to its imports done (neither
  counts the interpreter's exit). Target: ≤ 0.7 s more.

``--json`` prints the same figures as one JSON object; its fields are listed in the README
("Speed") and checked by the tests. ``--quick`` uses fewer sizes and repeats (for tests).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time

TARGETS = {
    "engine_ratio": 1.3,
    "redraw_ms": {64: 16.0, 512: 50.0},
    "drag_per_s": 30.0,
    "heatmap_speedup": 10.0,
    "large_block_ms": 50.0,
    "large_peak_mb": 2048.0,
    "startup_extra_s": 0.7,
    "edit_ms": 20.0,
    "edit_growth_mb": 50.0,
}


def _median(values) -> float:
    return float(statistics.median(values))


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
    from .core.engine import available_devices

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


# -- engine ---------------------------------------------------------------------------------
def measure_engine_overhead(n: int, d: int = 64, heads: int = 1, repeats: int = 15, device: str = "cpu",
                            dtype: str = "float32", keep=None, seed: int = 0) -> dict:
    """Time ``compute()`` against a bare torch ``softmax((X@Wq)@(X@Wk)ᵀ·s)@(X@Wv)``, side by side.

    Both run on the same random inputs (n tokens, width d, ``heads`` heads, d_k = d_v = d),
    interleaved call by call so that a noisy machine slows both alike; device work is
    synchronised before a clock is read. The bare version starts from tensors already on the
    device and returns a tensor; the engine starts from the session and returns host numpy
    arrays, so the ratio is everything the engine adds. ``keep`` is passed to ``compute``;
    by default everything on the CPU (host arrays share memory, so it is free) and only
    ``output`` on a GPU (what crosses the bus is what the window asks for).

    Returns ``{"n", "d", "heads", "device", "dtype", "repeats", "engine_ms", "bare_ms", "ratio"}``
    with medians in milliseconds and ratio = engine_ms / bare_ms.
    """
    import numpy as np
    import torch

    from .core.engine import compute, resolve
    from .core.errors import EngineError
    from .core.session import Session

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise EngineError(f"repeats must be a whole number >= 1, got {repeats!r}")
    dev, tdtype = resolve(device, dtype)
    rng = np.random.default_rng(seed)
    session = Session(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        # ~1/√d weights keep the scores O(1), as in a trained layer, so no softmax saturates.
        w_query=rng.normal(size=(heads, d, d)) / np.sqrt(d),
        w_key=rng.normal(size=(heads, d, d)) / np.sqrt(d),
        w_value=rng.normal(size=(heads, d, d)) / np.sqrt(d),
    )
    if keep is None and dev.type != "cpu":
        keep = ("output",)
    factor = session.scale.factor(d)
    x = torch.tensor(session.embeddings, dtype=tdtype, device=dev)
    wq, wk, wv = (torch.tensor(w, dtype=tdtype, device=dev) for w in (session.w_query, session.w_key, session.w_value))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elif dev.type == "mps":
            torch.mps.synchronize()

    def bare():
        with torch.inference_mode():
            out = torch.softmax((x @ wq) @ (x @ wk).transpose(-1, -2) * factor, dim=-1) @ (x @ wv)
        sync()
        return out

    def engine():
        return compute(session, device=device, dtype=dtype, keep=keep)

    engine_ms, bare_ms = interleaved_medians(engine, bare, repeats, warmups=3)
    return {"n": n, "d": d, "heads": heads, "device": str(dev), "dtype": dtype, "repeats": repeats,
            "engine_ms": engine_ms, "bare_ms": bare_ms, "ratio": engine_ms / bare_ms}


def interleaved_medians(engine, bare, repeats: int, warmups: int) -> tuple[float, float]:
    """Median milliseconds of ``engine()`` and ``bare()``, timed call by call.

    The first ``warmups`` calls of each (allocations, kernels, the engine's device caches) are
    not timed; then the two alternate, in swapped order every other round, so that neither
    always runs right after the other's garbage. Each callable synchronises its own device.
    """
    for _ in range(warmups):
        bare()
        engine()
    times = {"bare": [], "engine": []}
    for r in range(repeats):
        for name, fn in (("bare", bare), ("engine", engine)) if r % 2 == 0 else (("engine", engine), ("bare", bare)):
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times["engine"]), statistics.median(times["bare"])


def bench_engine(sizes, devices, repeats) -> list[dict]:

    rows = []
    for device in devices:
        for n in sizes:
            # A call at n ≤ 512 takes well under a millisecond: many samples cost nothing and
            # keep one scheduler hiccup from moving the median.
            reps = (repeats * 5 if n <= 512 else repeats * 3 if n <= 1024 else repeats if n <= 2048
                    else max(3, repeats // 3))
            row = measure_engine_overhead(n, d=64, heads=1, repeats=reps, device=device)
            row["met"] = n < 256 or row["ratio"] <= TARGETS["engine_ratio"]
            rows.append(row)
        if 4096 in sizes:
            row = measure_engine_overhead(4096, d=64, heads=4, repeats=3, device=device)
            row["met"] = row["ratio"] <= TARGETS["engine_ratio"]
            rows.append(row)
    return rows


def bench_stages(sizes, devices, repeats) -> list[dict]:
    from .stage_bench import measure_stages_overhead

    rows = []
    for device in devices:
        for positions in ("rope", "alibi"):
            for n in sizes:
                row = measure_stages_overhead(n, positions, repeats=repeats, device=device)
                row["met"] = row["ratio"] <= TARGETS["engine_ratio"]
                rows.append(row)
    return rows


# -- the window ------------------------------------------------------------------------------
def _quiet_offscreen(mode, context, message) -> None:
    # Qt's offscreen platform warns on every dock and window it lays out that it cannot pass
    # size hints on; that says nothing about the figures, so only that line is dropped.
    if "does not support propagateSizeHints" not in message:
        print(message, file=sys.stderr)


def _app():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("ATTNEXPLORER_TESTING", "1")  # no real settings or recovery files
    from PySide6.QtCore import qInstallMessageHandler

    from .ui.app import make_app

    if os.environ["QT_QPA_PLATFORM"] == "offscreen":
        qInstallMessageHandler(_quiet_offscreen)
    return make_app()


def _window(session, size=(1280, 800)):
    from PySide6.QtWidgets import QApplication

    from .ui.document import SessionDocument
    from .ui.main_window import MainWindow

    document = SessionDocument(session)
    window = MainWindow(document)
    window.resize(*size)
    window.show()
    for _ in range(3):
        QApplication.processEvents()
    window.repaint()
    return document, window


def _close(document, window) -> None:
    from PySide6.QtWidgets import QApplication

    document.undo_stack.setClean()  # nothing to ask about on close
    window.close()  # drops the recovery file and takes the panels' plots apart (Panel.dispose)
    window.deleteLater()
    document.shutdown()
    QApplication.processEvents()


def _settle() -> None:
    """Deliver queued results and paint every region that an update marked dirty, as Qt's
    event loop does between two frames (what changed is repainted, nothing else)."""
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    QApplication.processEvents()


def _edit_and_paint(document, window, value: float) -> float:
    """One cell edit through the document, then every resulting repaint of the window."""
    start = time.perf_counter()
    x = document.session.embeddings.copy()
    x[0, 0] = value
    document.edit(document.session.replace(embeddings=x), "bench edit", merge_key=("bench",))
    document.wait_idle(60.0)
    _settle()
    return (time.perf_counter() - start) * 1000.0


def bench_redraw(sizes, repeats) -> list[dict]:
    from .core.presets import build_preset

    _app()
    rows = []
    for n in sizes:
        built = build_preset("random", {"n": n, "d": 64, "d_k": 64, "d_v": 64, "heads": 1, "seed": 0})
        document, window = _window(built.session)
        times = [_edit_and_paint(document, window, 0.5 + 0.01 * r) for r in range(repeats + 2)][2:]
        row = {"n": n, "d": 64, "heads": 1, "median_ms": _median(times), "compute_ms": document.last_compute_ms,
               "draw_ms": getattr(window, "last_draw_ms", None), "repeats": repeats}
        target = TARGETS["redraw_ms"].get(n)
        row["target_ms"] = target
        row["met"] = None if target is None else row["median_ms"] <= target
        rows.append(row)
        _close(document, window)
    return rows


def bench_drag(n: int, steps: int) -> dict:
    """Drag the sine preset's τ slider across ``steps`` positions, painting after each."""
    from .core.presets import build_preset

    _app()
    built = build_preset("sine", {"N": n})
    document, window = _window(built.session)
    widget = window.controls.param_widgets["tau"]
    slider = widget.slider
    slider.setSliderDown(True)
    lo, hi = slider.minimum(), slider.maximum()
    positions = [lo + (hi - lo) * (k % 40 + 10) // 60 for k in range(steps + 2)]
    times = []
    for k, pos in enumerate(positions):
        start = time.perf_counter()
        slider.setValue(pos)
        document.wait_idle(60.0)
        _settle()
        if k >= 2:
            times.append(time.perf_counter() - start)
    slider.setSliderDown(False)
    undo_steps = document.undo_stack.count()
    _close(document, window)
    per_s = 1.0 / _median(times)
    return {"n": n, "steps": steps, "median_ms": _median(times) * 1000.0, "redraws_per_s": per_s,
            "undo_steps": undo_steps, "target_per_s": TARGETS["drag_per_s"], "met": per_s >= TARGETS["drag_per_s"]}


def _resident_mb() -> float | None:
    """This process's resident memory now (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Restart this process's peak resident memory count (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_mb() -> float | None:
    """This process's peak resident memory since ``_reset_peak_mb`` (Linux), else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def bench_edit_cost(heads: int, d: int, edits: int = 20, n: int = 8) -> dict:
    """One W_q cell typed into the main window at ``heads`` heads of d = d_k = d_v = ``d``.

    What is timed is what the person waits for: from the W_q table's ``setData`` (the value
    typed and Enter pressed, on the Weights tab) until every panel and the table have painted
    the new result (``median_ms``). At this size the compute runs inline, so that is also the
    time the GUI thread is busy; ``compute_ms`` is the engine's part of it and ``paint_ms``
    Qt's repaint after the panels took the result. ``gui_cpu_ms`` is the processor time the
    GUI thread itself used meanwhile: on a machine shared with other work the wall time also
    holds the time the thread waited for a processor, and this does not. The ``edits`` edits go to different cells
    (each one undo step). ``growth_mb`` is how far the process's peak resident memory rose
    above the memory before ``edits`` edits of different cells and heads (the memory after them
    where the peak cannot be read: ``peak`` False), measured first, on a document of its own:
    the window's autosave writes the whole session to its recovery file a few seconds after an
    edit, and that write's buffers are not what an edit costs."""
    import gc

    import numpy as np

    from .core.session import Session
    from .ui import user_actions
    from .ui.document import SessionDocument

    _app()

    def made():  # made afresh for each part, so that nothing but the document holds its arrays
        rng = np.random.default_rng(0)
        return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                       w_query=rng.normal(size=(heads, d, d)) / np.sqrt(d), w_key=rng.normal(size=(heads, d, d)) / np.sqrt(d),
                       w_value=rng.normal(size=(heads, d, d)) / np.sqrt(d))

    def cell(k):
        return (5 * k) % d, (7 * k + 1) % d, f"{0.01 * (k + 1)}"

    # Memory first, on a document of its own, so that no cache of the window's computes is
    # freed while the edits are measured.
    document = SessionDocument(made())
    document.wait_idle(60.0)
    gc.collect()
    peak = _reset_peak()
    before = _resident_mb()
    for k in range(edits):
        row, col, text = cell(k)
        user_actions.set_cell(document, "W_q", row, col, text, head=k % heads)
        document.wait_idle(60.0)
    gc.collect()
    after = _peak_mb() if peak else _resident_mb()
    steps = document.undo_stack.count()
    document.shutdown()
    document, window = _window(made())
    window.inputs.setCurrentWidget(window.inputs.weights)
    model = window.inputs.weights.tables["W_q"].model
    document.wait_idle(60.0)
    _settle()
    times, cpu, computes, paints = [], [], [], []
    for k in range(edits + 2):  # the first two warm up caches and are left out
        row, col, text = cell(k)
        start, start_cpu = time.perf_counter(), time.thread_time()
        model.setData(model.index(row, col), text)
        document.wait_idle(60.0)  # returns at once: the compute ran inline
        painting = time.perf_counter()
        _settle()  # Qt paints what the edit marked dirty
        end, end_cpu = time.perf_counter(), time.thread_time()
        if k >= 2:
            times.append((end - start) * 1000.0)
            cpu.append((end_cpu - start_cpu) * 1000.0)
            paints.append((end - painting) * 1000.0)
            computes.append(document.last_compute_ms)
    _close(document, window)
    row = {"heads": heads, "d": d, "n": n, "edits": edits, "undo_steps": steps, "median_ms": _median(times),
           "gui_cpu_ms": _median(cpu), "compute_ms": _median(computes), "paint_ms": _median(paints),
           "growth_mb": None if before is None or after is None else after - before,
           "peak": peak,
           "target_ms": TARGETS["edit_ms"], "target_mb": TARGETS["edit_growth_mb"]}
    row["met"] = row["median_ms"] <= TARGETS["edit_ms"] and (row["growth_mb"] is None or row["growth_mb"] < TARGETS["edit_growth_mb"])
    return row


def bench_heatmap(sizes, repeats, runs: int = 4) -> list[dict]:
    """Our heatmap against matplotlib imshow + canvas.draw(), same matrix, same pixel size.

    Each side is timed in runs of consecutive redraws, as the window redraws while a slider is
    dragged or a table typed into; runs of ours and of matplotlib's alternate (ABAB…) so that
    drift on a shared machine slows both alike. The first redraw of every run is left out on
    both sides: it pays for the other side having just filled the CPU caches. Those left-out
    redraws of ours are reported too (``pyqtgraph_first_ms``): a 1–2 ms redraw that always
    follows a 30 ms matplotlib draw runs about twice as slow, while matplotlib's own time hardly
    changes.
    """
    import numpy as np
    import pyqtgraph as pg
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .ui.panels.matrix_view import MatrixView

    _app()
    width, height, dpi = 600, 500, 100
    widget = pg.GraphicsLayoutWidget()
    widget.resize(width, height)
    view = MatrixView("weights", signed=False)
    widget.addItem(view)
    widget.show()
    _settle()  # exposed: an unexposed window paints nothing and would time nothing
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)

    def timed_runs(sides: dict, mats) -> dict:
        """{name: (steady redraw times, first-of-run times)} over ``runs`` alternating runs;
        ``sides`` maps a name to (draw, redraws per run)."""
        out = {name: ([], []) for name in sides}
        k = 0
        for run in range(runs):
            order = list(sides.items()) if run % 2 == 0 else list(reversed(sides.items()))
            for name, (draw, count) in order:
                for r in range(count + 1):
                    m = mats[k % len(mats)]
                    k += 1
                    start = time.perf_counter()
                    draw(m)
                    out[name][1 if r == 0 else 0].append(time.perf_counter() - start)
        return out

    rows = []
    for n in sizes:
        labels = [f"t{i}" for i in range(n)]
        mats = [rng.random((n, n)) for _ in range(4)]

        def ours(m):
            view.set_matrix(m, row_labels=labels, col_labels=labels, levels=(0.0, 1.0))
            # The viewport is what a QGraphicsView paints into: repainting the view widget
            # itself would not draw the scene at all.
            widget.viewport().repaint()

        def theirs(m):
            ax.clear()
            ax.imshow(m, vmin=0.0, vmax=1.0, cmap="viridis")
            canvas.draw()

        def theirs_annotated(m):
            # Our heatmap also writes every cell's number at small sizes; matplotlib's habit
            # for that (a text per cell, as seaborn's annot=True does) is timed too.
            ax.clear()
            ax.imshow(m, vmin=0.0, vmax=1.0, cmap="viridis")
            for (i, j), value in np.ndenumerate(m):
                ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=7)
            canvas.draw()

        ours(mats[0])  # lays the view out for this size: a one-off, like matplotlib's first draw
        sides = {"ours": (ours, repeats), "theirs": (theirs, repeats)}
        if view.cell_texts():
            sides["annotated"] = (theirs_annotated, 2)  # ~0.1 s a draw: fewer suffice
        t = timed_runs(sides, mats)
        ours_ms = _median(t["ours"][0]) * 1000.0
        theirs_ms = _median(t["theirs"][0]) * 1000.0
        speedup = theirs_ms / ours_ms
        row = {"n": n, "pyqtgraph_ms": ours_ms, "matplotlib_ms": theirs_ms, "speedup": speedup,
               "pyqtgraph_first_ms": _median(t["ours"][1]) * 1000.0,
               "met": speedup >= TARGETS["heatmap_speedup"]}
        if "annotated" in t:
            row["matplotlib_annotated_ms"] = _median(t["annotated"][0]) * 1000.0
            row["speedup_annotated"] = row["matplotlib_annotated_ms"] / ours_ms
        rows.append(row)
    widget.close()
    widget.deleteLater()
    return rows


# -- large sessions and start-up, each in a fresh process ---------------------------------------
def _large_probe(n: int, heads: int) -> None:
    """Run in a child process: print one JSON line with the large-session figures."""
    import resource

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from .core.presets import build_preset

    _app()
    built = build_preset("random", {"n": n, "d": 64, "d_k": 16, "d_v": 16, "heads": heads, "seed": 0})
    start = time.perf_counter()
    document, window = _window(built.session)
    document.wait_idle(120.0)
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
        if document.computing:
            gaps["computing"] = max(gaps["computing"], gap)

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    timer.start()
    x = document.session.embeddings.copy()
    x[0, 0] += 1.0
    drawn = {"done": False}
    document.result_changed.connect(lambda _r: drawn.__setitem__("done", True))  # before: small ones are inline
    start = time.perf_counter()
    state["last"] = start
    document.edit(document.session.replace(embeddings=x), "bench edit")
    while not drawn["done"] and time.perf_counter() - start < 120:
        QApplication.processEvents()
        time.sleep(0.001)
    QApplication.processEvents()
    window.repaint()
    edit_ms = (time.perf_counter() - start) * 1000.0
    # A scroll through the token table, as a person would: the table stays virtual.
    table_ms = None
    views = getattr(getattr(window.inputs, "tokens", window.inputs), "embedding_view", None)
    if views is not None:
        t0 = time.perf_counter()
        bar = views.verticalScrollBar()
        for k in range(20):
            bar.setValue(bar.maximum() * k // 19)
            QApplication.processEvents()
            views.viewport().repaint()
        table_ms = (time.perf_counter() - t0) * 1000.0 / 20
    timer.stop()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"n": n, "heads": heads, "first_window_ms": first_ms, "edit_to_drawn_ms": edit_ms,
                      "compute_ms": document.last_compute_ms, "max_block_while_computing_ms": gaps["computing"],
                      "max_block_ms": gaps["all"], "scroll_step_ms": table_ms, "peak_mb": peak_mb}))
    sys.stdout.flush()
    os._exit(0)  # skip teardown of a 4,096-token window: its figures are printed


def bench_large(n: int, heads: int) -> dict:
    code = f"from attnexplorer.bench import _large_probe; _large_probe({n}, {heads})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "ATTNEXPLORER_TESTING": "1"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"n": n, "heads": heads, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    row = json.loads(lines[-1])
    row["met"] = (row["max_block_while_computing_ms"] <= TARGETS["large_block_ms"]
                  and row["peak_mb"] < TARGETS["large_peak_mb"])
    return row


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
    from .commands.startup_probe import COMMAND

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "ATTNEXPLORER_TESTING": "1"}
    # Installed packages start from compiled bytecode (pip compiles them); a checkout run with
    # PYTHONDONTWRITEBYTECODE would compile every module of ours on every start, which no
    # installed app does. An untimed first run of each command writes the bytecode (and warms
    # the file cache alike for both).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    baseline_cmd = [sys.executable, "-c",
                    "import torch, PySide6.QtWidgets, pyqtgraph; import time; print('imported', time.time())"]
    # The window opened as `attnexplorer --preset pronoun` opens it, then quit after its first
    # paint (commands/startup_probe.py).
    app_cmd = [sys.executable, "-c", COMMAND, "--preset", "pronoun"]
    for cmd in (baseline_cmd, app_cmd):
        subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    base, app = [], []
    for _ in range(repeats):
        for cmd, word, into in ((baseline_cmd, "imported", base), (app_cmd, "painted", app)):
            start = time.time()  # wall clock: compared with the child's own time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
            stamp = _stamp(proc, word)
            if proc.returncode != 0 or stamp is None:
                return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            into.append(stamp - start)
    extra = _median(app) - _median(base)
    return {"baseline_s": _median(base), "app_s": _median(app), "extra_s": extra, "repeats": repeats,
            "target_extra_s": TARGETS["startup_extra_s"], "met": extra <= TARGETS["startup_extra_s"]}


# -- the command ----------------------------------------------------------------------------------
def collect(quick: bool = False, device: str | None = None) -> dict:
    from .core.engine import available_devices

    devices = [device] if device else [d for d in available_devices() if d in ("cpu", "cuda")]
    started = time.perf_counter()
    results = {"machine": machine_info(), "targets": {k: v for k, v in TARGETS.items() if k != "redraw_ms"}}
    results["targets"]["redraw_ms"] = {str(k): v for k, v in TARGETS["redraw_ms"].items()}
    if quick:
        results["engine"] = bench_engine([16, 256], devices, repeats=3)
        results["stages"] = bench_stages([256], devices, repeats=2)
        results["redraw"] = bench_redraw([16, 64], repeats=3)
        results["drag"] = bench_drag(64, steps=4)
        results["edit_cost"] = bench_edit_cost(2, 64, edits=5)
        results["heatmap"] = bench_heatmap([16, 64], repeats=2, runs=2)
        results["large"] = bench_large(256, 2)
        results["startup"] = bench_startup(1)
    else:
        results["engine"] = bench_engine([16, 64, 256, 512, 1024, 2048, 4096], devices, repeats=9)
        results["stages"] = bench_stages([1024, 2048], devices, repeats=5)
        results["redraw"] = bench_redraw([16, 64, 256, 512], repeats=9)
        results["drag"] = bench_drag(512, steps=15)
        results["edit_cost"] = bench_edit_cost(16, 512)
        results["heatmap"] = bench_heatmap([16, 64, 256, 512], repeats=7)
        results["large"] = bench_large(4096, 4)
        results["startup"] = bench_startup(3)
    from .commands.fit_bench import bench_fit_gui, bench_fit_steps

    from .commands.long_bench import bench_long

    results.update(bench_long(quick))
    results["fit_steps"] = bench_fit_steps(steps=100 if quick else 300, repeats=1 if quick else 3)
    results["fit_gui"] = bench_fit_gui(128 if quick else 512, seconds=1.0 if quick else 3.0)
    # Real models (MiniLM, SmolLM2 from its cache): fresh processes of their own; not with --quick,
    # which the tests run, since opening a model there would cost a minute.
    if quick:
        results["models"] = []
    else:
        from .commands.bench_models import bench_models

        results["models"] = bench_models()
    results["seconds"] = time.perf_counter() - started
    return results


def _mark(met) -> str:
    return "  -" if met is None else (" ok" if met else " MISSED")


def format_report(r: dict) -> str:
    m = r["machine"]
    out = [f"attnexplorer bench — {m['cpu']}, {m['cores']} cores, torch {m['torch']} "
           f"({m['torch_threads']} threads), devices: {', '.join(m['devices'])}", ""]
    out.append("Engine vs bare torch softmax(QKᵀ·s)·V, d = 64 (target ≤ 1.3× at n ≥ 256)")
    out.append(f"  {'device':7}{'n':>6}{'heads':>6}{'engine ms':>11}{'bare ms':>10}{'ratio':>7}")
    for row in r["engine"]:
        out.append(f"  {row['device']:7}{row['n']:>6}{row['heads']:>6}{row['engine_ms']:>11.3f}"
                   f"{row['bare_ms']:>10.3f}{row['ratio']:>7.2f}{_mark(row['met'])}")
    if r.get("stages"):
        out.append("")
        out.append("With biases, 8 query heads sharing 2 K/V heads, RoPE or ALiBi, d = 512, d_k = 64 (target ≤ 1.3×)")
        out.append(f"  {'device':7}{'positions':>10}{'n':>6}{'engine ms':>11}{'bare ms':>10}{'ratio':>7}")
        for row in r["stages"]:
            out.append(f"  {row['device']:7}{row['positions']:>10}{row['n']:>6}{row['engine_ms']:>11.3f}"
                       f"{row['bare_ms']:>10.3f}{row['ratio']:>7.2f}{_mark(row['met'])}")
    out.append("")
    out.append("Edit → every visible panel redrawn, main window 1280×800, d = 64, 1 head")
    for row in r["redraw"]:
        target = f" (target ≤ {row['target_ms']:.0f} ms)" if row["target_ms"] else ""
        out.append(f"  n = {row['n']:>4}: {row['median_ms']:7.1f} ms{target}{_mark(row['met'])}")
    d = r["drag"]
    out.append("")
    out.append(f"Dragging the sine τ slider at N = {d['n']}: {d['redraws_per_s']:.0f} redraws/s "
               f"({d['median_ms']:.1f} ms each; target ≥ 30){_mark(d['met'])}; one undo step: {d['undo_steps'] == 1}")
    e = r.get("edit_cost")
    if e is not None:
        growth = "not measured here" if e["growth_mb"] is None else f"{e['growth_mb']:.1f} MB"
        out.append("")
        out.append(f"One W_q cell edit at {e['heads']} heads, d = d_k = d_v = {e['d']}, typed into the window's table: "
                   f"{e['median_ms']:.1f} ms until every panel is painted (target ≤ {e['target_ms']:.0f})")
        if "compute_ms" in e:
            out.append(f"  of which the engine {e['compute_ms']:.1f} ms and Qt's repaint {e['paint_ms']:.1f} ms, all on the "
                       f"GUI thread (the compute runs inline at this size); the thread's own processor time "
                       f"{e['gui_cpu_ms']:.1f} ms (less than the wall time when other work shares the machine)")
        out.append(f"  {e['edits']} edits of different cells ({e['undo_steps']} undo steps) raised "
                   f"{'peak' if e.get('peak') else 'resident'} memory by {growth} (target < {e['target_mb']:.0f})"
                   f"{_mark(e['met'])}")
    out.append("")
    out.append("Heatmap redraw vs matplotlib imshow + canvas.draw(), 600×500 px (target ≥ 10×)")
    for row in r["heatmap"]:
        out.append(f"  n = {row['n']:>4}: {row['pyqtgraph_ms']:7.2f} ms vs {row['matplotlib_ms']:7.1f} ms "
                   f"= {row['speedup']:5.1f}×{_mark(row['met'])}   (right after a matplotlib draw: "
                   f"{row['pyqtgraph_first_ms']:.2f} ms = {row['matplotlib_ms'] / row['pyqtgraph_first_ms']:.1f}×)")
        if "speedup_annotated" in row:
            out.append(f"            with a number in every cell on both sides: {row['matplotlib_annotated_ms']:.1f} ms "
                       f"= {row['speedup_annotated']:.1f}×")
    big = r["large"]
    out.append("")
    if "error" in big:
        out.append(f"Large session n = {big['n']}: FAILED: {big['error']}")
    else:
        out.append(f"Large session n = {big['n']}, {big['heads']} heads: compute {big['compute_ms']:.0f} ms, "
                   f"edit → drawn {big['edit_to_drawn_ms']:.0f} ms")
        out.append(f"  longest GUI block while computing {big['max_block_while_computing_ms']:.0f} ms (target ≤ 50), "
                   f"overall {big['max_block_ms']:.0f} ms; peak memory {big['peak_mb']:.0f} MB (target < 2048)"
                   f"{_mark(big['met'])}")
        if big.get("scroll_step_ms") is not None:
            out.append(f"  embedding table scroll step: {big['scroll_step_ms']:.1f} ms")
    s = r["startup"]
    out.append("")
    if "error" in s:
        out.append(f"Start-up: FAILED: {s['error']}")
    else:
        out.append(f"Start-up to a painted window: {s['app_s']:.2f} s vs {s['baseline_s']:.2f} s for the imports alone "
                   f"= +{s['extra_s']:.2f} s (target ≤ +0.7 s){_mark(s['met'])}")
    if "long" in r:
        from .commands.long_bench import format_long

        out += format_long(r, _mark)
    if "fit_steps" in r:
        from .commands.fit_bench import format_fit

        out += format_fit(r, _mark)
    if r.get("models"):
        from .commands.bench_models import format_rows

        out.append("")
        out.extend(format_rows(r["models"]))
    out.append("")
    out.append(f"({r['seconds']:.0f} s in all)")
    return "\n".join(out)


def run_bench(args) -> int:
    if importlib.util.find_spec("matplotlib") is None:
        # Found out now, not half a minute in, when the heatmap comparison needs it.
        print("attnexplorer bench: the heatmap comparison needs matplotlib, which is not installed; "
              "install it with: python3 -m pip install matplotlib", file=sys.stderr)
        return 2
    results = collect(quick=getattr(args, "quick", False), device=getattr(args, "device", None))
    if getattr(args, "json", False):
        print(json.dumps(results, indent=2))
    else:
        print(format_report(results))
    return 0
