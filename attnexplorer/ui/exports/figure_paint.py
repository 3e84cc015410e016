"""How a figure is painted: a panel's (or a dashboard's) pyqtgraph items onto a QImage, an
SVG generator or a PDF writer, at a chosen size (``figures`` is the public face; its
docstring says what callers may rely on). Split from ``figures`` so that the painting
details and the export entry points change apart.
"""

from __future__ import annotations

import contextlib
import html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QEvent, QIODevice, QObject, QMarginsF, QPointF, QRectF, QSize, QSizeF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QImage, QPageSize, QPainter, QPdfWriter, QPen, QPicture
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QApplication, QGraphicsItem, QGraphicsRectItem, QGraphicsView

from ...core.errors import AttnExplorerError

FORMATS = ("png", "svg", "pdf")

# export_figures lays every panel out at this size (logical px) before drawing it, so that
# command-line figures do not depend on a window; the dashboard uses the same cell size.
FIGURE_SIZE = (640, 480)
# QImage and most viewers cope with this; larger requests are refused, not attempted.
MAX_SIDE = 16384
MAX_SCALE = 16.0
TITLE_BAND = 30.0  # logical px above a panel whose plot does not show its own title
DASHBOARD_HEADER = 40.0


class FigureError(AttnExplorerError):
    """A figure cannot be made as asked (unknown format, impossible size, nothing to draw)."""


# -- small helpers -------------------------------------------------------------------------
def _check_format(fmt: str | None, path: Path) -> str:
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        shown = fmt or f"none (the file name {path.name!r} has no extension)"
        raise FigureError(f"figure format {shown!r} is not supported; choose one of {', '.join(FORMATS)}")
    return fmt


def _dpi() -> int:
    # pyqtgraph's axes cache their drawing as a QPicture, recorded at this resolution; a
    # device of another resolution would replay them shrunk or stretched against the rest
    # (that is what misplaces axes in naive SVG exports), so every device is set to it.
    return QPicture().logicalDpiX()


def _plain(text) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", str(text or ""))).strip()


def _tree(item) -> list:
    out = [item]
    for child in item.childItems():
        out.extend(_tree(child))
    return out


def _view_of(item) -> QGraphicsView | None:
    scene = item.scene()
    if scene is None:
        return None
    views = scene.views()
    return views[0] if views else None


def _background(item) -> QBrush:
    view = _view_of(item)
    brush = view.backgroundBrush() if view is not None else QBrush()
    if brush.style() == Qt.BrushStyle.NoBrush:
        # A view with no background shows the window colour through; a figure needs one.
        return QBrush(QColor("white"))
    return brush


def _foreground() -> QColor:
    return pg.mkColor(pg.getConfigOption("foreground"))


def _shows_title(item, title: str) -> bool:
    """True when the figure already carries a heading: a visible label reading ``title``
    anywhere in it, or a label in the first row of its top-level layout (a panel's own
    heading, which may be more specific than its title, e.g. "Query 'dog' (#1)")."""
    want = title.strip().lower()
    if not want:
        return True
    cells = getattr(item, "items", None)
    if isinstance(item, pg.GraphicsLayout) and isinstance(cells, dict):
        for child, places in cells.items():
            if (isinstance(child, pg.LabelItem) and child.isVisible() and _plain(child.text)
                    and any(row == 0 for row, _col in places)):
                return True
    for it in _tree(item):
        if isinstance(it, pg.LabelItem) and it.isVisible() and want in _plain(it.text).lower():
            return True
    return False


def _fit(size: QSizeF, box: QRectF) -> QRectF:
    """``size`` scaled to fit ``box`` keeping its shape, centred."""
    if size.width() <= 0 or size.height() <= 0:
        return QRectF(box)
    s = min(box.width() / size.width(), box.height() / size.height())
    w, h = size.width() * s, size.height() * s
    return QRectF(box.x() + (box.width() - w) / 2, box.y() + (box.height() - h) / 2, w, h)


def _draw_title(painter: QPainter, rect: QRectF, text: str, point_size: float) -> None:
    painter.save()
    font = QFont(QApplication.font())
    font.setPointSizeF(point_size)
    painter.setFont(font)
    painter.setPen(_foreground())
    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
    painter.restore()


