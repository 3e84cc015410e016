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
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPen, QStaticText, QTransform
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem

from ...core import display
from . import theme
from ...core.long.tiled import TiledMatrix
from .downsample import block_reduce, factor_for

# Cell numbers are written only while at most this many cells are in view (16 × 16): more
# would be too small to read.
MAX_CELL_TEXTS = 256
# The "all keys blocked" notes on fully masked rows; beyond this the hover still says so.
MAX_ROW_NOTES = 32


def _pow2_floor(value: int) -> int:
    """The largest power of two ≤ ``value`` (≥ 1)."""
    return 1 << (max(1, int(value)).bit_length() - 1)


class TokenAxis(pg.AxisItem):
    """An axis whose ticks are the cells' labels (tokens or feature names).

    Ticks sit at cell centres. Which labels are written, at what font size and whether they
    stand upright is ``core.display.label_plan``: up to 32 labels in view every one is
    written (shrunk, and upright along the bottom, as needed); beyond that every k-th, plus
    the selected query or key (``set_marked``). Only the labels in view are generated, so at
    4,096 tokens the axis stays cheap, and zooming in brings every label back.
    """

    def __init__(self, orientation: str, **kwargs):
        super().__init__(orientation, **kwargs)
        self._labels: tuple[str, ...] = ()
        self._given: tuple[str, ...] = ()
        self._label_px = 10.0
        self._marked: tuple[int, ...] = ()
        self._plan = display.LabelPlan(1, display.LABEL_FONT_PX, False)
        self._fixed_for: float | None = None
        self.setTickFont(theme.tick_font())
        # Cell positions never want an SI prefix, and pyqtgraph would rebuild the axis title's
        # HTML on every range change to decide that.
        self.enableAutoSIPrefix(False)
        # Ticks point outward, toward the labels: pyqtgraph's default points them into the
        # plot, where a tick touching a cell's number reads as a minus sign ("-0.49").
        self.setStyle(tickLength=4)
        if orientation in ("top", "bottom"):
            # A label centred on the first or last cell may overhang the axis a little.
            self.setStyle(hideOverlappingLabels=30)

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def plan(self) -> display.LabelPlan:
        """How the labels were last laid out (step, font size, upright)."""
        return self._plan

    def set_labels(self, labels: Sequence[str]) -> None:
        given = tuple(labels)
        if given == self._given:  # every redraw passes the tokens again; usually the same ones
            return
        self._given = given
        labels = tuple(theme.short_label(t) for t in given)
        if labels != self._labels:
            self._labels = labels
            metrics = QFontMetricsF(theme.tick_font())
            self._label_px = max((metrics.horizontalAdvance(t) for t in set(labels)), default=10.0)
            self._fixed_for = None
            self.picture = None
            self.update()

    def set_marked(self, *indices: int | None) -> None:
        """Labels written even when the axis thins its labels out (the selected query, key)."""
        marked = tuple(i for i in indices if i is not None)
        if marked != self._marked:
            self._marked = marked
            self.picture = None
            self.update()

    def visible_labels(self) -> list[str]:
        """The labels the axis writes now (for tests and read-outs)."""
        view = self.linkedView()
        if view is None:
            return []
        lo, hi = view.viewRange()[1 if self.orientation in ("left", "right") else 0]
        size = self.height() if self.orientation in ("left", "right") else self.width()
        ticks = self.tickValues(lo, hi, size)
        return self.tickStrings(ticks[0][1], 1.0, 1.0) if ticks else []

    def _plan_for(self, minVal, maxVal, size) -> tuple[display.LabelPlan, int, int]:
        n = len(self._labels)
        first = max(0, math.floor(minVal))
        last = min(n - 1, math.ceil(maxVal) - 1)
        plan = display.label_plan(last - first + 1, size / (maxVal - minVal), self._label_px,
                                  along_bottom=self.orientation in ("top", "bottom"))
        return plan, first, last

    def generateDrawSpecs(self, p):
        # Decide the font and orientation before pyqtgraph measures the labels with it.
        view = self.linkedView()
        if view is not None and self._labels:
            horizontal = self.orientation in ("top", "bottom")
            lo, hi = sorted(view.viewRange()[0 if horizontal else 1])
            size = self.width() if horizontal else self.height()
            if hi > lo and size > 0:
                plan, _first, _last = self._plan_for(lo, hi, size)
                if plan.font_px != self._plan.font_px or plan.rotated != self._plan.rotated:
                    font = theme.tick_font()
                    font.setPixelSize(plan.font_px)
                    self.style["tickFont"] = font
                    self.style["hideOverlappingLabels"] = 10_000 if plan.rotated else (30 if horizontal else False)
                self._plan = plan
                self._fit_height(plan)
                p.setFont(self.style["tickFont"])
        return super().generateDrawSpecs(p)

    def _fit_height(self, plan: display.LabelPlan) -> None:
        """Upright labels need the axis as tall as the longest label is wide."""
        if self.orientation not in ("top", "bottom"):
            return
        wanted = None
        if plan.rotated:
            label = self.label.boundingRect().height() * 0.8 if self.label.isVisible() else 0.0
            wanted = math.ceil(self._label_px * plan.font_px / display.LABEL_FONT_PX + 4 + 9 + label)
        if wanted != self._fixed_for:
            self._fixed_for = wanted
            self.setHeight(wanted)

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self._plan.rotated or self.orientation not in ("top", "bottom"):
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            return
        super().drawPicture(p, axisSpec, tickSpecs, [])
        p.save()
        p.setClipping(False)
        for rect, _flags, text in textSpecs:
            # Upright, reading upward, its end against the tick: centred on the cell.
            p.save()
            p.translate(rect.center().x(), rect.top() + 3)  # a gap: the tick must not read as a dash
            p.rotate(-90)
            width = p.fontMetrics().horizontalAdvance(text) + 2
            height = p.fontMetrics().height()
            p.drawText(QRectF(-width, -height / 2, width, height),
                       int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), text)
            p.restore()
        p.restore()

    def tickValues(self, minVal, maxVal, size):
        minVal, maxVal = min(minVal, maxVal), max(minVal, maxVal)  # an inverted axis gives them swapped
        n = len(self._labels)
        if n == 0 or maxVal <= minVal or size <= 0:
            return []
        plan, first, last = self._plan_for(minVal, maxVal, size)
        chosen = display.label_indices(first, last, plan.step, self._marked)
        values = [i + 0.5 for i in chosen if minVal <= i + 0.5 <= maxVal]
        return [(float(plan.step), values)]

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = int(math.floor(v))
            out.append(self._labels[i] if 0 <= i < len(self._labels) else "")
        return out


