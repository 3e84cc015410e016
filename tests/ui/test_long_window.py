"""A long session in the window: computed by the streamed path (core/compute/long), never n × n."""

import threading
import warnings

import numpy as np
import pytest
from ui_helpers import close_window, open_window

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.compute.long import result as long_result
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.ui.panels import long_matrix


@pytest.fixture
def long_window(qtbot, monkeypatch):
    # Every session counts as long: the streamed path at a size the tests can compare densely.
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    monkeypatch.setattr(long_result, "OVERVIEW_CELLS", 8)  # pooled 5 × 5 cells, as 16k tokens are
    # Exact regions of at most 400 cells: the whole 40 × 40 shows the overview, as 16k would.
    monkeypatch.setattr(long_matrix, "TILE_CELLS", 400)
    session = build_preset("random", {"n": 40, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    session = session.replace(mask=Mask("causal"))
    document, window = open_window(session)
    assert document.compute.wait_idle()
    yield document, window
    close_window(document, window)


def test_a_long_session_is_computed_streamed_in_the_window(long_window):
    document, _window = long_window
    result = document.result
    assert result.streamed is not None and result.weights is None and result.scores is None
    dense = compute(document.session)
    np.testing.assert_allclose(result.head_outputs, dense.head_outputs, rtol=1e-6, atol=1e-6)


def _panel(window, kind):
    return next(p for p in window.panels if p.kind == kind)


def test_heatmaps_show_the_pooled_overview_and_exact_cells_when_zoomed(long_window, qtbot):
    from PySide6.QtWidgets import QApplication

    document, window = long_window
    dense = compute(document.session)
    weights = _panel(window, "weights")
    window.docks["weights"].raise_()
    qtbot.waitUntil(lambda: not weights.is_stale)
    view = weights.view
    assert view.matrix_shape == (40, 40) and view.overview_factor == (5, 5)
    assert weights.heading.text == "Weights — head 0 — max-pooled, 5×5 cells a pixel"
    # Zoomed out: each pixel holds its block's largest weight (blank where all are blocked).
    masked = np.where(dense.mask, np.nan, dense.weights[0])
    blocks = masked.reshape(8, 5, 8, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks: all blocked, blank
        expect = np.where(np.isnan(blocks).all(axis=(1, 3)), np.nan, np.nanmax(blocks, axis=(1, 3)))
    np.testing.assert_allclose(view.image.image, expect, atol=1e-6)
    # Zoomed in on a few cells: the drawn image is the exact weights, the mask's cells blank.
    view.vb.setRange(xRange=(10, 18), yRange=(20, 26), padding=0)
    QApplication.processEvents()
    assert view.image_factor == (1, 1)
    rect = view.image_rect
    r0, c0 = int(rect.top()), int(rect.left())
    shown = view.image.image
    expect = np.where(dense.mask, np.nan, dense.weights[0])[r0:r0 + shown.shape[0], c0:c0 + shown.shape[1]]
    np.testing.assert_allclose(shown, expect, atol=1e-6)
    assert view.describe_cell(25, 11).endswith(theme_value(dense.weights[0, 25, 11]))


def theme_value(x):
    from attnexplorer.ui.panels import theme

    return theme.format_value(float(x), 5)


def test_the_selected_query_row_is_exact(long_window, qtbot):
    document, window = long_window
    dense = compute(document.session)
    query = _panel(window, "query")
    document.selection.set(query=30, key=3)
    window.docks["query"].raise_()
    qtbot.waitUntil(lambda: not query.is_stale)
    np.testing.assert_allclose(query.weight_heights(), dense.weights[0, 30], atol=1e-6)


@pytest.mark.parametrize("positions", [None, "alibi", "rope"])
def test_every_panel_draws_a_long_session_without_n_by_n(qtbot, monkeypatch, positions):
    from PySide6.QtWidgets import QApplication

    from attnexplorer.core.inputs.stages import Positions

    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    session = build_preset("random", {"n": 24, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    if positions is not None:
        session = session.replace(positions=Positions(positions))
    document, window = open_window(session)
    try:
        assert document.compute.wait_idle() and document.result.streamed is not None
        for kind, dock in window.docks.items():
            dock.raise_()
            QApplication.processEvents()
        document.selection.set(head=1, query=7, key=2)
        QApplication.processEvents()
        window.repaint()
    finally:
        close_window(document, window)


def test_a_newer_edit_cancels_a_long_compute_and_progress_is_shown(qtbot, monkeypatch):
    import attnexplorer.core.compute.long.streamed as stream_module
    import attnexplorer.app.compute as runner_module
    from attnexplorer.core.compute.long import Cancelled
    from attnexplorer.ui.document import SessionDocument

    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    monkeypatch.setattr(stream_module, "BLOCK_BYTES", 1)  # a block per query row
    monkeypatch.setattr(runner_module, "INLINE_CELLS", 0)
    monkeypatch.setattr(runner_module, "PROGRESS_S", 0.0)
    outcomes = []
    real = long_result.stream
    # The first edit's compute waits, once started, until the second edit is made: the second
    # then supersedes a compute that is running (made at once, the first could be dropped
    # before its worker ever started it, which is right too, but not what this test is about).
    armed, started, second_made = threading.Event(), threading.Event(), threading.Event()

    def recording(*args, **kwargs):
        if armed.is_set() and not started.is_set():
            started.set()
            second_made.wait(30)
        try:
            made = real(*args, **kwargs)
        except Cancelled:
            outcomes.append("cancelled")
            raise
        outcomes.append("done")
        return made

    monkeypatch.setattr(long_result, "stream", recording)
    session = build_preset("random", {"n": 300, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    document = SessionDocument(session)
    messages = []
    document.message.connect(messages.append)
    try:
        assert document.compute.wait_idle(30)
        outcomes.clear()
        armed.set()
        first = session.replace(embeddings=session.embeddings * 0.5)
        last = session.replace(embeddings=session.embeddings * 2.0)
        document.edit(first, "first")
        qtbot.waitUntil(started.is_set, timeout=30000)
        document.edit(last, "second")
        second_made.set()
        assert document.compute.wait_idle(30)
        assert outcomes == ["cancelled", "done"]
        assert document.result.is_for(last) and document.result.streamed is not None
        assert any(m.startswith("Computing 300 tokens × 2 heads: ") and m.endswith("% of the rows") for m in messages)
    finally:
        document.shutdown()


def test_a_panel_coming_on_screen_does_not_recompute_a_long_result(long_window, qtbot):
    document, window = long_window
    published = []
    document.result_changed.connect(published.append)
    for dock in window.docks.values():
        dock.raise_()
    qtbot.wait(50)
    assert document.compute.wait_idle() and published == []
