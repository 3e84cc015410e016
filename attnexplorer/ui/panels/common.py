"""Pieces shared by the figure panels: the canvas with a title and a hover read-out."""

from __future__ import annotations

import functools

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QGraphicsItem, QLabel, QSizePolicy, QVBoxLayout

from . import theme
from .base import Panel, when_built
from .token_axis import ShrinkingLabel

# Short enough for a 360-px panel; the read-out line elides anything longer (full text in its tooltip).
HOVER_HINT = "Hover: read · click: select · wheel: zoom"
HOVER_HELP = "Hover a cell to read it; click to select it. Wheel zooms, drag pans, double-click resets."


def feature_names(prefix: str, count: int) -> list[str]:
    """Column names of a feature matrix: q0, q1, … (the walkthroughs index from 0)."""
    return [f"{prefix}{j}" for j in range(count)]


# The per-head intermediates, any of which tells how many heads a result has (a result
# computed with ``keep=`` may carry only one of them).
_PER_HEAD = ("weights", "scaled_scores", "scores", "Q", "K", "V", "head_outputs")


def result_heads(result) -> int:
    """How many heads ``result`` has, from whichever per-head intermediate it carries (0: none)."""
    for name in _PER_HEAD:
        array = getattr(result, name, None)
        if array is not None:
            return array.shape[0]
    return 0


def query_row(result, head: int, query: int):
    """(scaled scores, weights) of ``query``'s row in ``head``, each (n_k,), as the result
    gives them (``AttentionResult.row``, dense or long); None when the result holds neither."""
    if not result.tiled and (result.scaled_scores is None or result.weights is None):
        return None
    return result.row("scaled_scores", head, query), result.row("weights", head, query)


def clamp_selection(document, result):
    """(head, query, key) of the document's selection, clamped to ``result``'s sizes.

    The result may lag the session by one edit while a big computation runs, so indices
    are checked against the result actually drawn.
    """
    sel = document.selection.current
    heads = max(1, result_heads(result))
    n = result.n
    head = min(max(sel.head, 0), heads - 1)
    query = min(max(sel.query, 0), n - 1)
    # Keys are the source's tokens in cross-attention.
    key = None if sel.key is None else min(max(sel.key, 0), len(result.key_tokens) - 1)
    return head, query, key


_AXIS_CACHE = QGraphicsItem.CacheMode.DeviceCoordinateCache


def set_plot_title(plot: pg.PlotItem, text: str, size: str = "10pt") -> None:
    """Give ``plot`` the title ``text`` unless it already has it: pyqtgraph's setTitle asks the
    plot's whole layout to be laid out again even for the same text, and a redraw that set
    an unchanged title each frame cost a layout pass of the panel per frame while a slider
    was dragged."""
    if plot.titleLabel.text != text:
        plot.setTitle(text, size=size)


def _axis_export_mode(original, export, opts=None) -> None:
    """An axis's ``setExportMode``: uncached while exported (an SVG or PDF gets real text)."""
    original.__self__.setCacheMode(QGraphicsItem.CacheMode.NoCache if export else _AXIS_CACHE)
    original(export, opts)


def _repaint_axis(axis, *_view) -> None:
    """Draw ``axis`` again once the resize that called this is over: a picture made during
    it measured the axis against the view's old transform (ticks at the old scale)."""
    def again():
        try:
            axis.picture = None
            axis.update()
        except RuntimeError:  # the panel was closed meanwhile
            pass
    QTimer.singleShot(0, again)


class ElidedLabel(QLabel):
    """A one-line label that ends a text too long for its width with "…", never clipping it.

    ``text()`` stays the whole text (tests and copy read it); only the painting is elided.
    A changing text never asks for more width, so the panel's layout does not move.
    """

    def __init__(self, text: str = "", parent=None):
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(10)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text)


class Heading(ShrinkingLabel):
    """The panel title, the first row of every exported figure."""

    def __init__(self, text: str):
        super().__init__(text, size="11pt", bold=True, justify="center")


