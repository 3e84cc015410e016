"""A long session's weights in the window (issue 27, item 19): zoomed cells write small
weights with significant digits (they read "0.000" everywhere), no number is written in a cell
the view's edge cuts (the first column's were clipped), and the weights' colours go up to the
largest weight by default at that size (0 to 1 drew a blank purple square) until the user
chooses in the View menu."""

import numpy as np
import pytest
from ui_helpers import close_window, open_window

from attnexplorer.core.compute.long import result as long_result
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask, Scale


@pytest.fixture
def long_weights(qtbot, monkeypatch):
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)  # 400 tokens go the streamed way
    session = build_preset("random", {"n": 400, "d": 8, "d_k": 4, "d_v": 4, "heads": 1}).session
    # τ = 0.25: sharp rows, so a zoomed block holds weights from 1e-2 down to 1e-8
    document, window = open_window(session.replace(mask=Mask("none"), scale=Scale("temperature", temperature=0.25)))
    assert document.compute.wait_idle(60)
    weights = next(p for p in window.panels if p.kind == "weights")
    window.docks["weights"].raise_()
    qtbot.waitUntil(lambda: not weights.is_stale)
    assert document.result.tiled
    yield document, window, weights
    close_window(document, window)


def _zoom(qtbot, view, x, y):
    view.vb.setRange(xRange=x, yRange=y, padding=0)
    qtbot.waitUntil(lambda: bool(view.numbers.cells), timeout=10000)


def test_zoomed_small_weights_show_significant_digits(long_weights, qtbot):
    _document, _window, weights = long_weights
    _zoom(qtbot, weights.view, (0, 8), (0, 8))
    cells = weights.view.numbers.cells
    assert len(cells) == 64
    texts = [text for _r, _c, text, _dark in cells]
    assert all(float(text) > 0 for text in texts), texts[:8]  # every weight here is > 0; none reads 0.000
    exact = np.asarray(weights.view.data[0:8, 0:8])  # the matrix the view was given, exact
    assert exact.max() < 0.01 and exact.min() < 1e-6
    for row, col, text, _dark in cells:
        assert abs(float(text) - exact[row, col]) <= 0.5 * exact[row, col]  # a significant digit at least


def test_no_number_in_a_cell_the_edge_cuts(long_weights, qtbot):
    _document, _window, weights = long_weights
    _zoom(qtbot, weights.view, (0.5, 8.5), (0.5, 8.5))  # columns and rows 0 and 8 half in view
    shown = {(r, c) for r, c, _t, _d in weights.view.numbers.cells}
    assert shown == {(r, c) for r in range(1, 8) for c in range(1, 8)}


def test_weights_colours_follow_the_largest_weight_by_default_when_long(long_weights, qtbot):
    document, window, weights = long_weights
    action = window.auto_weight_colors_action
    assert action.isChecked() and weights.color_range == "auto"
    top = weights.view.levels[1]
    assert ("(auto)" in weights.heading.text) == (top < 1.0)  # the heading says so when it matters
    # the user's choice stands, whatever the session's size does next
    action.trigger()
    assert not action.isChecked() and weights.color_range == "unit"
    x = document.session.embeddings.copy()
    x[0, 0] += 1.0
    document.edit(document.session.replace(embeddings=x), "edit")
    assert document.compute.wait_idle(60)
    assert not action.isChecked()


def test_a_short_session_keeps_weights_coloured_0_to_1(qtbot):
    document, window = open_window(build_preset("pronoun").session)
    try:
        assert document.compute.wait_idle(60)
        weights = next(p for p in window.panels if p.kind == "weights")
        assert not window.auto_weight_colors_action.isChecked() and weights.color_range == "unit"
    finally:
        close_window(document, window)


def test_a_dense_session_of_thousands_of_keys_colours_weights_to_the_largest(qtbot):
    # 4,096 tokens stay dense (under the budget) but a row's weights are all about 1/4,096:
    # coloured 0 to 1 the whole heatmap was one purple square.
    from attnexplorer.ui.window.main_window import MANY_KEYS

    document, window = open_window(build_preset("random", {"n": 2 * MANY_KEYS}).session)
    try:
        assert document.compute.wait_idle(120)
        assert not long_result.is_long(document.session, document.compute.dtype, document.compute.device)
        weights = next(p for p in window.panels if p.kind == "weights")
        assert window.auto_weight_colors_action.isChecked() and weights.color_range == "auto"
        assert weights.view.levels[1] < 0.1
    finally:
        close_window(document, window)
