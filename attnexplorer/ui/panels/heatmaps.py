"""What a ``MatrixView`` draws of its matrix: the dense heatmap and the long heatmap.

``MatrixView`` is the frame (axes, colour bar, hatch, selection, notes, hover and clicks) and
decides which part of the matrix is in view at how many cells per pixel; one of these two
makes the pictures for it:

- ``DenseHeatmap``: a matrix held whole as an array. The overview is the array reduced to
  the view's pixels (``block_reduce``, by max or mean), a zoomed region is reduced from the
  array's part on the GUI thread (milliseconds), and cells are read from the array.
- ``LongHeatmap``: a long session's matrix (core/compute/long), never made whole. The overview is
  the streamed pass's pooled overview pooled again; a region is exact tiles when small, or
  pooled from exact tiles on the shared worker (``long_matrix.region_worker``) while the
  overview stands in; while the pass still runs (``PartialMatrix``) only the rows done so far.

``heatmap_for(matrix, ...)`` picks the one that fits the matrix given.
"""

from __future__ import annotations

import numpy as np

from . import long_matrix
from .downsample import block_reduce
from .long_matrix import PartialMatrix, pooled_overview, pooled_region, region_worker


def pow2_floor(value: int) -> int:
    """The largest power of two ≤ ``value`` (≥ 1)."""
    return 1 << (max(1, int(value)).bit_length() - 1)