class FigurePanel(Panel):
    """A panel made of one ``pg.GraphicsLayoutWidget`` (the exported figure) and a read-out line.

    The figure's first row is the panel title (so exports carry it); subclasses add their
    plots below it in ``self.figure``.
    """

    minimum_size = (360, 260)

    def __init__(self, document, parent=None):
        # The canvas, heading and read-out line are made here (about 2 ms): the window lays
        # the panel out, and Qt shows its widgets, before it is built; build() adds the plots
        # (20-65 ms a panel) to the canvas's scene.
        super().__init__(document, parent)
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.figure: pg.GraphicsLayout = self.canvas.ci
        self.figure.setContentsMargins(4, 4, 4, 4)
        self.heading = Heading(self.title)
        self.figure.addItem(self.heading, row=0, col=0, colspan=8)
        self.readout = ElidedLabel(HOVER_HINT)
        self.readout.setFont(theme.monospace_font(9))
        self.readout.setToolTip(HOVER_HELP)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.canvas, 1)
        layout.addWidget(self.readout)
        self.setMinimumSize(*self.minimum_size)

    def ensure_built(self) -> "FigurePanel":
        if not self.is_built:
            super().ensure_built()
            if self.isVisible():
                # Built in its showEvent (by refresh), where cache_axes found no axes yet.
                if self.isWindow():
                    # Shown on its own, it is exposed before the event loop would place the
                    # new plots (in a dock, the window's layout pass does that before its paint).
                    self.figure.layout.activate()
                self.cache_axes()
        return self

    def figure_item(self):
        return self.figure

    def settle_views(self) -> None:
        """Apply the ranges the redraw set now, not at the paint.

        pyqtgraph defers a plot's new range to the start of its next paint (the scene's
        ``prepareForPaint``); moving the view there changes its items' transforms and bounds
        in the middle of the paint, which asks for a second paint of the whole canvas. The
        Query panel painted twice per frame of a τ drag at N = 512 (2.15 paints a frame,
        11 ms of its 28), once (1.1) with this."""
        self.canvas.scene().prepareForPaint()

    def showEvent(self, event) -> None:
        if self.is_built:
            self.cache_axes()
        super().showEvent(event)

    def cache_axes(self) -> None:
        """Paint every axis once into a pixmap and reuse it until its ticks or size change.

        An axis repaints whenever its part of the canvas is repainted, and replaying its text
        costs about 1 ms, so an edit that only changes the data in the plots paid that for
        every axis on screen. pyqtgraph calls ``update()`` on an axis whenever its ticks,
        labels or range change, which refreshes the cached pixmap. An export (which calls
        ``setExportMode``) draws the axis itself, as text and lines, not the pixmap.
        """
        for item in self.canvas.scene().items():
            if isinstance(item, pg.AxisItem) and not getattr(item, "_attn_cached", False):
                item._attn_cached = True
                item.setCacheMode(_AXIS_CACHE)
                item.setExportMode = functools.partial(_axis_export_mode, item.setExportMode)
                # pyqtgraph drops a resized axis's picture but asks for no repaint, so the
                # cached pixmap (ticks at the old size) stayed on screen after a dock was
                # resized: labels squeezed into part of the axis, or past its end.
                view = item.linkedView()
                if view is not None:
                    view.sigResized.connect(functools.partial(_repaint_axis, item))

    @when_built
    def set_number_format(self, number_format: str) -> None:
        """Every heatmap of the panel writes its cells in ``number_format`` (one per panel)."""
        views = getattr(self, "views", None)
        for view in views() if views is not None else []:
            view.set_number_format(number_format)

    def selection_marks(self) -> list:
        """The items that mark the selected query and key (hidden in a figure exported
        without the selection): each heatmap's row box and key column."""
        views = getattr(self, "views", None)
        return [frame for view in (views() if views is not None else []) for frame in (view.row_frame, view.col_frame)]

    def set_heading(self, text: str) -> None:
        if self.heading.text != text:
            self.heading.setText(text, size="11pt", bold=True)

    def show_readout(self, text: str) -> None:
        text = text or HOVER_HINT
        self.readout.setText(text)
        self.readout.setToolTip(HOVER_HELP if text == HOVER_HINT else text)
