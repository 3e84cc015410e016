"""Big matrices: reduced once to the view's pixels (block maxima), full resolution when zoomed."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest

from attnexplorer.ui.panels.downsample import block_reduce, factor_for
from attnexplorer.ui.panels.matrix_view import MatrixView


def brute(x, fy, fx, signed, blocked):
    rows, cols = -(-x.shape[0] // fy), -(-x.shape[1] // fx)
    out = np.full((rows, cols), np.nan)
    for i in range(rows):
        for j in range(cols):
            v = x[i * fy:(i + 1) * fy, j * fx:(j + 1) * fx][~blocked[i * fy:(i + 1) * fy, j * fx:(j + 1) * fx]]
            if v.size:
                out[i, j] = v[np.argmax(np.abs(v))] if signed else v.max()
    return out


@pytest.mark.parametrize("shape, fy, fx", [((37, 23), 4, 5), ((50, 50), 7, 3), ((9, 9), 1, 1), ((5, 64), 5, 64)])
@pytest.mark.parametrize("signed", [False, True])
def test_block_reduce_keeps_each_blocks_extreme_and_skips_blocked_cells(shape, fy, fx, signed):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32)
    blocked = rng.random(shape) < 0.4
    blocked[:fy, :fx] = True  # one block entirely blocked: NaN
    got = block_reduce(x, fy, fx, signed=signed, blocked=blocked)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.abs(got), np.abs(brute(x, fy, fx, signed, blocked)))
    assert np.isnan(got[0, 0])
    np.testing.assert_array_equal(block_reduce(x, fy, fx, signed=signed), brute(x, fy, fx, signed, np.zeros(shape, bool)))


def test_factor_for():
    assert factor_for(16, 400) == 1 and factor_for(4096, 400) == 11 and factor_for(400, 400) == 1


@pytest.fixture
def big_view(qtbot):
    widget = pg.GraphicsLayoutWidget()
    widget.resize(560, 480)
    view = MatrixView("weights", signed=False)
    widget.addItem(view)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    return widget, view


def test_4096_weights_show_block_maxima_and_exact_cells_when_zoomed(big_view):
    _widget, view = big_view
    n = 4096
    rng = np.random.default_rng(0)
    weights = (rng.random((n, n), dtype=np.float32) * 0.01)
    weights[1000, 3000] = 0.9  # one strong weight must survive the reduction
    causal = np.triu(np.ones((n, n), dtype=bool), 1)
    labels = [f"t{i}" for i in range(n)]
    view.set_matrix(weights, row_labels=labels, col_labels=labels, levels=(0.0, 1.0), blocked=causal)
    fy, fx = view.image_factor
    image = view.image.image
    assert image.shape == (-(-n // fy), -(-n // fx))
    assert image.shape[0] <= view.vb.height() + 1 and image.shape[1] <= view.vb.width() + 1
    assert image.dtype == np.float32  # no float64 copy of a float32 matrix
    # Above the diagonal (all blocked) NaN; a strong weight there is blocked, so not shown.
    assert np.isnan(image[0, -1])
    assert np.nanmax(image) < 0.9
    a, b = 3000 // fy, 1000 // fx
    weights[3000, 1000] = 0.8
    view.set_matrix(weights, row_labels=labels, col_labels=labels, levels=(0.0, 1.0), blocked=causal)
    image = view.image.image
    assert image[a, b] == np.float32(0.8)
    block = weights[5 * fy:6 * fy, 2 * fx:3 * fx]
    assert image[5, 2] == block[~causal[5 * fy:6 * fy, 2 * fx:3 * fx]].max()
    assert view.cell_texts() == {}
    # Zoomed in on a few cells: the real values, blocked cells NaN, and the numbers written.
    view.vb.setRange(xRange=(998, 1004), yRange=(3000, 3006), padding=0)
    assert view.image_factor == (1, 1)
    r = view.image_rect
    rows, cols = slice(int(r.top()), int(r.bottom())), slice(int(r.left()), int(r.right()))
    np.testing.assert_array_equal(view.image.image, np.where(causal[rows, cols], np.nan, weights[rows, cols]))
    texts = view.cell_texts()
    assert len(texts) == 36 and texts[(3000, 1000)] in ("0.8", ".8", "0.80", ".80", "0.800", ".800")
    # Half way: a finer reduction of the region in view, still no bigger than the pixels.
    view.vb.setRange(xRange=(0, 1024), yRange=(2048, 3072), padding=0)
    gy, gx = view.image_factor
    assert 1 < gy < fy and 1 < gx < fx
    assert view.image.image.shape[0] * gy <= 2 * 1024 + gy


def test_signed_levels_come_from_the_reduced_image_and_equal_the_full_matrix(big_view):
    _widget, view = big_view
    view.signed = True
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(2048, 2048)).astype(np.float32)
    scores[7, 9] = -37.0
    labels = [str(i) for i in range(2048)]
    view.set_matrix(scores, row_labels=labels, col_labels=labels)
    assert view.image_factor != (1, 1)
    assert view.levels == (-40.0, 40.0)
    assert np.nanmin(view.image.image) == np.float32(-37.0)
