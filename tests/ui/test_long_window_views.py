"""A long session's heatmaps (ui/panels/long_matrix.py): they fill in while the streamed pass
runs, pool by max or mean as View ▸ Zoomed-out heatmaps says, and a zoomed region too large
for exact cells is pooled from exact tiles on a worker. Every session here is forced down the
streamed path at a size the dense engine can check."""

import threading
import warnings

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from ui_helpers import close_window, open_window

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.compute.long import result as long_result
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.ui.panels import long_matrix
from attnexplorer.ui.panels.downsample import block_reduce


def _pooled(matrix, fy, fx, pool):
    """What a heatmap shows of ``matrix`` (NaN where blocked) pooled by fy × fx blocks."""
    rows, cols = matrix.shape
    padded = np.full((-(-rows // fy) * fy, -(-cols // fx) * fx), np.nan)
    padded[:rows, :cols] = matrix
    blocks = padded.reshape(padded.shape[0] // fy, fy, padded.shape[1] // fx, fx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks: all blocked, blank
        return (np.nanmax if pool == "max" else np.nanmean)(blocks, axis=(1, 3))


@pytest.fixture
def long_window(qtbot, monkeypatch):
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    monkeypatch.setattr(long_result, "OVERVIEW_CELLS", 8)  # 80 tokens: 10 × 10 cells a pooled cell
    monkeypatch.setattr(long_matrix, "TILE_CELLS", 100)
    session = build_preset("random", {"n": 80, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    session = session.replace(mask=Mask("causal"))
    document, window = open_window(session)
    assert document.compute.wait_idle(30)
    weights = next(p for p in window.panels if p.kind == "weights")
    window.docks["weights"].raise_()
    qtbot.waitUntil(lambda: not weights.is_stale)
    yield document, window, weights
    close_window(document, window)


def _masked_weights(session, head=0):
    dense = compute(session)
    return np.where(dense.mask, np.nan, dense.weights[head])


def test_the_heatmap_fills_in_while_the_pass_runs(long_window, qtbot, monkeypatch):
    import attnexplorer.core.compute.long.streamed as stream_module
    import attnexplorer.app.compute as runner_module

    document, _window, weights = long_window
    monkeypatch.setattr(stream_module, "BLOCK_BYTES", 1)  # a block per pooled row of cells
    monkeypatch.setattr(runner_module, "INLINE_CELLS", 0)
    monkeypatch.setattr(runner_module, "PROGRESS_S", 0.0)
    seen = []
    draw = weights.draw_partial
    shown = threading.Event()

    def look():
        # Each heatmap draws the newest report at a turn of the event loop of its own: what
        # it shows right after is the partial overview.
        draw()
        view = weights.view
        if view.rows_done is not None:
            seen.append((document.session, view.rows_done, np.array(view.image.image), weights.heading.text,
                         view.pending_rows.isVisible(), view.pending_rows.rect().top()))
            shown.set()

    real = runner_module.compute_any

    def after_a_partial_is_shown(*args, progress, **kwargs):
        # A partial overview drawn after its result came is not drawn at all: the pass waits
        # at its first report until the heatmap has drawn one.
        def report(*values):
            progress(*values)
            shown.wait(30)

        return real(*args, progress=report, **kwargs)

    monkeypatch.setattr(runner_module, "compute_any", after_a_partial_is_shown)
    monkeypatch.setattr(weights, "draw_partial", look)
    edited = document.session.replace(embeddings=document.session.embeddings * 1.5)
    document.edit(edited, "scale")
    assert document.compute.wait_idle(30)
    assert seen, "no partial overview was drawn"
    expect = _pooled(_masked_weights(edited), 10, 10, "max")
    for session, done, image, heading, pending, top in seen:
        assert session is edited and 0 < done < 80
        rows = done // 10
        np.testing.assert_allclose(image[:rows], expect[:rows], atol=1e-6)
        assert np.isnan(image[rows:]).all()  # not reached yet: nothing drawn there
        assert pending and top == done
        assert "— computing — max-pooled" in heading
    # Then the result: whole, exact, nothing greyed out.
    qtbot.waitUntil(lambda: weights.view.rows_done is None)
    assert not weights.view.pending_rows.isVisible()
    np.testing.assert_allclose(weights.view.image.image, expect, atol=1e-6)


def test_mean_pooling_is_a_remembered_view_setting(long_window, qtbot):
    document, window, weights = long_window
    window.set_overview_pool("mean")
    assert document.compute.wait_idle(30)
    qtbot.waitUntil(lambda: "mean-pooled" in weights.heading.text)
    assert document.result.streamed.overviews["weights"].pool == "mean"
    assert weights.heading.text.endswith("— mean-pooled, 10×10 cells a pixel")
    np.testing.assert_allclose(weights.view.image.image, _pooled(_masked_weights(document.session), 10, 10, "mean"),
                               atol=1e-6)
    assert window.settings.overview_pool() == "mean" and window.pool_actions["mean"].isChecked()
    window.set_overview_pool("max")
    assert document.compute.wait_idle(30)
    qtbot.waitUntil(lambda: "max-pooled" in weights.heading.text)


def test_a_zoomed_region_too_big_for_exact_cells_is_pooled_from_exact_tiles(qtbot, monkeypatch):
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    monkeypatch.setattr(long_result, "OVERVIEW_CELLS", 16)  # 2,048 tokens: 128 × 128 cells a pooled cell
    session = build_preset("random", {"n": 2048, "d": 8, "d_k": 4, "d_v": 4, "heads": 1}).session
    session = session.replace(mask=Mask("causal"))
    document, window = open_window(session)
    try:
        assert document.compute.wait_idle(60)
        weights = next(p for p in window.panels if p.kind == "weights")
        window.docks["weights"].raise_()
        qtbot.waitUntil(lambda: not weights.is_stale)
        view = weights.view
        # 900 × 900 cells in view: more than an exact region (TILE_CELLS), more than the
        # panel's pixels, under a quarter of the matrix.
        view.vb.setRange(xRange=(300, 1200), yRange=(1000, 1900), padding=0)
        qtbot.waitUntil(lambda: not view.zoom_pending and view.image_rect.width() < 2048, timeout=20000)
        fy, fx = view.image_factor
        assert 1 < fy < 128 and 1 < fx < 128  # pooled, finer than the overview
        assert "max-pooled" in weights.heading.text and f"{fy}×{fx} cells a pixel" in weights.heading.text
        rect = view.image_rect
        r0, r1, c0, c1 = int(rect.top()), int(rect.bottom()), int(rect.left()), int(rect.right())
        assert r0 <= 1000 and r1 >= 1900 and c0 <= 300 and c1 >= 1200
        expect = _pooled(_masked_weights(session)[r0:r1, c0:c1], fy, fx, "max")
        np.testing.assert_allclose(view.image.image, expect, atol=1e-6)
        # Zoomed out again: the overview, and no region is being made.
        view.reset_zoom()
        qtbot.waitUntil(lambda: view.image_rect.width() == 2048)
        assert not view.zoom_pending and view.image_factor[0] >= 128
    finally:
        close_window(document, window)


def test_a_dense_heatmap_pools_by_mean_too():
    rng = np.random.default_rng(1)
    m = rng.random((37, 23))
    blocked = rng.random((37, 23)) < 0.3
    shown = np.where(blocked, np.nan, m)
    np.testing.assert_allclose(block_reduce(m, 4, 5, signed=False, blocked=blocked, pool="mean"),
                               _pooled(shown, 4, 5, "mean"), atol=1e-12)
    np.testing.assert_allclose(block_reduce(m, 4, 5, signed=False, blocked=blocked), _pooled(shown, 4, 5, "max"))


def test_a_progress_report_draws_one_heatmap_a_turn_of_the_event_loop(long_window, qtbot, monkeypatch):
    # Drawn all at once, the heatmaps' partial overviews and their paint were one long block
    # of the GUI thread at 16,384 tokens; each now draws at a turn of its own, the newest
    # report only.
    import attnexplorer.app.compute as runner_module
    from attnexplorer.core.compute.long.pooling import Pooled

    document, window, _weights = long_window
    for kind in ("scores", "scaled_scores"):
        window.docks[kind].show()
        window.docks[kind].raise_()
    overviews = {}
    for name, pooled in document.result.streamed.overviews.items():
        data = np.array(pooled.data)
        data[:, 4:] = np.nan
        overviews[name] = Pooled(pooled.what, pooled.pool, pooled.fy, pooled.fx, pooled.n, data, 4 * pooled.fy)
    heatmaps = [p for p in window.panels if hasattr(p, "draw_partial") and p.is_on_screen and p.field in overviews]
    assert len(heatmaps) >= 2
    release = threading.Event()
    real = runner_module.compute_any

    def held(*args, **kwargs):
        release.wait(30)  # the edit's compute waits while the reports are drawn
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "compute_any", held)
    monkeypatch.setattr(runner_module, "INLINE_CELLS", 0)
    drawn = []
    # What else ran between two draws: a 1 ms timer (as the bench's) gets a turn between them,
    # where a zero-interval turn ran the next draw in the same pass as the paint before it.
    order = []
    ticker = QTimer()
    ticker.setTimerType(Qt.TimerType.PreciseTimer)
    ticker.timeout.connect(lambda: order.append("tick") if order and order[-1] != "tick" else None)
    for panel in heatmaps:
        draw = panel.draw_partial
        monkeypatch.setattr(panel, "draw_partial",
                            lambda draw=draw, panel=panel: (drawn.append(panel), order.append("draw"), draw()))
    ticker.start(1)
    try:
        document.edit(document.session.replace(embeddings=document.session.embeddings * 1.5), "scale")
        for _ in range(3):  # three reports before any turn: each heatmap draws once, the newest
            document.compute.overview_progress.emit(document.session, overviews)
        assert drawn == [] and all(p.view.rows_done is None for p in heatmaps)
        waiting = long_matrix.partial_draws()
        assert waiting.waiting == len(heatmaps)
        seen = []
        while waiting.waiting:
            qtbot.waitUntil(lambda: len(drawn) > len(seen), timeout=20000)
            seen.append(sum(p.view.rows_done is not None for p in heatmaps))
        qtbot.wait(20)
        assert seen == list(range(1, len(heatmaps) + 1)) and drawn == heatmaps
        assert all(p.view.rows_done == 4 * overviews[p.field].fy for p in heatmaps)
        draws = [i for i, what in enumerate(order) if what == "draw"]
        assert len(draws) == len(heatmaps)
        assert all("tick" in order[a:b] for a, b in zip(draws, draws[1:])), order
    finally:
        ticker.stop()
        release.set()
    assert document.compute.wait_idle(30)
    qtbot.waitUntil(lambda: all(p.view.rows_done is None for p in heatmaps))
