"""One matrix as a heatmap: token axes, a colour bar, hover read-out, click to select.

``MatrixView`` is a ``pg.PlotItem`` (so its title, tick labels and colour bar travel with it
into an exported figure). It owns exactly one ``ImageItem`` and a fixed set of helper items
(``overlays``: hatch, selection frames, row notes; ``CellNumbers``) that are reused on every
redraw: a redraw is ``setImage`` with fixed levels plus a few rectangle moves, whatever the
size of the matrix. Its parts, each with its own contract:

- ``heatmaps.DenseHeatmap`` / ``heatmaps.LongHeatmap``: the pictures of a matrix held whole,
  or of a long session's matrix read in tiles;
- ``image_detail.ImageDetail``: which picture the image shows at what detail (overview or a
  finer region), and how a dense matrix is pooled;
- ``cell_numbers.CellNumbers``: the numbers written in the cells, in the chosen format;
- ``overlays``: what is drawn under and over the cells.

Coordinates: cell (row i, column j) covers ``[j, j+1] × [i, i+1]`` in view coordinates, and
the y axis is inverted so row 0 is at the top, as a matrix is written.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem

from . import theme
from .cell_numbers import CellNumbers, whole_cells
from .heatmaps import heatmap_for
from .image_detail import ImageDetail
from .overlays import Hatch, RowNotes, SelectionFrames, overlay
from .token_axis import TokenAxis, shrinking_title


class _CellImage(pg.ImageItem):
    """The ImageItem that also reports the cell under the mouse and clicks on cells."""

    def __init__(self, view: "MatrixView"):
        super().__init__(axisOrder="row-major")
        self._view = view

    def render(self, *args, **kwargs):
        # A heatmap's matrix is one channel of floats with fixed levels and a 256-colour
        # table, shown at one cell per image pixel: its picture is made here in one table
        # look-up, straight in the format the raster engine draws (premultiplied ARGB32).
        # pyqtgraph's own render made an indexed image (256 qRgb calls for its colour table
        # on every new matrix) that was then converted: about 0.6 ms of the GUI thread per
        # heatmap per edit at 8 tokens, the same pixels (``render_cells``).
        if self._render_cells():
            return None
        result = super().render(*args, **kwargs)
        if self.qimage is not None and self.qimage.format() != QImage.Format.Format_ARGB32_Premultiplied:
            # Drawing an indexed image makes the raster engine convert it on every paint:
            # converted once, each repaint of an unchanged heatmap is cheaper.
            self.qimage = self.qimage.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
        return result

    def _render_cells(self) -> bool:
        """Make ``qimage`` from a plain heatmap (see ``render``); False where pyqtgraph's
        general render is needed (a downsampled picture, another kind of image or table)."""
        image, lut, levels = self.image, self.lut, self.levels
        if (not isinstance(image, np.ndarray) or image.ndim != 2 or image.size == 0 or image.dtype.kind != "f"
                or self.axisOrder != "row-major" or not isinstance(lut, np.ndarray) or lut.dtype != np.uint8
                or lut.ndim != 2 or lut.shape[1] != 3 or not 0 < len(lut) <= 256 or levels is None
                or np.ndim(levels) != 1):
            return False
        if self.autoDownsample:
            factors = self._computeDownsampleFactors()
            if factors[0] is None:  # not in a view yet: nothing to draw
                self._unrenderable = True
                return True
            if tuple(factors) != (1, 1):
                return False
            self._lastDownsample = (1, 1)
        self.qimage = render_cells(image, levels, lut, self._colour_table(lut))
        self._renderRequired = False
        self._unrenderable = False
        return True

    def _colour_table(self, lut: np.ndarray) -> np.ndarray:
        cached = getattr(self, "_table", None)
        if cached is None or cached[0] is not lut:
            cached = self._table = (lut, argb_table(lut))
        return cached[1]

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


def argb_table(lut: np.ndarray) -> np.ndarray:
    """A uint8 (N, 3) colour table as opaque premultiplied ARGB32 pixels."""
    lut = lut.astype(np.uint32)
    return (0xFF000000 | (lut[:, 0] << 16) | (lut[:, 1] << 8) | lut[:, 2]).astype(np.uint32)


def render_cells(image: np.ndarray, levels, lut: np.ndarray, table: np.ndarray) -> QImage:
    """The picture of a float matrix, one pixel a cell, as pyqtgraph's ImageItem colours it
    (value → ``(value - low) · N / (high - low)`` clipped to the N colours of ``lut`` and
    truncated; NaN transparent), made in premultiplied ARGB32."""
    low, high = float(levels[0]), float(levels[1])
    span = high - low
    n = len(lut)
    # pyqtgraph's arithmetic (functions.rescaleData): in float32 where the matrix fits it.
    work = np.float32 if np.can_cast(image.dtype, np.float32) else np.float64
    scaled = image.astype(work, copy=True)
    scaled -= low
    scaled *= n / (span if span != 0 else 1)
    np.clip(scaled, 0, n - 1, out=scaled)
    missing = np.isnan(scaled)
    holes = bool(missing.any())
    if holes:
        scaled[missing] = 0
    pixels = table[scaled.astype(np.uint8 if n <= 256 else np.uint16)]
    if holes:
        pixels[missing] = 0  # transparent, so the hatch under a blocked cell shows
    return pg.functions.ndarray_to_qimage(np.ascontiguousarray(pixels), QImage.Format.Format_ARGB32_Premultiplied)


def _colour_bar(plot: pg.PlotItem, signed: bool) -> pg.ColorBarItem:
    """A colour bar inside ``plot``'s own layout (as ColorBarItem's insert_in does), so an
    export of the plot carries it."""
    cmap = theme.DIVERGING if signed else theme.SEQUENTIAL
    bar = pg.ColorBarItem(values=(-1, 1) if signed else (0, 1), colorMap=cmap, width=12, interactive=False,
                          colorMapMenu=False)
    bar_axis = bar.getAxis("right")
    bar_axis.setTickFont(theme.tick_font())
    bar_axis.enableAutoSIPrefix(False)  # it has no title to put a prefix in
    plot.layout.addItem(bar, 2, 5)
    plot.layout.setColumnFixedWidth(4, 5)
    return bar



class MatrixView(pg.PlotItem):
    """A heatmap of one matrix with everything a reader needs to read it: the frame (axes,
    colour bar, hatch, selection, notes, hover and clicks) around the pictures of a
    ``heatmaps.DenseHeatmap`` or ``heatmaps.LongHeatmap``, with the numbers in the cells
    written by ``CellNumbers``.

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
        self._plain_title = shrinking_title(self)
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

        self.hatch = overlay(self, Hatch(), -10)

        self.image = _CellImage(self)
        self.image.setLookupTable(self.lut)
        self.image.setAutoDownsample(True)
        self.addItem(self.image)

        self.selection = SelectionFrames(self)
        self.row_frame, self.col_frame = self.selection.row, self.selection.col
        self.colorbar = _colour_bar(self, signed) if colorbar else None

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
        self.notes = RowNotes(self)
        self._blocked: np.ndarray | None = None
        self._blocked_rows: np.ndarray | None = None
        self._levels = (-1.0, 1.0) if signed else (0.0, 1.0)
        self._shape = (0, 0)
        self._row_labels: tuple[str, ...] = ()
        self._col_labels: tuple[str, ...] = ()
        # Over the rows a long compute has not reached yet.
        self.pending_rows = overlay(self, QGraphicsRectItem(), 5)
        self.pending_rows.setBrush(theme.PENDING_BRUSH)
        # Which picture the image shows, at what detail, pooled how.
        self.detail = ImageDetail(self, self.image, self.pending_rows)
        self.vb.sigRangeChanged.connect(self._on_view_changed)
        self.vb.sigResized.connect(self._on_view_changed)

    @property
    def _heatmap(self):
        """The ``heatmaps.DenseHeatmap`` or ``LongHeatmap`` drawing the matrix (None: none)."""
        return self.detail.heatmap

    # -- reading (exporters, read-outs, panels' headings) -------------------------------------
    @property
    def levels(self) -> tuple[float, float]:
        return self._levels

    @property
    def data(self) -> np.ndarray | None:
        """The matrix as given (blocked cells hold their real values here)."""
        return None if self._heatmap is None else self._heatmap.data

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """(rows, cols) of the matrix shown. (Not ``shape``: QGraphicsItem.shape() is a method.)"""
        return self._shape

    def cell_texts(self) -> dict[tuple[int, int], str]:
        """The numbers currently written in cells, by (row, col)."""
        return {(r, c): text for r, c, text, _dark in self.numbers.cells}

    def row_notes(self) -> list[str]:
        return self.notes.texts()

    def describe_cell(self, row: int, col: int) -> str:
        """The hover read-out for one cell: row and column labels and the value (or "blocked")."""
        if self._heatmap is None or not (0 <= row < self._shape[0] and 0 <= col < self._shape[1]):
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
        return f"{where} = {theme.format_value(self._heatmap.value(row, col), 5)}"

    # -- drawing ----------------------------------------------------------------------------
    def set_matrix(self, data: np.ndarray, *, row_labels: Sequence[str], col_labels: Sequence[str],
                   levels: tuple[float, float] | None = None, blocked: np.ndarray | None = None,
                   blocked_rows: np.ndarray | None = None, row_note: str = "all keys blocked") -> None:
        """Show ``data`` (rows × cols). ``blocked`` (same shape, True = blocked) cells are shown
        hatched, never coloured; ``blocked_rows`` get a note written across them.

        ``levels`` defaults to symmetric nice bounds (signed) or 0..1; passing them keeps the
        colour scale fixed and skips any auto-levelling.
        """
        # A long session's matrix (core/compute/long) is read in exact tiles and a pooled overview.
        any_blocked = blocked is not None and bool(blocked.any())
        heatmap = heatmap_for(data, blocked if any_blocked else None, self.signed, self.detail.pool)
        data = heatmap.data
        if data.ndim != 2:
            raise ValueError(f"MatrixView needs a 2-D matrix, got shape {data.shape}")
        self.detail.heatmap = heatmap
        self._blocked = heatmap.blocked
        self._blocked_rows = blocked_rows if blocked_rows is not None and blocked_rows.any() else None
        shape = data.shape
        if shape != self._shape:
            self._shape = shape
            rows, cols = shape
            self.hatch.setRect(QRectF(0, 0, cols, rows))
            self.vb.setLimits(xMin=0, xMax=cols, yMin=0, yMax=rows)
            self.vb.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)
            self.selection.place(shape)
        self.detail.build_overview()
        if levels is None:
            # From the overview: its extremes are the matrix's (blocked cells left out).
            levels = theme.symmetric_levels(self.detail.overview) if self.signed else (0.0, 1.0)
        if levels != self._levels and self.colorbar is not None:
            self.colorbar.setLevels(levels, update_items=False)
        self._levels = tuple(levels)
        self.detail.update(force=True)
        self.hatch.setVisible(any_blocked)
        labels = tuple(row_labels)
        if labels != self._row_labels:
            self._row_labels = labels
            self.row_axis.set_labels(labels)
        labels = tuple(col_labels)
        if labels != self._col_labels:
            self._col_labels = labels
            self.col_axis.set_labels(labels)
        self.notes.place(self._blocked_rows, self._shape[1], row_note)
        self._update_cell_texts()

    # -- what the image shows: the whole matrix reduced, or a region finer (ImageDetail) ------
    @property
    def image_rect(self) -> QRectF:
        """The matrix cells (x = column, y = row) the image currently covers."""
        return QRectF(self.detail.image_rect)

    @property
    def overview_factor(self) -> tuple[int, int]:
        """Rows × columns of the matrix per pixel of the zoomed-out view ((1, 1): every cell)."""
        return self.detail.overview_factor

    @property
    def image_factor(self) -> tuple[int, int]:
        """Rows × columns of the matrix per image pixel now shown ((1, 1): full resolution)."""
        return self.detail.image_factor

    @property
    def zoom_pending(self) -> bool:
        """Whether a zoomed region is still being made (a long matrix's, on a worker)."""
        return self.detail.zoom_region is not None

    @property
    def on_image_changed(self) -> Callable[[], None] | None:
        """Told when the picture's cells per pixel change (a panel's heading says them)."""
        return self.detail.on_image_changed

    @on_image_changed.setter
    def on_image_changed(self, callback: Callable[[], None] | None) -> None:
        self.detail.on_image_changed = callback

    @property
    def pooled_by(self) -> str | None:
        """How the picture now shown pools cells into pixels ("max", "mean"), or None when it
        shows every cell."""
        return self.detail.pooled_by

    @property
    def rows_done(self) -> int | None:
        """How many rows a long compute still running has reached (None: the matrix is whole)."""
        return self.detail.rows_done

    def set_pool(self, pool: str) -> None:
        """Pool a zoomed-out dense matrix by ``pool`` ("max" or "mean")."""
        self.detail.set_pool(pool)

    # -- the numbers in the cells (CellNumbers) -------------------------------------------------
    @property
    def number_format(self) -> str:
        return self.numbers.number_format

    def set_number_format(self, number_format: str) -> None:
        """How cells write their numbers: ``core.numbers.display.NUMBER_FORMATS`` (auto, fixed2..4)."""
        if self.numbers.set_number_format(number_format):
            self._update_cell_texts()

    def _update_cell_texts(self) -> None:
        """Numbers in the whole cells in view, when few enough are and they are big enough
        (none while a long compute is still running)."""
        heatmap = self._heatmap
        if heatmap is None or heatmap.rows_done is not None:
            self.numbers.write(None, None, self.lut, self._levels)
            return
        self.numbers.write(heatmap.cells, whole_cells(self.visible_cells(), self.vb.viewRange()), self.lut,
                           self._levels)

    # -- the frame ------------------------------------------------------------------------------
    def set_colorbar_levels(self, levels: tuple[float, float]) -> None:
        """For a shared colour bar: show ``levels`` on this view's bar."""
        if self.colorbar is not None:
            self.colorbar.setLevels(levels, update_items=False)

    def clear_matrix(self) -> None:
        """Show nothing (the intermediate was not computed)."""
        self._blocked = self._blocked_rows = None
        self.detail.clear()
        self._shape = (0, 0)
        self.hatch.setVisible(False)
        self.numbers.clear()
        self.notes.place(None, 0, "")
        self.selection.hide()

    def set_selection(self, row: int | None, col: int | None) -> None:
        """Frame the selected row (solid orange) and column (dashed black); None hides one."""
        self.selection.select(row, col, self._shape)
        self.row_axis.set_marked(row)
        self.col_axis.set_marked(col)

    def reset_zoom(self) -> None:
        rows, cols = self._shape
        if rows and cols:
            self.vb.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)

    def visible_cells(self):
        """(row0, row1, col0, col1, cell width px, cell height px) of the cells in view."""
        rows, cols = self._shape
        (x0, x1), (y0, y1) = self.vb.viewRange()
        width, height = self.vb.width(), self.vb.height()
        if width <= 0 or height <= 0 or x1 <= x0 or y1 <= y0:
            return None
        c0, c1 = max(0, math.floor(x0)), min(cols, math.ceil(x1))
        r0, r1 = max(0, math.floor(y0)), min(rows, math.ceil(y1))
        return r0, r1, c0, c1, width / (x1 - x0), height / (y1 - y0)

    def _on_view_changed(self, *args) -> None:
        self.detail.view_changed()
        self._update_cell_texts()

    def _hovered(self, cell) -> None:
        if self.on_hover is not None:
            self.on_hover("" if cell is None else self.describe_cell(*cell))

    def _clicked(self, row: int, col: int) -> None:
        if self.on_click is not None:
            self.on_click(row, col)