class ShrinkingLabel(pg.LabelItem):
    """A title that shrinks its text (down to half size) rather than widen its layout.

    A plain ``LabelItem`` makes its text width the layout's minimum width, so a long title
    would push plots and colour bars out of a narrow dock.
    """

    def resizeEvent(self, ev):
        natural = self.item.boundingRect().width()
        width = self.rect().width()
        scale = 1.0 if natural <= 0 or width <= 0 else max(0.5, min(1.0, (width - 4) / natural))
        if abs(self.item.scale() - scale) > 1e-3:
            self.item.setScale(scale)
        super().resizeEvent(ev)

    def updateMin(self):
        natural = self.item.boundingRect()
        self.setMinimumWidth(natural.width() * 0.5)
        self.setMinimumHeight(natural.height() * self.item.scale())
        self._sizeHint = {
            Qt.SizeHint.MinimumSize: (natural.width() * 0.5, natural.height() * self.item.scale()),
            Qt.SizeHint.PreferredSize: (natural.width(), natural.height()),
            Qt.SizeHint.MaximumSize: (1e6, 1e6),
            Qt.SizeHint.MinimumDescent: (0, 0),
        }
        self.updateGeometry()


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


class CellNumbers(QGraphicsItem):
    """Every number written in the cells, painted by this one item in one ``paint()``.

    A text item per cell cost about 40 µs each to lay out and paint (10 ms at 16 × 16);
    here each distinct string is laid out once (a cached ``QStaticText``) and a repaint is
    one transform of the cell centres plus one ``drawStaticText`` per cell. Text is drawn in
    device pixels, so it keeps its size at any zoom; black on light cells, white on dark.
    """

    def __init__(self):
        super().__init__()
        self._font = theme.cell_font(10)
        self._font_px = 10
        self._static: dict[str, tuple[QStaticText, tuple[float, float]]] = {}
        self._rows = np.zeros(0, dtype=int)
        self._cols = np.zeros(0, dtype=int)
        self._texts: list[str] = []
        self._dark = np.zeros(0, dtype=bool)
        self._centres = np.zeros((0, 2))
        self._half = np.zeros((0, 2))
        self._groups: list = []
        self._rect = QRectF()
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresParentOpacity, True)

    @property
    def cells(self) -> list[tuple[int, int, str, bool]]:
        """(row, col, text, dark) of every number drawn; ``dark`` means black text."""
        return list(zip(self._rows.tolist(), self._cols.tolist(), self._texts, self._dark.tolist()))

    @property
    def font_px(self) -> int:
        return self._font_px

    def clear(self) -> None:
        self.set_block(0, 0, 1, [], np.zeros(0, dtype=bool), self._font_px)

    def set_block(self, row0: int, col0: int, width: int, texts: Sequence[str | None], dark: np.ndarray,
                  font_px: int) -> None:
        """Write ``texts`` (row-major over a block ``width`` cells wide whose first cell is
        (row0, col0); None leaves a cell empty) in black where ``dark``, else white."""
        present = np.fromiter((t is not None for t in texts), dtype=bool, count=len(texts))
        index = np.flatnonzero(present)
        shown = [texts[k] for k in index.tolist()]
        rows = row0 + index // width
        cols = col0 + index % width
        dark = np.asarray(dark, dtype=bool).ravel()[index]
        if (font_px == self._font_px and shown == self._texts and np.array_equal(rows, self._rows)
                and np.array_equal(cols, self._cols) and np.array_equal(dark, self._dark)):
            return
        if font_px != self._font_px:
            self._font_px = font_px
            self._font = theme.cell_font(font_px)
            self._static.clear()
        if len(self._static) > 4096:  # a long session of edits: forget strings no longer shown
            self._static.clear()
        self._rows, self._cols, self._texts, self._dark = rows, cols, shown, dark
        self._centres = np.column_stack([cols + 0.5, rows + 0.5]).astype(float).reshape(-1, 2)
        # Everything a paint needs per cell, laid out once: the prepared text, its half size
        # (to centre it) and its colour group, so a repaint is a tight loop of draw calls.
        prepared = [self._prepared(text) for text in shown]
        self._half = np.array([p[1] for p in prepared], dtype=float).reshape(-1, 2)
        self._groups = [(colour, [(k, prepared[k][0]) for k in np.flatnonzero(dark == want).tolist()])
                        for want, colour in ((True, _BLACK), (False, _WHITE))]
        if shown:
            rect = QRectF(int(cols.min()), int(rows.min()), int(cols.max() - cols.min()) + 1,
                          int(rows.max() - rows.min()) + 1)
        else:
            rect = QRectF()
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = rect
        self.update()

    def boundingRect(self) -> QRectF:
        return self._rect

    def _prepared(self, text: str) -> tuple[QStaticText, tuple[float, float]]:
        """The laid-out text and its half size (to centre it), made once per string."""
        hit = self._static.get(text)
        if hit is None:
            st = QStaticText(text)
            st.setTextFormat(Qt.TextFormat.PlainText)
            st.prepare(QTransform(), self._font)
            size = st.size()
            hit = self._static[text] = (st, (size.width() / 2.0, size.height() / 2.0))
        return hit

    def paint(self, painter, option, widget=None):
        if not self._texts:
            return
        t = painter.transform()
        # Cell centres in device pixels, all at once (an affine map: no rotation here, but
        # the general form costs nothing more).
        x = self._centres[:, 0]
        y = self._centres[:, 1]
        dx = t.m11() * x + t.m21() * y + t.dx()
        dy = t.m12() * x + t.m22() * y + t.dy()
        # Whole device pixels: the int overload needs no QPointF per cell, and glyphs snap
        # to pixels anyway.
        left = np.rint(dx - self._half[:, 0]).astype(int).tolist()
        top = np.rint(dy - self._half[:, 1]).astype(int).tolist()
        painter.save()
        painter.resetTransform()
        painter.setFont(self._font)
        for colour, group in self._groups:
            painter.setPen(colour)
            for k, st in group:
                painter.drawStaticText(left[k], top[k], st)
        painter.restore()