# -- temporary states of the panel's items -------------------------------------------------
@contextlib.contextmanager
def _export_mode(item, painter: QPainter, scale: float):
    """pyqtgraph's export mode: hides hover buttons and lets items adapt pen widths."""
    opts = {"antialias": True, "background": _background(item).color(), "painter": painter,
            "resolutionScale": scale}
    items = [it for it in _tree(item) if hasattr(it, "setExportMode")]
    for it in items:
        it.setExportMode(True, opts)
    # A cached item (axis titles, plot titles: cached for fast repaints) would be drawn as
    # its cached pixmap: a bitmap in an SVG or PDF. Uncached, it is drawn as real text.
    cached = [(it, it.cacheMode()) for it in _tree(item)
              if isinstance(it, QGraphicsItem) and it.cacheMode() != QGraphicsItem.CacheMode.NoCache]
    for it, _mode in cached:
        it.setCacheMode(QGraphicsItem.CacheMode.NoCache)
    try:
        yield
    finally:
        for it, mode in cached:
            it.setCacheMode(mode)
        for it in items:
            it.setExportMode(False)


def _pen_of(it) -> QPen | None:
    """The pen an item draws its lines with, where it says (shape items, axes, infinite lines,
    curves, bars)."""
    if not hasattr(it, "setPen"):
        return None
    pen = getattr(it, "pen", None)
    if callable(pen):
        try:
            pen = pen()
        except TypeError:
            pen = None
    if pen is None and isinstance(getattr(it, "opts", None), dict):
        pen = it.opts.get("pen")
    return pen if isinstance(pen, QPen) else None


@contextlib.contextmanager
def _thicker_lines(item, scale: float):
    """Lines ``scale`` times as wide while a PNG is painted ``scale`` times the logical size.
    Cosmetic pens (pyqtgraph's, and the selection frames) are drawn in device pixels, so a
    2× PNG had its axes, outlines and selection at 1× while everything else doubled."""
    changed = []
    for it in _tree(item):
        pen = _pen_of(it)
        if pen is None or pen.style() == Qt.PenStyle.NoPen:
            continue
        wider = QPen(pen)
        wider.setWidthF(max(pen.widthF(), 1.0) * scale)  # a cosmetic width of 0 is drawn 1 px wide
        changed.append((it, QPen(pen)))
        it.setPen(wider)
    try:
        yield
    finally:
        for it, pen in changed:
            it.setPen(pen)


def _can_relayout(item) -> bool:
    # Only a top-level item (a view's central layout or plot) may be resized on its own;
    # a plot nested in a layout would overlap its neighbours.
    return item.parentItem() is None and hasattr(item, "setGeometry")


def _settle(item) -> None:
    """Draw the item once where nothing is kept, then apply the layout requests that drawing
    made. A token axis picks its labels' size and turn while it is drawn and asks for another
    height only then; without this the figure kept the window's height for it (upright labels
    in a narrow dock left a tall empty band under the wider figure's flat labels)."""
    scene = item.scene()
    if scene is None:
        return
    source = item.sceneBoundingRect()
    picture = QPicture()
    painter = QPainter(picture)
    try:
        scene.render(painter, QRectF(QPointF(0, 0), source.size()), source)
    finally:
        painter.end()
    # Only this figure's own layouts: the window's pending requests are left to the window.
    for it in _tree(item):
        if isinstance(it, QObject):
            QApplication.sendPostedEvents(it, QEvent.Type.LayoutRequest.value)
    if hasattr(scene, "prepareForPaint"):
        scene.prepareForPaint()


@contextlib.contextmanager
def _laid_out(item, size: QSizeF | None):
    """Temporarily give a top-level item ``size``; the screen layout is restored after."""
    if size is None or not _can_relayout(item):
        yield
        return
    old = item.geometry()
    try:
        item.setGeometry(QRectF(old.topLeft(), size))
        _settle(item)
        yield
    finally:
        item.setGeometry(old)
        scene = item.scene()
        if hasattr(scene, "prepareForPaint"):
            scene.prepareForPaint()  # view ranges follow the restored size before any repaint
        item.update()


@contextlib.contextmanager
def _vector_colorbars(item):
    """Swap every ColorBarItem's pixmap strip for a rectangle filled with a linear gradient.

    The strip is a 256-pixel image that SVG renderers stretch (and some flip wrongly); a
    gradient is exact at any zoom and is what "colorbar as vectors" means.
    """
    swaps = []
    for bar_item in _tree(item):
        if not isinstance(bar_item, pg.ColorBarItem):
            continue
        strip = getattr(bar_item, "bar", None)
        cmap = bar_item.colorMap() if hasattr(bar_item, "colorMap") else None
        if strip is None or cmap is None or strip.pixmap().isNull() or not strip.isVisible():
            continue
        pm = strip.pixmap()
        w, h = pm.width(), pm.height()
        rect = QGraphicsRectItem(QRectF(0, 0, w, h), strip.parentItem())
        rect.setTransform(strip.transform())
        rect.setPos(strip.pos())
        rect.setZValue(strip.zValue())
        rect.setPen(Qt.PenStyle.NoPen)
        # The strip's first pixel is the lowest value (the bar's transform puts it at the
        # bottom or the left); the gradient runs the same way in the strip's own coordinates.
        end = QPointF(0, h) if w == 1 or h > w else QPointF(w, 0)
        rect.setBrush(QBrush(cmap.getGradient(QPointF(0, 0), end)))
        strip.setVisible(False)
        swaps.append((strip, rect))
    try:
        yield
    finally:
        for strip, rect in swaps:
            strip.setVisible(True)
            scene = rect.scene()
            if scene is not None:
                scene.removeItem(rect)


