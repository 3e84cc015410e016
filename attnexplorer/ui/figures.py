"""Figures: one panel, or the whole dashboard, as PNG, SVG or PDF.

Every format goes through one route: the panel's pyqtgraph item is painted with a QPainter
(``QGraphicsScene.render``) onto a QImage (PNG), a ``QSvgGenerator`` (SVG) or a
``QPdfWriter`` (PDF). pyqtgraph's own SVG exporter rewrites the scene's XML by hand and has
known trouble with colorbars and gradients, and it has no PDF exporter at all, so it is not
used. What callers may rely on:

- **Looks like the screen.** A panel is drawn from the very items on screen, with the view's
  background, so a figure at scale 1 matches ``panel.grab()``. A panel whose plot does not
  already show its title gets the title drawn above it.
- **Crisp heatmaps.** Smooth pixmap scaling is off, so a heatmap cell is a solid block at
  any scale (PNG); in SVG a small heatmap is one rect per cell (``svg_compat``).
- **Portable SVG.** Qt's SVG output is rewritten (``svg_compat.portable_svg``) so that
  renderers other than Qt's draw it like the PNG: real stroke widths, a generic font stack.
- **Vectors where it matters.** In SVG and PDF the axes, tick labels and titles are vector
  paths and real text; a colorbar's strip is drawn as a vector linear gradient; the heatmap
  itself is an embedded image (one pixel per matrix cell).
- **Size.** With no options a figure has the panel's on-screen size (logical pixels).
  ``scale=s`` multiplies it. ``width`` *or* ``height`` scales it to that size keeping its
  shape. ``width`` *and* ``height`` give exactly that size: the plot is laid out again at
  that shape (fonts keep their size until the figure is larger than the screen one, then
  everything grows together). SVG and PDF pages are the figure's size at 96 px per inch.
- **Whole files only.** Everything is drawn in memory first and then written with a
  temporary file and a rename, so a failed export leaves no partial file and an old file of
  the same name intact.

File names written by ``export_figures``: ``figures/<kind>.<fmt>`` per panel (e.g.
``figures/weights.png``) and ``figures/dashboard.<fmt>``.
"""

from __future__ import annotations

import contextlib
import html
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QIODevice, QMarginsF, QPointF, QRectF, QSize, QSizeF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QImage, QPageSize, QPainter, QPdfWriter, QPicture
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QApplication, QGraphicsItem, QGraphicsRectItem, QGraphicsView

from ..core.errors import AttnExplorerError

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


def _can_relayout(item) -> bool:
    # Only a top-level item (a view's central layout or plot) may be resized on its own;
    # a plot nested in a layout would overlap its neighbours.
    return item.parentItem() is None and hasattr(item, "setGeometry")


@contextlib.contextmanager
def _laid_out(item, size: QSizeF | None):
    """Temporarily give a top-level item ``size``; the screen layout is restored after."""
    if size is None or not _can_relayout(item):
        yield
        return
    old = item.geometry()
    try:
        item.setGeometry(QRectF(old.topLeft(), size))
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
        with _laid_out(item, body.size()), _export_mode(item, painter, scale), colorbars, marks:
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
    image = QImage(pixels, QImage.Format.Format_ARGB32)
    dpm = round(_dpi() / 0.0254)
    image.setDotsPerMeterX(dpm)
    image.setDotsPerMeterY(dpm)
    image.fill(QColor("white"))
    _paint_on(image, fig, logical, pixels, vector=False)
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
    from ..io.atomic import atomic_write_bytes  # temp file + fsync + rename; WriteError on failure

    atomic_write_bytes(path, data)
    return path


# -- public API --------------------------------------------------------------------------------
def render_panel(panel, *, width=None, height=None, scale=None, with_title: bool = True,
                 selection: bool = True) -> QImage:
    """The panel's figure as a QImage (what ``export_panel`` writes as PNG)."""
    fig = _panel_figure(panel, with_title, selection)
    logical, pixels = figure_size(fig.natural, fig.flexible, width, height, scale)
    return _render_image(fig, logical, pixels)


def export_panel(panel, path, fmt: str | None = None, *, width=None, height=None, scale=None,
                 selection: bool = True) -> Path:
    """Write ``panel``'s figure to ``path`` as ``fmt`` (png/svg/pdf; default: the extension).
    ``selection=False`` leaves out the marks of the selected query and key (orange row box,
    dashed key column, outlined bar).

    Raises FigureError for a bad format, size or a text-only panel, and WriteError (from
    ``attnexplorer.io.atomic``) when the file cannot be written; either way nothing is left
    half-written.
    """
    path = Path(path)
    fmt = _check_format(fmt, path)
    return _write(path, _bytes(_panel_figure(panel, selection=selection), fmt, width, height, scale))


