"""One head's matrix of a long result, read like a numpy array but made on demand.

A heatmap reads a matrix three ways: the whole at screen resolution, a region when zoomed
in, and single cells for numbers and hover read-outs. ``TiledMatrix`` answers the first
from the streamed pass's pooled overview, and the others with exact tiles computed from Q,
K and the row normalisers (``StreamedResult.tile``), so nothing n × n is ever made.
"""

from __future__ import annotations

import numpy as np

from .pooling import POOLED, Pooled

# What a tile or row can be read as: the pooled matrices and ALiBi's −slope·|i − j|.
TILED = tuple(POOLED) + ("position_bias",)


class TiledMatrix:
    """Matrix ``what`` ("scores", "scaled_scores", "weights", or with ALiBi "position_bias")
    of ``head`` of a ``StreamedResult``: ``shape``, ``dtype``, ``m[r0:r1, c0:c1]`` and
    ``m[i, j]`` (exact), and ``overview`` (the pooled overview of this head, a ``Pooled``
    whose data is 2-D; None when the pass made none of it)."""

    ndim = 2

    def __init__(self, streamed, head: int, what: str):
        if what not in TILED:
            raise ValueError(f"unknown matrix {what!r}")
        self.streamed = streamed
        self.head = head
        self.what = what
        self.shape = (streamed.n, streamed.n_keys)
        self.dtype = streamed.Q.dtype
        self.signed = POOLED[what][0] if what in POOLED else True

    @property
    def overview(self) -> Pooled | None:
        pooled = self.streamed.overviews.get(self.what)
        if pooled is None:
            return None
        return Pooled(pooled.what, pooled.pool, pooled.fy, pooled.fx, pooled.n, pooled.data[self.head], pooled.rows_done)

    def __getitem__(self, index):
        if not isinstance(index, tuple) or len(index) != 2:
            raise IndexError("a TiledMatrix is read by [rows, cols]")
        rows, cols = index
        single = []
        bounds = []
        for k, (i, size) in enumerate(zip((rows, cols), self.shape)):
            if isinstance(i, (int, np.integer)):
                i = int(i) + size if i < 0 else int(i)
                if not 0 <= i < size:
                    raise IndexError(f"index {i} is out of bounds for size {size}")
                single.append(k)
                i = slice(i, i + 1)
            elif not isinstance(i, slice) or i.step not in (None, 1):
                raise IndexError("a TiledMatrix is read by whole slices or single indices")
            bounds.append(i)
        tile = self.streamed.tile(self.head, bounds[0], bounds[1], self.what)
        if single:
            tile = tile[tuple(0 if k in single else slice(None) for k in range(2))]
        return tile

    def __array__(self, dtype=None, copy=None):
        # A whole long matrix is exactly what must never be made by accident.
        raise TypeError("a long session's matrix is read in tiles, not as a whole array")