# -- what a figure is ------------------------------------------------------------------------
@dataclass
class _Figure:
    """Something that can draw itself at any logical size."""

    title: str
    natural: QSizeF
    flexible: bool  # can be laid out again at another shape
    paint: Callable[[QPainter, QSizeF, bool, float], None]  # painter, size, vector?, scale


def _export_item(panel):
    item = panel.export_item()
    if item is None:
        raise FigureError(f"the {panel.title} panel is text only and has no figure to export")
    if item.scene() is None:
        raise FigureError(f"the {panel.title} panel is not shown anywhere yet; nothing to draw")
    return item


@contextlib.contextmanager
def _hidden(items):
    """Hide ``items`` (the selection's marks) while a figure is drawn; shown again after."""
    shown = [it for it in items if it.isVisible()]
    for it in shown:
        it.setVisible(False)
    try:
        yield
    finally:
        for it in shown:
            it.setVisible(True)


def _selection_marks(panel) -> list:
    marks = getattr(panel, "selection_marks", None)
    return list(marks()) if marks is not None else []


def _panel_figure(panel, with_title: bool = True, selection: bool = True) -> _Figure:
    item = _export_item(panel)
    title = str(panel.title)
    band = TITLE_BAND if with_title and not _shows_title(item, title) else 0.0
    natural = item.sceneBoundingRect().size()
    natural = QSizeF(natural.width(), natural.height() + band)

    def paint(painter: QPainter, size: QSizeF, vector: bool, scale: float) -> None:
        body = QRectF(0, band, size.width(), max(size.height() - band, 1.0))
        painter.fillRect(QRectF(QPointF(0, 0), size), _background(item))
        if band:
            _draw_title(painter, QRectF(0, 0, size.width(), band), title, 12)
        colorbars = _vector_colorbars(item) if vector else contextlib.nullcontext()
        marks = contextlib.nullcontext() if selection else _hidden(_selection_marks(panel))
        lines = _thicker_lines(item, scale) if not vector and abs(scale - 1.0) > 1e-3 else contextlib.nullcontext()
        with _laid_out(item, body.size()), _export_mode(item, painter, scale), colorbars, marks, lines:
            source = item.sceneBoundingRect()
            target = _fit(source.size(), body)
            item.scene().render(painter, target, source, Qt.AspectRatioMode.IgnoreAspectRatio)

    return _Figure(title, natural, _can_relayout(item), paint)


def _grid(count: int) -> tuple[int, int]:
    cols = max(1, min(3, math.ceil(math.sqrt(count))))
    return cols, math.ceil(count / cols)


def _dashboard_figure(panels: Sequence, title: str | None, cell: tuple[int, int], selection: bool = True) -> _Figure:
    figures = [_panel_figure(p, selection=selection) for p in panels]
    if not figures:
        raise FigureError("the dashboard has no panels with a figure to export")
    cols, rows = _grid(len(figures))
    header = DASHBOARD_HEADER if title else 0.0
    natural = QSizeF(cols * cell[0], header + rows * cell[1])

    def paint(painter: QPainter, size: QSizeF, vector: bool, scale: float) -> None:
        painter.fillRect(QRectF(QPointF(0, 0), size), _background(panels[0].export_item()))
        if header:
            _draw_title(painter, QRectF(0, 0, size.width(), header), title, 15)
        cw, ch = size.width() / cols, (size.height() - header) / rows
        for k, fig in enumerate(figures):
            r, c = divmod(k, cols)
            painter.save()
            painter.translate(c * cw, header + r * ch)
            fig.paint(painter, QSizeF(cw, ch), vector, scale)
            painter.restore()

    return _Figure(title or "Dashboard", natural, True, paint)


