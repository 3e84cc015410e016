"""The weights' auto colour range reads its top from the matrix in place."""

from __future__ import annotations

import tracemalloc

import numpy as np

from attnexplorer.ui.panels.heatmaps import DenseHeatmap


def causal(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def test_the_largest_weight_skips_blocked_cells_and_counts_them_as_zero():
    data = np.array([[0.2, 9.0], [0.5, 0.1]], dtype=np.float32)
    assert DenseHeatmap(data, causal(2), False, "max").largest() == np.float32(0.5)
    assert DenseHeatmap(data, None, False, "max").largest() == 9.0
    negative = -np.ones((2, 2), dtype=np.float32)
    assert DenseHeatmap(negative, causal(2), False, "max").largest() == 0.0   # a blocked cell is 0
    assert DenseHeatmap(np.zeros((0, 0), dtype=np.float32), None, False, "max").largest() == 1.0


def test_the_largest_weight_makes_no_copy_of_the_matrix():
    # A 4,096-token session's weights are 64 MB a head in float32; a float64 copy doubled that.
    n = 1024
    data = np.random.default_rng(0).random((n, n), dtype=np.float32)
    blocked = causal(n)
    heatmap = DenseHeatmap(data, blocked, False, "max")
    tracemalloc.start()
    try:
        top = heatmap.largest()
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert top == data[~blocked].max()
    assert peak < data.nbytes / 2, peak   # the mask's negation (n² bytes) is all it may make