class DenseHeatmap:
    """The pictures of a matrix held whole (an array). ``pool`` ("max"/"mean") is how its
    zoomed-out pictures pool cells into pixels."""

    rows_done = None

    def __init__(self, data: np.ndarray, blocked: np.ndarray | None, signed: bool, pool: str):
        self.data = data
        self.blocked = blocked
        self.signed = signed
        self.pool = pool
        self._buffer: np.ndarray | None = None

    def cells(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """The cells [r0:r1, c0:c1] as drawn: the values, NaN where blocked (a copy only then)."""
        block = self.data[r0:r1, c0:c1]
        if self.blocked is None:
            return block
        out = np.array(block, dtype=block.dtype if block.dtype.kind == "f" else np.float64)
        np.copyto(out, np.nan, where=self.blocked[r0:r1, c0:c1])
        return out

    def overview(self, fy: int, fx: int) -> tuple[np.ndarray, tuple[int, int]]:
        """The whole matrix at ``fy`` × ``fx`` cells per pixel, and that factor."""
        if (fy, fx) != (1, 1):
            self._buffer = None
            return block_reduce(self.data, fy, fx, signed=self.signed, blocked=self.blocked, pool=self.pool), (fy, fx)
        if self.blocked is None:
            return self.data, (1, 1)
        # One reused buffer, NaN (transparent, so the hatch shows) where blocked.
        dtype = self.data.dtype if self.data.dtype.kind == "f" else np.float64
        if self._buffer is None or self._buffer.shape != self.data.shape or self._buffer.dtype != dtype:
            self._buffer = np.empty(self.data.shape, dtype=dtype)
        np.copyto(self._buffer, self.data)
        np.copyto(self._buffer, np.nan, where=self.blocked)
        return self._buffer, (1, 1)

    def zoom(self, view, r0: int, r1: int, c0: int, c1: int, need_y: int, need_x: int, force: bool) -> str:
        """Show the cells in view (and a margin) at ``need_y`` × ``need_x`` cells per pixel
        rounded down to a power of two (at most the overview's), reusing the region shown
        when it covers them."""
        view.cancel_zoom()
        oy, ox = view.overview_factor
        fy, fx = min(pow2_floor(need_y), oy), min(pow2_floor(need_x), ox)
        if not force and view.covers(r0, r1, c0, c1, fy, fx):
            return "shown"
        R0, R1, C0, C1 = view.margin_region(r0, r1, c0, c1, fy, fx)
        if (fy, fx) == (1, 1):
            image = self.cells(R0, R1, C0, C1)
        else:
            blocked = None if self.blocked is None else self.blocked[R0:R1, C0:C1]
            image = block_reduce(self.data[R0:R1, C0:C1], fy, fx, signed=self.signed, blocked=blocked, pool=self.pool)
        view.show_region((R0, R1, C0, C1, fy, fx), image)
        return "shown"

    def value(self, row: int, col: int) -> float:
        return float(self.data[row, col])

    def largest(self) -> float:
        """The largest value of an unblocked cell (1.0 for an empty matrix): an auto colour
        range's top."""
        values = self.data
        if not values.size:
            return 1.0
        # Read in place: a float64 copy of a 4,096-token matrix (and another from np.where)
        # raised the window's peak memory by 128 MB when this colour range became the default.
        if self.blocked is not None and self.blocked.any():
            return float(np.max(values, where=~self.blocked, initial=0.0))
        return float(values.max())

    def set_pool(self, pool: str) -> bool:
        """Pool the zoomed-out pictures by ``pool`` from now on; True: they must be made again."""
        self.pool = pool
        return True


class LongHeatmap:
    """The pictures of a long session's matrix (a ``TiledMatrix``, or a ``PartialMatrix``
    while its pass still runs): its overview's pool is the one it was computed with."""

    def __init__(self, data, blocked, signed: bool):
        self.data = data
        self.blocked = blocked
        self.signed = signed

    @property
    def pool(self) -> str:
        return self.data.overview.pool

    @property
    def rows_done(self) -> int | None:
        """How many rows the pass still running has reached (None: it is done)."""
        return self.data.rows_done if isinstance(self.data, PartialMatrix) else None

    def cells(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Exact cells [r0:r1, c0:c1] (a tile), NaN where blocked."""
        block = self.data[r0:r1, c0:c1]
        if self.blocked is None:
            return block
        out = np.array(block, dtype=block.dtype if block.dtype.kind == "f" else np.float64)
        np.copyto(out, np.nan, where=np.asarray(self.blocked[r0:r1, c0:c1]))
        return out

    def overview(self, fy: int, fx: int) -> tuple[np.ndarray, tuple[int, int]]:
        return pooled_overview(self.data, fy, fx, self.signed, self.pool)

    def zoom(self, view, r0: int, r1: int, c0: int, c1: int, need_y: int, need_x: int, force: bool) -> str | None:
        """Zoomed in: "shown" (exact cells, or a pooled region already made), "pending" (a
        pooled region is being made on the worker), or None (the overview stays)."""
        if isinstance(self.data, PartialMatrix):
            return None  # not computed yet: nothing finer than the overview exists
        oy, ox = view.overview_factor
        need_y, need_x = min(need_y, oy), min(need_x, ox)
        if (r1 - r0) * (c1 - c0) <= long_matrix.TILE_CELLS:
            view.cancel_zoom()
            if not force and view.covers(r0, r1, c0, c1, 1, 1):
                return "shown"
            R0, R1, C0, C1 = view.margin_region(r0, r1, c0, c1, 1, 1)
            if (R1 - R0) * (C1 - C0) > long_matrix.TILE_CELLS:
                R0, R1, C0, C1 = r0, r1, c0, c1  # no room for a margin: the cells in view
            view.show_region((R0, R1, C0, C1, 1, 1), self.cells(R0, R1, C0, C1))
            return "shown"
        rows, cols = self.data.shape
        if (r1 - r0) * (c1 - c0) * 4 > rows * cols:
            # Hardly zoomed in: the overview is as fine as a region would be worth (and a
            # region of most of a 16,384² matrix costs seconds of tiles).
            view.cancel_zoom()
            return None
        fy, fx = pow2_floor(need_y), pow2_floor(need_x)
        if not force and view.covers(r0, r1, c0, c1, fy, fx):
            view.cancel_zoom()
            return "shown"
        R0, C0 = r0 // fy * fy, c0 // fx * fx
        R1, C1 = min(rows, R0 + -(-(r1 - R0) // fy) * fy), min(cols, C0 + -(-(c1 - C0) // fx) * fx)
        region = (R0, R1, C0, C1, fy, fx)
        if not force and view.zoom_region == region:
            return "pending"
        matrix, blocked, pool = self.data, self.blocked, self.pool
        view.request_region(region, lambda cancelled: pooled_region(matrix, (R0, R1), (C0, C1), fy, fx, pool,
                                                                    blocked, cancelled))
        return "pending"

    def value(self, row: int, col: int) -> float:
        return float(self.data[row, col])

    def largest(self) -> float:
        """The largest value in the pooled overview: with max pooling each block's largest
        cell, so the matrix's; with mean pooling the largest block mean, a lower bound."""
        return float(np.nanmax(self.data.overview.data, initial=0.0))

    def set_pool(self, pool: str) -> bool:
        """A long matrix's overview keeps the pool its pass computed (the window computes
        it again to change it): nothing to make again here."""
        return False


def heatmap_for(matrix, blocked, signed: bool, pool: str):
    """The heatmap that draws ``matrix``: a long one for a long session's (read in tiles or
    not yet computed), else a dense one over the array."""
    if isinstance(matrix, (long_matrix.TiledMatrix, PartialMatrix)):
        return LongHeatmap(matrix, blocked, signed)
    return DenseHeatmap(np.asarray(matrix), blocked, signed, pool)


__all__ = ["DenseHeatmap", "LongHeatmap", "heatmap_for", "pow2_floor", "region_worker"]