# -- sizes and devices -----------------------------------------------------------------------
def figure_size(natural: QSizeF, flexible: bool, width=None, height=None, scale=None) -> tuple[QSizeF, QSize]:
    """(logical size to lay the figure out at, pixel size of the output); see the module doc."""
    if scale is not None and (width is not None or height is not None):
        raise FigureError("give a scale or a pixel size, not both")
    for name, v in (("width", width), ("height", height)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIDE):
            raise FigureError(f"figure {name} must be a whole number of pixels in 1..{MAX_SIDE}, got {v!r}")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < scale <= MAX_SCALE):
            raise FigureError(f"figure scale must be a number in (0, {MAX_SCALE:g}], got {scale!r}")
    nw, nh = max(natural.width(), 1.0), max(natural.height(), 1.0)
    if width is not None and height is not None:
        if flexible:
            s = max(1.0, math.sqrt(width * height / (nw * nh)))
            return QSizeF(width / s, height / s), QSize(width, height)
        s = min(width / nw, height / nh)
        return QSizeF(width / s, height / s), QSize(width, height)
    if width is not None:
        s = width / nw
    elif height is not None:
        s = height / nh
    else:
        s = 1.0 if scale is None else float(scale)
    pixels = QSize(max(1, round(nw * s)), max(1, round(nh * s)))
    if max(pixels.width(), pixels.height()) > MAX_SIDE:
        raise FigureError(f"a {pixels.width()}×{pixels.height()} px figure is larger than {MAX_SIDE} px a side; "
                          "choose a smaller size or scale")
    return QSizeF(nw, nh), pixels


def _paint_on(device, fig: _Figure, logical: QSizeF, pixels: QSize, vector: bool) -> None:
    painter = QPainter(device)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        # Off: a heatmap cell must stay a solid block when scaled, never a blur.
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        s = pixels.width() / logical.width()
        painter.scale(s, pixels.height() / logical.height())
        fig.paint(painter, logical, vector, s)
    finally:
        painter.end()


def _render_image(fig: _Figure, logical: QSizeF, pixels: QSize) -> QImage:
    """The figure painted at ``pixels``. The scale from the logical size is the image's
    device pixel ratio, not a painter transform, so what is drawn in device pixels (cell
    numbers, cosmetic pens: axes, outlines, hatching, the selection) grows with it as the
    rest does; a 2× PNG had them at 1×, half the size of the SVG's."""
    image = QImage(pixels, QImage.Format.Format_ARGB32)
    dpm = round(_dpi() / 0.0254)
    image.setDotsPerMeterX(dpm)
    image.setDotsPerMeterY(dpm)
    image.fill(QColor("white"))
    s = pixels.width() / logical.width()
    image.setDevicePixelRatio(s)
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)  # solid cells
        # the rest of the pixel size's rounding, in the image's own logical units
        painter.scale(1.0, (pixels.height() / logical.height()) / s)
        fig.paint(painter, logical, False, s)
    finally:
        painter.end()
    image.setDevicePixelRatio(1.0)  # the file and the caller count pixels
    return image


def _bytes(fig: _Figure, fmt: str, width, height, scale) -> bytes:
    logical, pixels = figure_size(fig.natural, fig.flexible, width, height, scale)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if fmt == "png":
        image = _render_image(fig, logical, pixels)
        if not image.save(buffer, "PNG"):
            raise FigureError(f"could not encode the {fig.title} figure as PNG")
    elif fmt == "svg":
        gen = QSvgGenerator()
        gen.setOutputDevice(buffer)
        gen.setResolution(_dpi())
        gen.setSize(pixels)
        gen.setViewBox(QRectF(0, 0, pixels.width(), pixels.height()))
        gen.setTitle(fig.title)
        gen.setDescription("attention figure made with attnexplorer")
        _paint_on(gen, fig, logical, pixels, vector=True)
        buffer.close()
        from .svg_compat import portable_svg

        return portable_svg(bytes(buffer.data()))
    else:
        writer = QPdfWriter(buffer)
        writer.setResolution(_dpi())
        writer.setTitle(fig.title)
        writer.setCreator("attnexplorer")
        points = QSizeF(pixels.width() * 72.0 / _dpi(), pixels.height() * 72.0 / _dpi())
        writer.setPageSize(QPageSize(points, QPageSize.Unit.Point, "", QPageSize.SizeMatchPolicy.ExactMatch))
        writer.setPageMargins(QMarginsF(0, 0, 0, 0))
        _paint_on(writer, fig, logical, pixels, vector=True)
        del writer  # the PDF is finished when the painter ends; drop the writer before reading
    buffer.close()
    return bytes(buffer.data())


def _write(path: Path, data: bytes) -> Path:
    from ...io.atomic import atomic_write_bytes  # temp file + fsync + rename; WriteError on failure

    atomic_write_bytes(path, data)
    return path