def exportable(panels: Iterable) -> list:
    """The panels a figure can be made of: they apply to their session and have a plot."""
    out = []
    for p in panels:
        doc = getattr(p, "document", None)
        if doc is not None and not p.applies_to(doc.session):
            continue
        if p.export_item() is None:
            continue
        out.append(p)
    return out


def export_dashboard(panels: Sequence, path, fmt: str | None = None, *, width=None, height=None,
                     scale=None, title: str | None = None, cell: tuple[int, int] = FIGURE_SIZE,
                     selection: bool = True) -> Path:
    """Write every exportable panel of ``panels`` as one figure: a grid (up to three columns)
    with each panel's title, under an optional overall ``title``. Each cell is laid out at
    ``cell`` logical pixels unless ``width`` and ``height`` ask for another shape."""
    path = Path(path)
    fmt = _check_format(fmt, path)
    fig = _dashboard_figure(exportable(panels), title, cell, selection)
    return _write(path, _bytes(fig, fmt, width, height, scale))


def panel_size(panel) -> tuple[int, int]:
    """The panel's figure size at scale 1 in pixels (on-screen size, plus a title band if any)."""
    n = _panel_figure(panel).natural
    return round(n.width()), round(n.height())


def dashboard_size(panels: Sequence, title: str | None = None, cell: tuple[int, int] = FIGURE_SIZE) -> tuple[int, int]:
    """The dashboard's size at scale 1 in pixels for these panels."""
    n = _dashboard_figure(exportable(panels), title, cell).natural
    return round(n.width()), round(n.height())


def ensure_app() -> QApplication:
    """The running QApplication, or a new one on the offscreen platform (no display needed)."""
    from PySide6.QtCore import QCoreApplication

    app = QCoreApplication.instance()
    if app is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication(["attnexplorer"])
    elif not isinstance(app, QApplication):
        raise FigureError("figures need a QApplication, but a non-widget Qt application is running")
    return app


def session_title(session) -> str:
    """The dashboard's heading for a session: the preset (if any) and its sizes."""
    name = session.preset.name if session.preset is not None else "session"
    heads = f"{session.heads} head" + ("s" if session.heads != 1 else "")
    return f"attnexplorer — {name}: {session.n} tokens, d = {session.d}, {heads}"


def export_figures(result, out_dir, formats: list[str], *, selection: bool = False) -> list[Path]:
    """Headless figures for ``attnexplorer export --figures``, drawn from ``result`` itself.

    Builds the panels on ``result`` offscreen (no document, nothing computed again), each
    laid out at ``FIGURE_SIZE``, and writes ``out_dir/figures/<kind>.<fmt>`` for every panel
    that applies to ``result.session`` and has a plot, and ``out_dir/figures/dashboard.<fmt>``,
    for every format in ``formats``. Returns the paths written, in that order. ``result``
    should hold every intermediate (``compute`` without ``keep``): a panel draws what it
    finds. ``selection`` draws the selected query and key's marks (off: a figure for a
    slide shows the data alone).
    """
    wanted = [str(f).strip().lower() for f in formats if str(f).strip()]
    for f in wanted:
        _check_format(f, Path(f"figure.{f}"))
    if not wanted:
        return []
    session = result.session
    ensure_app()
    from .panels import make_panels
    from .result_source import ResultSource

    source = ResultSource(result)
    panels = []
    try:
        panels = list(make_panels(source))
        shown = []
        for p in panels:
            if not p.applies_to(session):
                continue
            p.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
            p.resize(*FIGURE_SIZE)
            p.show()
            shown.append(p)
        QApplication.processEvents()
        plots = exportable(shown)
        for p in plots:
            # The figure is only part of the panel (a read-out line sits below it): grow the
            # panel so that the figure itself gets FIGURE_SIZE.
            got = p.export_item().sceneBoundingRect().size()
            p.resize(p.width() + FIGURE_SIZE[0] - round(got.width()), p.height() + FIGURE_SIZE[1] - round(got.height()))
        QApplication.processEvents()
        for p in shown:
            p.refresh()
        QApplication.processEvents()
        folder = Path(out_dir) / "figures"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            from ..io.atomic import WriteError

            raise WriteError(f"cannot write to {folder}: {err.strerror or err}") from None
        written = []
        for fmt in wanted:
            for p in plots:
                written.append(export_panel(p, folder / f"{p.kind}.{fmt}", fmt, selection=selection))
            written.append(export_dashboard(plots, folder / f"dashboard.{fmt}", fmt, title=session_title(session),
                                            selection=selection))
        return written
    finally:
        for p in panels:
            p.close()
            p.dispose()
            p.deleteLater()
        source.deleteLater()
        QApplication.processEvents()
