"""One matrix as a heatmap: token axes, a colour bar, hover read-out, click to select.

``MatrixView`` is a ``pg.PlotItem`` (so its title, tick labels and colour bar travel with it
into an exported figure). It owns exactly one ``ImageItem`` and a fixed set of helper items
(hatch, selection frames, pooled cell texts) that are reused on every redraw: a redraw is
``setImage`` with fixed levels plus a few rectangle moves, whatever the size of the matrix.

Coordinates: cell (row i, column j) covers ``[j, j+1] × [i, i+1]`` in view coordinates, and
the y axis is inverted so row 0 is at the top, as a matrix is written.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QImage, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem

from ...core import display
from . import theme
from . import long_matrix
from .cell_numbers import CellNumbers
from .downsample import block_reduce, factor_for
from .long_matrix import PartialMatrix, is_long, pooled_overview, pooled_region, region_worker
from .token_axis import ShrinkingLabel, TokenAxis

# Cell numbers are written only while at most this many cells are in view (16 × 16): more
# would be too small to read.
MAX_CELL_TEXTS = 256
# The "all keys blocked" notes on fully masked rows; beyond this the hover still says so.
MAX_ROW_NOTES = 32


def _pow2_floor(value: int) -> int:
    """The largest power of two ≤ ``value`` (≥ 1)."""
    return 1 << (max(1, int(value)).bit_length() - 1)


class _Hatch(QGraphicsRectItem):
    """A grey hatched rectangle behind the image: it shows through blocked (NaN) cells."""

    def paint(self, painter, option, widget=None):
        painter.save()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(theme.HATCH_BACKGROUND)
        painter.drawRect(self.rect())
        # The pattern is laid out in device pixels, so the hatch looks the same at any zoom.
        brush = theme.HATCH_BRUSH
        device_rect = painter.transform().mapRect(self.rect())
        painter.resetTransform()
        painter.setBrush(brush)
        painter.drawRect(device_rect)
        painter.restore()


class _CellImage(pg.ImageItem):
    """The ImageItem that also reports the cell under the mouse and clicks on cells."""

    def __init__(self, view: "MatrixView"):
        super().__init__(axisOrder="row-major")
        self._view = view

    def render(self, *args, **kwargs):
        # pyqtgraph renders an indexed (colour-table) image; drawing one makes the raster
        # engine convert it on every paint. Converting once per new matrix to the format it
        # draws natively makes each repaint of an unchanged heatmap cheaper.
        result = super().render(*args, **kwargs)
        if self.qimage is not None and self.qimage.format() != QImage.Format.Format_ARGB32_Premultiplied:
            self.qimage = self.qimage.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
        return result

    def _cell(self, pos):
        # The image may be a reduced overview or a region: map to the matrix's cells.
        if self.image is None:
            return None
        rows, cols = self._view.matrix_shape
        pos = self.mapToParent(pos)
        col, row = int(math.floor(pos.x())), int(math.floor(pos.y()))
        if 0 <= row < rows and 0 <= col < cols:
            return row, col
        return None

    def hoverEvent(self, ev):
        if ev.isExit():
            self._view._hovered(None)
            return
        ev.acceptClicks(Qt.MouseButton.LeftButton)
        self._view._hovered(self._cell(ev.pos()))

    def mouseClickEvent(self, ev):
        if ev.button() != Qt.MouseButton.LeftButton:
            super().mouseClickEvent(ev)
            return
        cell = self._cell(ev.pos())
        if cell is not None:
            ev.accept()
            self._view._clicked(*cell)

    def mouseDragEvent(self, ev):
        # Only a view that draws on its cells takes drags; the others leave them to the
        # ViewBox, which pans.
        on_drag = self._view.on_drag
        if on_drag is None or ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        ev.accept()
        if ev.isStart():  # the drag is recognised a few pixels on: it began where the button went down
            on_drag(self._cell(ev.buttonDownPos()), True, False)
        on_drag(self._cell(ev.pos()), False, ev.isFinish())


class MatrixView(pg.PlotItem):
    """A heatmap of one matrix with everything a reader needs to read it.

    - ``signed=True``: diverging colour map, levels symmetric about 0; ``False``: the
      sequential map with the levels given (weights: 0..1).
    - ``on_hover(text)`` receives the read-out for the cell under the mouse ("" on leave).
    - ``on_click(row, col)`` is called when a cell is clicked.
    - ``colorbar=False`` leaves the colour bar out (panels that share one bar).
    - ``on_drag(cell, start, finish)``, when set, receives a left-button drag over the cells
      (``cell`` is (row, col) or None off the matrix) instead of the view panning.
    """

    def __init__(self, title: str | None, *, signed: bool = True, row_name: str = "query", col_name: str = "key",
                 colorbar: bool = True, on_click: Callable[[int, int], None] | None = None,
                 on_hover: Callable[[str], None] | None = None,
                 on_drag: Callable[[tuple[int, int] | None, bool, bool], None] | None = None):
        self.row_axis = TokenAxis("left")
        self.col_axis = TokenAxis("bottom")
        # No context menus: ours is the panel's; pyqtgraph's would only be built to be hidden.
        super().__init__(axisItems={"left": self.row_axis, "bottom": self.col_axis}, enableMenu=False)
        # PlotItem's own title label would make the title's width the plot's minimum width.
        # The old label is kept (hidden, zero-sized) rather than deleted: a deleted item can
        # linger in the scene's index and crash a later hover.
        self.layout.removeItem(self.titleLabel)
        self._plain_title = self.titleLabel
        self._plain_title.setVisible(False)
        self._plain_title.setMaximumSize(0, 0)
        self.titleLabel = ShrinkingLabel("", size="10pt", parent=self)
        self.layout.addItem(self.titleLabel, 0, 1)
        self.setTitle(title, size="10pt")
        self.signed = signed
        self.row_name = row_name
        self.col_name = col_name
        self.on_click = on_click
        self.on_hover = on_hover
        self.on_drag = on_drag
        self.lut = theme.DIVERGING_LUT if signed else theme.SEQUENTIAL_LUT
        self.setLabel("left", row_name)
        self.setLabel("bottom", col_name)
        self.invertY(True)
        self.hideButtons()
        self.vb.setDefaultPadding(0.0)

        self.hatch = _Hatch()
        self.hatch.setPen(QPen(Qt.PenStyle.NoPen))
        self.hatch.setZValue(-10)
        self.hatch.setVisible(False)
        self.addItem(self.hatch, ignoreBounds=True)

        self.image = _CellImage(self)
        self.image.setLookupTable(self.lut)
        self.image.setAutoDownsample(True)
        self.addItem(self.image)

        self.row_frame = QGraphicsRectItem()
        self.row_frame.setPen(theme.cosmetic_pen(theme.SELECTION_COLOR, 2.0))
        self.col_frame = QGraphicsRectItem()
        self.col_frame.setPen(theme.cosmetic_pen(theme.SELECTED_KEY_COLOR, 1.5, Qt.PenStyle.DashLine))
        for frame in (self.row_frame, self.col_frame):
            frame.setZValue(20)
            frame.setVisible(False)
            self.addItem(frame, ignoreBounds=True)

        self.colorbar = None
        if colorbar:
            cmap = theme.DIVERGING if signed else theme.SEQUENTIAL
            self.colorbar = pg.ColorBarItem(values=(-1, 1) if signed else (0, 1), colorMap=cmap, width=12,
                                            interactive=False, colorMapMenu=False)
            bar_axis = self.colorbar.getAxis("right")
            bar_axis.setTickFont(theme.tick_font())
            bar_axis.enableAutoSIPrefix(False)  # it has no title to put a prefix in
            # Inside this PlotItem's own layout (as ColorBarItem's insert_in does), so an
            # export of the plot carries its colour bar.
            self.layout.addItem(self.colorbar, 2, 5)
            self.layout.setColumnFixedWidth(4, 5)

        self.numbers = CellNumbers()
        self.numbers.setZValue(10)
        self.addItem(self.numbers, ignoreBounds=True)
        # The tick labels and titles change far less often than the matrix: Qt keeps each as
        # a pixmap at device resolution (sharp at any pixel ratio) and repaints it only when
        # the item itself changes, instead of laying its text out on every redraw. Only a
        # view's repaint uses these pixmaps: a figure export (QGraphicsScene.render onto an
        # image, SVG or PDF) paints every item afresh, so SVG and PDF keep real text.
        for item in (self.row_axis, self.col_axis, self.row_axis.label, self.col_axis.label, self.titleLabel.item):
            item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self._notes: list[pg.TextItem] = []
        self._raw: np.ndarray | None = None
        self._buffer: np.ndarray | None = None
        self._overview: np.ndarray | None = None
        self._overview_factor = (1, 1)
        self._region: tuple | None = None
        self._image_rect = QRectF()
        self._image_shape: tuple = ()
        self._image_factor = (1, 1)
        self._blocked: np.ndarray | None = None
        self._blocked_rows: np.ndarray | None = None
        self._levels = (-1.0, 1.0) if signed else (0.0, 1.0)
        self._shape = (0, 0)
        self._row_labels: tuple[str, ...] = ()
        self._col_labels: tuple[str, ...] = ()
        self._selection: tuple[int | None, int | None] = (None, None)
        self._number_format = display.DEFAULT_NUMBER_FORMAT
        # How a zoomed-out dense matrix is pooled into pixels ("max" or "mean"; a long matrix's
        # overview is pooled as its result was computed).
        self.pool = "max"
        # A long matrix's region being pooled from exact tiles on the worker: (serial, region).
        self._zoom_token = None
        self._zoom_serial = 0
        self._zoom_connected = False
        # Told when the picture's cells per pixel change (a panel's heading says them).
        self.on_image_changed: Callable[[], None] | None = None
        # Over the rows a long compute has not reached yet.
        self.pending_rows = QGraphicsRectItem()
        self.pending_rows.setPen(QPen(Qt.PenStyle.NoPen))
        self.pending_rows.setBrush(theme.PENDING_BRUSH)
        self.pending_rows.setZValue(5)
        self.pending_rows.setVisible(False)
        self.addItem(self.pending_rows, ignoreBounds=True)
        self.vb.sigRangeChanged.connect(self._on_view_changed)
        self.vb.sigResized.connect(self._on_view_changed)

    # -- reading (tests, exporters, read-outs) --------------------------------------------
    @property
    def levels(self) -> tuple[float, float]:
        return self._levels

    @property
    def data(self) -> np.ndarray | None:
        """The matrix as given (blocked cells hold their real values here)."""
        return self._raw

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """(rows, cols) of the matrix shown. (Not ``shape``: QGraphicsItem.shape() is a method.)"""
        return self._shape

    def cell_texts(self) -> dict[tuple[int, int], str]:
        """The numbers currently written in cells, by (row, col)."""
        return {(r, c): text for r, c, text, _dark in self.numbers.cells}

    def row_notes(self) -> list[str]:
        return [t.toPlainText() for t in self._notes if t.isVisible()]

    def describe_cell(self, row: int, col: int) -> str:
        """The hover read-out for one cell: row and column labels and the value (or "blocked")."""
        if self._raw is None or not (0 <= row < self._shape[0] and 0 <= col < self._shape[1]):
            return ""
        where = (f"{self.row_name} {self._row_labels[row]!r} (#{row}), "
                 f"{self.col_name} {self._col_labels[col]!r} (#{col})")
        done = self.rows_done
        if done is not None and row >= done:
            return f"{where}: not yet computed ({done:,} of {self._shape[0]:,} rows so far)"
        if done is not None:
            return f"{where}: computing; zoom in once it is done for the exact value"
        if self._blocked is not None and self._blocked[row, col]:
            if self._blocked_rows is not None and self._blocked_rows[row]:
                return f"{where}: blocked (this {self.row_name} sees no {self.col_name} at all)"
            return f"{where}: blocked by the mask"
        return f"{where} = {theme.format_value(float(self._raw[row, col]), 5)}"

    # -- drawing ----------------------------------------------------------------------------
    def set_matrix(self, data: np.ndarray, *, row_labels: Sequence[str], col_labels: Sequence[str],
                   levels: tuple[float, float] | None = None, blocked: np.ndarray | None = None,
                   blocked_rows: np.ndarray | None = None, row_note: str = "all keys blocked") -> None:
        """Show ``data`` (rows × cols). ``blocked`` (same shape, True = blocked) cells are shown
        hatched, never coloured; ``blocked_rows`` get a note written across them.

        ``levels`` defaults to symmetric nice bounds (signed) or 0..1; passing them keeps the
        colour scale fixed and skips any auto-levelling.
        """
        # A long session's matrix (core/long) is read in exact tiles and a pooled overview.
        data = data if is_long(data) else np.asarray(data)
        if data.ndim != 2:
            raise ValueError(f"MatrixView needs a 2-D matrix, got shape {data.shape}")
        any_blocked = blocked is not None and bool(blocked.any())
        self._raw = data
        self._blocked = blocked if any_blocked else None
        self._blocked_rows = blocked_rows if blocked_rows is not None and blocked_rows.any() else None
        shape = data.shape
        if shape != self._shape:
            self._shape = shape
            rows, cols = shape
            self.hatch.setRect(QRectF(0, 0, cols, rows))
            self.vb.setLimits(xMin=0, xMax=cols, yMin=0, yMax=rows)
            self.vb.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)
            self._place_selection()
        self._build_overview()
        if levels is None:
            # From the overview: its extremes are the matrix's (blocked cells left out).
            levels = theme.symmetric_levels(self._overview) if self.signed else (0.0, 1.0)
        if levels != self._levels and self.colorbar is not None:
            self.colorbar.setLevels(levels, update_items=False)
        self._levels = tuple(levels)
        self._update_display(force=True)
        self.hatch.setVisible(any_blocked)
        labels = tuple(row_labels)
        if labels != self._row_labels:
            self._row_labels = labels
            self.row_axis.set_labels(labels)
        labels = tuple(col_labels)
        if labels != self._col_labels:
            self._col_labels = labels
            self.col_axis.set_labels(labels)
        self._place_notes(row_note)
        self._update_cell_texts()

    # -- what the image shows: the whole matrix reduced, or a region at full resolution ------
    @property
    def image_rect(self) -> QRectF:
        """The matrix cells (x = column, y = row) the image currently covers."""
        return QRectF(self._image_rect)

    @property
    def overview_factor(self) -> tuple[int, int]:
        """Rows × columns of the matrix per pixel of the zoomed-out view ((1, 1): every cell)."""
        return self._overview_factor

    @property
    def image_factor(self) -> tuple[int, int]:
        """Rows × columns of the matrix per image pixel now shown ((1, 1): full resolution)."""
        return self._image_factor

    def _pixels(self) -> tuple[float, float]:
        """(width, height) in pixels the cells are drawn on (a guess until laid out)."""
        width, height = self.vb.width(), self.vb.height()
        return (width if width > 1 else 600.0, height if height > 1 else 600.0)

    def _overview_factor_wanted(self) -> tuple[int, int]:
        width, height = self._pixels()
        rows, cols = self._shape
        return factor_for(rows, height), factor_for(cols, width)

    def _cells(self, r0: int, r1: int, c0: int, c1: int, *, copy_ok: bool = True) -> np.ndarray:
        """The cells [r0:r1, c0:c1] as drawn: the values, NaN where blocked (a copy only then)."""
        block = self._raw[r0:r1, c0:c1]
        if self._blocked is None:
            return block
        out = np.array(block, dtype=block.dtype if block.dtype.kind == "f" else np.float64)
        np.copyto(out, np.nan, where=self._blocked[r0:r1, c0:c1])
        return out

    def _build_overview(self) -> None:
        """The whole matrix at about the view's pixel size, once per new matrix (or resize)."""
        fy, fx = self._overview_factor_wanted()
        rows, cols = self._shape
        if is_long(self._raw):
            self._buffer = None
            self._overview, self._overview_factor = pooled_overview(self._raw, fy, fx, self.signed,
                                                                    self._raw.overview.pool)
            self._place_pending_rows()
            return
        if (fy, fx) == (1, 1):
            if self._blocked is None:
                overview = self._raw
            else:
                # One reused buffer, NaN (transparent, so the hatch shows) where blocked.
                dtype = self._raw.dtype if self._raw.dtype.kind == "f" else np.float64
                if self._buffer is None or self._buffer.shape != self._shape or self._buffer.dtype != dtype:
                    self._buffer = np.empty(self._shape, dtype=dtype)
                np.copyto(self._buffer, self._raw)
                np.copyto(self._buffer, np.nan, where=self._blocked)
                overview = self._buffer
        else:
            self._buffer = None
            overview = block_reduce(self._raw, fy, fx, signed=self.signed, blocked=self._blocked, pool=self.pool)
        self._place_pending_rows()
        self._overview = overview
        self._overview_factor = (fy, fx)

    def _update_display(self, force: bool = False) -> None:
        """Show the overview, or, zoomed in past it, the visible region in finer detail.

        The region is the visible cells and half a view more on each side, reduced by a
        power of two no bigger than the cells per pixel (1: every cell, exactly), so panning
        a little or zooming within the same power of two reuses it. A long matrix's region
        is exact cells, or, with more than ``long_matrix.TILE_CELLS`` cells in view, pooled
        from exact tiles on a worker (the overview stands in until it is there).
        """
        if self._raw is None:
            return
        rows, cols = self._shape
        spec = self._visible_cells()
        oy, ox = self._overview_factor
        if spec is not None and (oy, ox) != (1, 1):
            r0, r1, c0, c1, _w, _h = spec
            width, height = self._pixels()
            need_y, need_x = factor_for(r1 - r0, height), factor_for(c1 - c0, width)
            if need_y < oy or need_x < ox:
                if is_long(self._raw):
                    shown = self._show_long_region(r0, r1, c0, c1, min(need_y, oy), min(need_x, ox), force)
                    if shown == "shown":
                        return
                    if shown == "pending":
                        if force or self._region is not None:
                            self._region = None
                            self._show_image(self._overview, QRectF(0, 0, cols, rows), self._overview_factor)
                        return
                else:
                    self._show_dense_region(r0, r1, c0, c1, min(_pow2_floor(need_y), oy),
                                            min(_pow2_floor(need_x), ox), force)
                    return
        self._cancel_zoom()
        if force or self._region is not None:
            self._region = None
            self._show_image(self._overview, QRectF(0, 0, cols, rows), self._overview_factor)

    def _covers(self, r0: int, r1: int, c0: int, c1: int, fy: int, fx: int) -> bool:
        cur = self._region
        return (cur is not None and cur[4:] == (fy, fx) and cur[0] <= r0 and r1 <= cur[1] and cur[2] <= c0
                and c1 <= cur[3])

    def _margin_region(self, r0: int, r1: int, c0: int, c1: int, fy: int, fx: int) -> tuple[int, int, int, int]:
        """The visible cells and half a view more on each side, on whole blocks of fy × fx."""
        rows, cols = self._shape
        span_r, span_c = r1 - r0, c1 - c0
        R0 = max(0, (r0 - span_r // 2) // fy * fy)
        C0 = max(0, (c0 - span_c // 2) // fx * fx)
        R1 = min(rows, R0 + -(-(r1 + span_r // 2 - R0) // fy) * fy)
        C1 = min(cols, C0 + -(-(c1 + span_c // 2 - C0) // fx) * fx)
        return R0, R1, C0, C1

    def _show_dense_region(self, r0, r1, c0, c1, fy, fx, force) -> None:
        if not force and self._covers(r0, r1, c0, c1, fy, fx):
            return
        R0, R1, C0, C1 = self._margin_region(r0, r1, c0, c1, fy, fx)
        if (fy, fx) == (1, 1):
            image = self._cells(R0, R1, C0, C1)
        else:
            blocked = None if self._blocked is None else self._blocked[R0:R1, C0:C1]
            image = block_reduce(self._raw[R0:R1, C0:C1], fy, fx, signed=self.signed, blocked=blocked, pool=self.pool)
        self._region = (R0, R1, C0, C1, fy, fx)
        self._show_image(image, QRectF(C0, R0, C1 - C0, R1 - R0), (fy, fx))

    def _show_long_region(self, r0, r1, c0, c1, need_y, need_x, force) -> str | None:
        """A long matrix zoomed in: "shown" (exact cells, or a pooled region already made),
        "pending" (a pooled region is being made), or None (not yet computed: the overview)."""
        if isinstance(self._raw, PartialMatrix):
            return None
        if (r1 - r0) * (c1 - c0) <= long_matrix.TILE_CELLS:
            self._cancel_zoom()
            if not force and self._covers(r0, r1, c0, c1, 1, 1):
                return "shown"
            R0, R1, C0, C1 = self._margin_region(r0, r1, c0, c1, 1, 1)
            if (R1 - R0) * (C1 - C0) > long_matrix.TILE_CELLS:
                R0, R1, C0, C1 = r0, r1, c0, c1  # no room for a margin: the cells in view
            self._region = (R0, R1, C0, C1, 1, 1)
            self._show_image(self._cells(R0, R1, C0, C1), QRectF(C0, R0, C1 - C0, R1 - R0), (1, 1))
            return "shown"
        rows, cols = self._shape
        if (r1 - r0) * (c1 - c0) * 4 > rows * cols:
            # Hardly zoomed in: the overview is as fine as a region would be worth (and a
            # region of most of a 16,384² matrix costs seconds of tiles).
            self._cancel_zoom()
            return None
        fy, fx = _pow2_floor(need_y), _pow2_floor(need_x)
        if not force and self._covers(r0, r1, c0, c1, fy, fx):
            self._cancel_zoom()
            return "shown"
        R0, C0 = r0 // fy * fy, c0 // fx * fx
        R1, C1 = min(rows, R0 + -(-(r1 - R0) // fy) * fy), min(cols, C0 + -(-(c1 - C0) // fx) * fx)
        region = (R0, R1, C0, C1, fy, fx)
        if not force and self._zoom_token is not None and self._zoom_token[1] == region:
            return "pending"
        self._zoom_serial += 1
        token = self._zoom_token = (self._zoom_serial, region)
        matrix, blocked, pool = self._raw, self._blocked, self._raw.overview.pool
        worker = region_worker()
        if not self._zoom_connected:
            worker.done.connect(self._on_region_done)
            self._zoom_connected = True
        worker.request(id(self), token, lambda cancelled: pooled_region(matrix, (R0, R1), (C0, C1), fy, fx, pool,
                                                                        blocked, cancelled))
        return "pending"

    def _cancel_zoom(self) -> None:
        if self._zoom_token is not None:
            self._zoom_token = None
            region_worker().cancel(id(self))

    @property
    def zoom_pending(self) -> bool:
        """Whether a zoomed region is still being made (a long matrix's, on a worker)."""
        return self._zoom_token is not None

    def _on_region_done(self, key, token, image) -> None:
        if key != id(self) or token != self._zoom_token:
            return  # another view's, or superseded
        self._zoom_token = None
        if image is None:
            return  # cancelled or failed: the overview stays
        R0, R1, C0, C1, fy, fx = token[1]
        self._region = token[1]
        self._show_image(image, QRectF(C0, R0, C1 - C0, R1 - R0), (fy, fx))
        if self.on_image_changed is not None:
            self.on_image_changed()

    def _show_image(self, image: np.ndarray, rect: QRectF, factor: tuple[int, int]) -> None:
        self.image.setImage(image, autoLevels=False, levels=self._levels)
        if rect != self._image_rect or image.shape != self._image_shape:
            self.image.setRect(rect)
            self._image_rect = QRectF(rect)
            self._image_shape = image.shape
        changed = factor != self._image_factor
        self._image_factor = factor
        if changed and self.on_image_changed is not None:
            self.on_image_changed()

    @property
    def pooled_by(self) -> str | None:
        """How the picture now shown pools cells into pixels ("max", "mean"), or None when it
        shows every cell."""
        if self._image_factor == (1, 1):
            return None
        return self._raw.overview.pool if is_long(self._raw) else self.pool

    @property
    def rows_done(self) -> int | None:
        """How many rows a long compute still running has reached (None: the matrix is whole)."""
        return self._raw.rows_done if isinstance(self._raw, PartialMatrix) else None

    def set_pool(self, pool: str) -> None:
        """Pool a zoomed-out dense matrix by ``pool`` ("max" or "mean")."""
        if pool not in ("max", "mean"):
            raise ValueError(f"unknown pooling {pool!r}; use 'max' or 'mean'")
        if pool != self.pool:
            self.pool = pool
            if self._raw is not None and not is_long(self._raw):
                self._build_overview()
                self._update_display(force=True)

    def _place_pending_rows(self) -> None:
        done = self.rows_done
        rows, cols = self._shape
        if done is None or done >= rows:
            self.pending_rows.setVisible(False)
            return
        self.pending_rows.setRect(QRectF(0, done, cols, rows - done))
        self.pending_rows.setVisible(True)

    @property
    def number_format(self) -> str:
        return self._number_format

    def set_number_format(self, number_format: str) -> None:
        """How cells write their numbers: ``core.display.NUMBER_FORMATS`` (auto, fixed2..4)."""
        if number_format not in display.NUMBER_FORMATS:
            raise ValueError(f"unknown number format {number_format!r}")
        if number_format != self._number_format:
            self._number_format = number_format
            self._update_cell_texts()

    def set_colorbar_levels(self, levels: tuple[float, float]) -> None:
        """For a shared colour bar: show ``levels`` on this view's bar."""
        if self.colorbar is not None:
            self.colorbar.setLevels(levels, update_items=False)

    def clear_matrix(self) -> None:
        """Show nothing (the intermediate was not computed)."""
        self.image.clear()
        self._raw = self._overview = self._buffer = self._blocked = self._blocked_rows = None
        self._region = None
        self._cancel_zoom()
        self.pending_rows.setVisible(False)
        self._image_rect = QRectF()
        self._image_shape = ()
        self._shape = (0, 0)
        self.hatch.setVisible(False)
        self.numbers.clear()
        for item in self._notes:
            item.setVisible(False)
        self.row_frame.setVisible(False)
        self.col_frame.setVisible(False)

    def set_selection(self, row: int | None, col: int | None) -> None:
        """Frame the selected row (solid orange) and column (dashed black); None hides one."""
        self._selection = (row, col)
        self._place_selection()
        self.row_axis.set_marked(row)
        self.col_axis.set_marked(col)

    def reset_zoom(self) -> None:
        rows, cols = self._shape
        if rows and cols:
            self.vb.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)

    # -- internals ----------------------------------------------------------------------------
    def _place_selection(self) -> None:
        rows, cols = self._shape
        row, col = self._selection
        show_row = row is not None and 0 <= row < rows
        show_col = col is not None and 0 <= col < cols
        if show_row:
            self.row_frame.setRect(QRectF(0, row, cols, 1))
        if show_col:
            self.col_frame.setRect(QRectF(col, 0, 1, rows))
        self.row_frame.setVisible(show_row)
        self.col_frame.setVisible(show_col)

    def _place_notes(self, note: str) -> None:
        rows = [] if self._blocked_rows is None else np.flatnonzero(self._blocked_rows)[:MAX_ROW_NOTES]
        while len(self._notes) < len(rows):
            item = pg.TextItem(anchor=(0.5, 0.5), color="k", fill=pg.mkBrush(255, 255, 255, 220))
            item.setZValue(15)
            self.addItem(item, ignoreBounds=True)
            self._notes.append(item)
        cols = self._shape[1]
        for k, item in enumerate(self._notes):
            if k < len(rows):
                item.setText(note)
                item.setPos(cols / 2.0, rows[k] + 0.5)
                item.setVisible(True)
            else:
                item.setVisible(False)

    def _on_view_changed(self, *args) -> None:
        if self._raw is not None and self._overview_factor_wanted() != self._overview_factor:
            self._build_overview()  # resized: the overview is made for the pixels it has
            self._update_display(force=True)
        else:
            self._update_display()
        self._update_cell_texts()

    def _visible_cells(self):
        """(row0, row1, col0, col1, cell width px, cell height px) of the cells in view."""
        rows, cols = self._shape
        (x0, x1), (y0, y1) = self.vb.viewRange()
        width, height = self.vb.width(), self.vb.height()
        if width <= 0 or height <= 0 or x1 <= x0 or y1 <= y0:
            return None
        c0, c1 = max(0, math.floor(x0)), min(cols, math.ceil(x1))
        r0, r1 = max(0, math.floor(y0)), min(rows, math.ceil(y1))
        return r0, r1, c0, c1, width / (x1 - x0), height / (y1 - y0)

    def _update_cell_texts(self) -> None:
        """Write numbers in the cells when few enough are in view and they are big enough."""
        spec = None if self._raw is None or isinstance(self._raw, PartialMatrix) else self._visible_cells()
        if spec is not None:
            r0, r1, c0, c1, cell_w, cell_h = spec
            if 0 < (r1 - r0) * (c1 - c0) <= MAX_CELL_TEXTS and cell_h >= 10 and cell_w >= 16:
                block = self._cells(r0, r1, c0, c1)
                # The most precise style, at the largest font (12 px down to 8 px) it fits.
                fonts = list(range(int(min(12, cell_h * 0.45)), 7, -1))
                chars = [int((cell_w - 2) / (px * 0.6)) for px in fonts]
                found = theme.cell_texts(block, chars, self._number_format) if fonts else None
                if found is not None:
                    texts, index = found
                    dark = theme.text_is_dark(block, self.lut, self._levels)
                    self.numbers.set_block(r0, c0, c1 - c0, texts, dark, fonts[index])
                    return
        self.numbers.clear()

    def _hovered(self, cell) -> None:
        if self.on_hover is not None:
            self.on_hover("" if cell is None else self.describe_cell(*cell))

    def _clicked(self, row: int, col: int) -> None:
        if self.on_click is not None:
            self.on_click(row, col)
