"""Which picture of its matrix a ``MatrixView``'s image shows, at what level of detail.

Zoomed out, the image is the heatmap's overview: the whole matrix at about the view's pixel
size. Zoomed in past that, it is a region: the cells in view (and half a view more on each
side, so a little panning reuses it) at a power-of-two number of cells per pixel, down to
every cell exactly. The heatmap (``heatmaps.DenseHeatmap`` or ``LongHeatmap``) makes the
pictures; this decides which one is shown and keeps the region and the worker request of a
long one (a newer request, or the view moving on, cancels it). It also keeps how a dense
matrix is pooled into pixels, and shades the rows a long compute has not reached yet.
"""

from __future__ import annotations

import weakref
from typing import Callable

import numpy as np
from PySide6.QtCore import QRectF

from .downsample import factor_for
from .heatmaps import region_worker
from .overlays import place_pending_rows


class ImageDetail:
    """The overview and region shown by ``view``'s ``image`` item (see the module);
    ``pending_rows`` is the shade over the rows a long compute has not reached."""

    def __init__(self, view, image, pending_rows):
        # A proxy, not the view itself: a view ↔ detail cycle would leave the view to the
        # garbage collector, which may free it after Qt has torn the scene down (a crash at exit).
        self.view = weakref.proxy(view)
        self.image = image
        self.pending_rows = pending_rows
        self.heatmap = None
        # How a zoomed-out dense matrix is pooled into pixels ("max" or "mean"; a long matrix's
        # overview is pooled as its result was computed).
        self.pool = "max"
        self.overview: np.ndarray | None = None
        self.overview_factor = (1, 1)
        self.region: tuple | None = None
        self.image_rect = QRectF()
        self.image_shape: tuple = ()
        self.image_factor = (1, 1)
        # Told when the picture's cells per pixel change (a panel's heading says them).
        self.on_image_changed: Callable[[], None] | None = None
        # A long matrix's region being pooled from exact tiles on the worker: (serial, region).
        self._zoom_token = None
        self._zoom_serial = 0
        self._zoom_connected = False

    def pixels(self) -> tuple[float, float]:
        """(width, height) in pixels the cells are drawn on (a guess until laid out)."""
        vb = self.view.vb
        width, height = vb.width(), vb.height()
        return (width if width > 1 else 600.0, height if height > 1 else 600.0)

    def overview_factor_wanted(self) -> tuple[int, int]:
        width, height = self.pixels()
        rows, cols = self.view.matrix_shape
        return factor_for(rows, height), factor_for(cols, width)

    def build_overview(self) -> None:
        """The whole matrix at about the view's pixel size, once per new matrix (or resize)."""
        self.overview, self.overview_factor = self.heatmap.overview(*self.overview_factor_wanted())
        place_pending_rows(self.pending_rows, self.rows_done, self.view.matrix_shape)

    @property
    def rows_done(self) -> int | None:
        """How many rows a long compute still running has reached (None: the matrix is whole)."""
        return None if self.heatmap is None else self.heatmap.rows_done

    @property
    def pooled_by(self) -> str | None:
        """How the picture now shown pools cells into pixels ("max", "mean"), or None when it
        shows every cell."""
        return None if self.image_factor == (1, 1) or self.heatmap is None else self.heatmap.pool

    def set_pool(self, pool: str) -> None:
        """Pool a zoomed-out dense matrix by ``pool`` ("max" or "mean")."""
        if pool not in ("max", "mean"):
            raise ValueError(f"unknown pooling {pool!r}; use 'max' or 'mean'")
        if pool != self.pool:
            self.pool = pool
            # A long matrix's overview keeps the pool it was computed with.
            if self.heatmap is not None and self.heatmap.set_pool(pool):
                self.build_overview()
                self.update(force=True)

    def view_changed(self) -> None:
        """The view was panned, zoomed or resized: show the picture that fits it now."""
        if self.heatmap is not None and self.overview_factor_wanted() != self.overview_factor:
            self.build_overview()  # resized: the overview is made for the pixels it has
            self.update(force=True)
        else:
            self.update()

    def update(self, force: bool = False) -> None:
        """Show the overview, or, zoomed in past it, the visible region in finer detail.

        The region is the visible cells and half a view more on each side, reduced by a
        power of two no bigger than the cells per pixel (1: every cell, exactly), so panning
        a little or zooming within the same power of two reuses it. A long matrix's region
        is exact cells, or, with more than ``long_matrix.TILE_CELLS`` cells in view, pooled
        from exact tiles on a worker (the overview stands in until it is there).
        """
        if self.heatmap is None:
            return
        spec = self.view.visible_cells()
        oy, ox = self.overview_factor
        if spec is not None and (oy, ox) != (1, 1):
            r0, r1, c0, c1, _w, _h = spec
            width, height = self.pixels()
            need_y, need_x = factor_for(r1 - r0, height), factor_for(c1 - c0, width)
            if need_y < oy or need_x < ox:
                shown = self.heatmap.zoom(self, r0, r1, c0, c1, need_y, need_x, force)
                if shown == "shown":
                    return
                if shown == "pending":
                    if force or self.region is not None:
                        self._show_overview()
                    return
        self.cancel_zoom()
        if force or self.region is not None:
            self._show_overview()

    def _show_overview(self) -> None:
        rows, cols = self.view.matrix_shape
        self.region = None
        self._show_image(self.overview, QRectF(0, 0, cols, rows), self.overview_factor)

    # -- what a heatmap asks when zoomed in --------------------------------------------------
    def covers(self, r0: int, r1: int, c0: int, c1: int, fy: int, fx: int) -> bool:
        """Whether the region shown holds cells r0:r1 × c0:c1 at fy × fx cells per pixel."""
        cur = self.region
        return (cur is not None and cur[4:] == (fy, fx) and cur[0] <= r0 and r1 <= cur[1] and cur[2] <= c0
                and c1 <= cur[3])

    def margin_region(self, r0: int, r1: int, c0: int, c1: int, fy: int, fx: int) -> tuple[int, int, int, int]:
        """The visible cells and half a view more on each side, on whole blocks of fy × fx."""
        rows, cols = self.view.matrix_shape
        span_r, span_c = r1 - r0, c1 - c0
        R0 = max(0, (r0 - span_r // 2) // fy * fy)
        C0 = max(0, (c0 - span_c // 2) // fx * fx)
        R1 = min(rows, R0 + -(-(r1 + span_r // 2 - R0) // fy) * fy)
        C1 = min(cols, C0 + -(-(c1 + span_c // 2 - C0) // fx) * fx)
        return R0, R1, C0, C1

    def show_region(self, region: tuple, image: np.ndarray) -> None:
        """Show ``image``, the cells (R0, R1, C0, C1) at (fy, fx) cells per pixel."""
        R0, R1, C0, C1, fy, fx = region
        self.region = region
        self._show_image(image, QRectF(C0, R0, C1 - C0, R1 - R0), (fy, fx))

    @property
    def zoom_region(self) -> tuple | None:
        """The region being made on the worker, or None."""
        return None if self._zoom_token is None else self._zoom_token[1]

    def request_region(self, region: tuple, job) -> None:
        """Have ``job(cancelled)`` make ``region``'s image on the shared worker; it is shown
        when it comes back unless the view has moved on (``cancel_zoom``, a newer request)."""
        self._zoom_serial += 1
        token = self._zoom_token = (self._zoom_serial, region)
        worker = region_worker()
        if not self._zoom_connected:
            worker.done.connect(self._on_region_done)
            self._zoom_connected = True
        worker.request(id(self), token, job)

    def cancel_zoom(self) -> None:
        if self._zoom_token is not None:
            self._zoom_token = None
            region_worker().cancel(id(self))

    def _on_region_done(self, key, token, image) -> None:
        if key != id(self) or token != self._zoom_token:
            return  # another view's, or superseded
        self._zoom_token = None
        if image is None:
            return  # cancelled or failed: the overview stays
        self.show_region(token[1], image)
        if self.on_image_changed is not None:
            self.on_image_changed()

    def _show_image(self, image: np.ndarray, rect: QRectF, factor: tuple[int, int]) -> None:
        self.image.setImage(image, autoLevels=False, levels=self.view.levels)
        if rect != self.image_rect or image.shape != self.image_shape:
            self.image.setRect(rect)
            self.image_rect = QRectF(rect)
            self.image_shape = image.shape
        changed = factor != self.image_factor
        self.image_factor = factor
        if changed and self.on_image_changed is not None:
            self.on_image_changed()

    def clear(self) -> None:
        """Show nothing."""
        self.pending_rows.setVisible(False)
        self.image.clear()
        self.heatmap = self.overview = self.region = None
        self.cancel_zoom()
        self.image_rect = QRectF()
        self.image_shape = ()