_BLACK = QColor("black")
_WHITE = QColor("white")


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


# A long session's heatmap computes an exact region of at most this many cells at once (a few
# milliseconds); zoomed out further it shows the pooled overview.
TILE_CELLS = 1 << 19


def pooled_overview(matrix: TiledMatrix, fy: int, fx: int, signed: bool) -> tuple[np.ndarray, tuple[int, int]]:
    """A long matrix at about ``fy`` × ``fx`` cells per pixel, from its pooled overview: the
    overview's blocks pooled again by whole blocks (a maximum of maxima is the maximum of the
    cells, and so is the largest magnitude), and the cells per pixel that gives."""
    base = matrix.overview
    ky, kx = max(1, -(-fy // base.fy)), max(1, -(-fx // base.fx))
    data = base.data if (ky, kx) == (1, 1) else block_reduce(base.data, ky, kx, signed=signed)
    return data, (base.fy * ky, base.fx * kx)


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
        data = data if isinstance(data, TiledMatrix) else np.asarray(data)
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
    def zoom_pending(self) -> bool:
        """Whether a zoomed region is still being computed (a long matrix's, on a worker)."""
        return False

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
        if isinstance(self._raw, TiledMatrix):
            self._buffer = None
            self._overview, self._overview_factor = pooled_overview(self._raw, fy, fx, self.signed)
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
            overview = block_reduce(self._raw, fy, fx, signed=self.signed, blocked=self._blocked)
        self._overview = overview
        self._overview_factor = (fy, fx)

    def _update_display(self, force: bool = False) -> None:
        """Show the overview, or, zoomed in past it, the visible region in finer detail.

        The region is the visible cells and half a view more on each side, reduced by a
        power of two no bigger than the cells per pixel (1: every cell, exactly), so panning
        a little or zooming within the same power of two reuses it.
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
            tiled = isinstance(self._raw, TiledMatrix)
            if need_y < oy or need_x < ox:
                fy, fx = min(_pow2_floor(need_y), oy), min(_pow2_floor(need_x), ox)
                if tiled:
                    fy = fx = 1  # a long matrix: exact cells from tiles, or the overview
                cur = self._region
                if (not force and cur is not None and cur[4:] == (fy, fx) and cur[0] <= r0 and r1 <= cur[1]
                        and cur[2] <= c0 and c1 <= cur[3]):
                    return
                span_r, span_c = r1 - r0, c1 - c0
                R0 = max(0, (r0 - span_r // 2) // fy * fy)
                C0 = max(0, (c0 - span_c // 2) // fx * fx)
                R1 = min(rows, R0 + -(-(r1 + span_r // 2 - R0) // fy) * fy)
                C1 = min(cols, C0 + -(-(c1 + span_c // 2 - C0) // fx) * fx)
                # A long matrix's region with too many cells to compute at once: the overview stays.
                if not (tiled and (R1 - R0) * (C1 - C0) > TILE_CELLS):
                    if (fy, fx) == (1, 1):
                        image = self._cells(R0, R1, C0, C1)
                    else:
                        blocked = None if self._blocked is None else self._blocked[R0:R1, C0:C1]
                        image = block_reduce(self._raw[R0:R1, C0:C1], fy, fx, signed=self.signed, blocked=blocked)
                    self._region = (R0, R1, C0, C1, fy, fx)
                    self._show_image(image, QRectF(C0, R0, C1 - C0, R1 - R0), (fy, fx))
                    return
        if force or self._region is not None:
            self._region = None
            self._show_image(self._overview, QRectF(0, 0, cols, rows), self._overview_factor)

    def _show_image(self, image: np.ndarray, rect: QRectF, factor: tuple[int, int]) -> None:
        self.image.setImage(image, autoLevels=False, levels=self._levels)
        if rect != self._image_rect or image.shape != self._image_shape:
            self.image.setRect(rect)
            self._image_rect = QRectF(rect)
            self._image_shape = image.shape
        self._image_factor = factor

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
        spec = None if self._raw is None else self._visible_cells()
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
