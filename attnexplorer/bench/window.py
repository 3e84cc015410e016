"""The window rows of ``attnexplorer bench``: an edit redrawn, a slider dragged, one heatmap.

- ``redraw``: one cell edit → engine → every visible panel and table of the real main window
  repainted, n = 16 … 512, d = 64, one head. Targets: ≤ 16 ms at n = 64, ≤ 50 ms at n = 512.
- ``drag``: redraws per second while the sine preset's τ slider is dragged. Target: ≥ 40.
- ``heatmap``: one heatmap redraw against matplotlib ``imshow`` plus a canvas draw of the same
  matrix at the same pixel size (see ``bench_heatmap``). Target: ≥ 10× faster for n ≤ 512.
"""

from __future__ import annotations

import time
from statistics import median

from .harness import close_window, open_window, settle, start_app

TARGETS = {"redraw_ms": {64: 16.0, 512: 50.0}, "drag_per_s": 40.0, "heatmap_speedup": 10.0}


def _edit_and_paint(document, window, value: float) -> tuple[float, float]:
    """One cell edit through the document, then every resulting repaint of the window: the
    milliseconds it took and the GUI thread's processor time in them."""
    start, start_cpu = time.perf_counter(), time.thread_time()
    x = document.session.embeddings.copy()
    x[0, 0] = value
    document.edit(document.session.replace(embeddings=x), "bench edit", merge_key=("bench",))
    document.compute.wait_idle(60.0)
    settle()
    return (time.perf_counter() - start) * 1000.0, (time.thread_time() - start_cpu) * 1000.0


def bench_redraw(sizes, repeats) -> list[dict]:
    from ..core.inputs.presets import build_preset

    start_app()
    rows = []
    for n in sizes:
        built = build_preset("random", {"n": n, "d": 64, "d_k": 64, "d_v": 64, "heads": 1, "seed": 0})
        document, window = open_window(built.session)
        measured = [_edit_and_paint(document, window, 0.5 + 0.01 * r) for r in range(repeats + 2)][2:]
        times = [wall for wall, _ in measured]
        # gui_cpu_ms: the GUI thread's own processor time (the compute runs inline, on it): on a
        # machine shared with other work the wall time also holds the waits for a processor.
        row = {"n": n, "d": 64, "heads": 1, "median_ms": median(times), "gui_cpu_ms": median([cpu for _, cpu in measured]),
               "compute_ms": document.compute.last_compute_ms,
               "draw_ms": getattr(window, "last_draw_ms", None), "repeats": repeats}
        target = TARGETS["redraw_ms"].get(n)
        row["target_ms"] = target
        row["met"] = None if target is None else row["median_ms"] <= target
        rows.append(row)
        close_window(document, window)
    return rows


def bench_drag(n: int, steps: int) -> dict:
    """Drag the sine preset's τ slider across ``steps`` positions, painting after each."""
    from ..core.inputs.presets import build_preset

    start_app()
    built = build_preset("sine", {"N": n})
    document, window = open_window(built.session)
    widget = window.controls.param_widgets["tau"]
    slider = widget.slider
    slider.setSliderDown(True)
    lo, hi = slider.minimum(), slider.maximum()
    positions = [lo + (hi - lo) * (k % 40 + 10) // 60 for k in range(steps + 2)]
    times, cpu = [], []
    for k, pos in enumerate(positions):
        start, start_cpu = time.perf_counter(), time.thread_time()
        slider.setValue(pos)
        document.compute.wait_idle(60.0)
        settle()
        if k >= 2:
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
    slider.setSliderDown(False)
    undo_steps = document.undo_stack.count()
    close_window(document, window)
    per_s = 1.0 / median(times)
    # gui_cpu_ms: the GUI thread's own processor time a frame (the compute runs inline, on it):
    # on a machine shared with other work the wall time also holds the waits for a processor.
    return {"n": n, "steps": steps, "median_ms": median(times) * 1000.0, "redraws_per_s": per_s,
            "gui_cpu_ms": median(cpu) * 1000.0,
            "undo_steps": undo_steps, "target_per_s": TARGETS["drag_per_s"], "met": per_s >= TARGETS["drag_per_s"]}

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

    from ..ui.panels.matrix_view import MatrixView

    start_app()
    width, height, dpi = 600, 500, 100
    widget = pg.GraphicsLayoutWidget()
    widget.resize(width, height)
    view = MatrixView("weights", signed=False)
    widget.addItem(view)
    widget.show()
    settle()  # exposed: an unexposed window paints nothing and would time nothing
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
        ours_ms = median(t["ours"][0]) * 1000.0
        theirs_ms = median(t["theirs"][0]) * 1000.0
        speedup = theirs_ms / ours_ms
        row = {"n": n, "pyqtgraph_ms": ours_ms, "matplotlib_ms": theirs_ms, "speedup": speedup,
               "pyqtgraph_first_ms": median(t["ours"][1]) * 1000.0,
               "met": speedup >= TARGETS["heatmap_speedup"]}
        if "annotated" in t:
            row["matplotlib_annotated_ms"] = median(t["annotated"][0]) * 1000.0
            row["speedup_annotated"] = row["matplotlib_annotated_ms"] / ours_ms
        rows.append(row)
    widget.close()
    widget.deleteLater()
    return rows

