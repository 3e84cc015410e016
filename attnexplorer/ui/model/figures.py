"""The model window's two pictures as figures: the model view (every layer × head thumbnail,
with its colouring rings, ablation marks and selected head) and the head view (one head or all
heads, a hovered token kept), exported through the same route as every panel's figure
(``figures.export_panel``: PNG, SVG rewritten by ``svg_compat.portable_svg``, PDF) and offered in
the same Export figure… dialog.

Both views are QWidgets that paint themselves, not pyqtgraph items. A figure panel here holds a
*twin* of its view (never shown) and a ``QGraphicsWidget`` in a scene of its own whose paint
lays the twin out at the figure's size and renders it into the export's painter: text and lines
stay text and vectors in SVG and PDF, a thumbnail is an embedded image (one pixel per weight, as
every heatmap). The on-screen view is copied, not resized, so exporting never moves the window.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QSizeF
from PySide6.QtGui import QFont, QFontMetrics, QRegion
from PySide6.QtWidgets import QApplication, QGraphicsScene, QGraphicsWidget

from .head_view import HeadView
from .views import ModelGrid

# At a figure's print size (its on-screen size at 96 px per inch) the views' labels are drawn in
# this point size: the screen's 9 pt reads small on paper.
FIGURE_POINT_SIZE = 11.0
# The model view's figure is folded to fit this room (logical px, a page's shape): SmolLM2's
# 30 × 9 heads in two bands of 15 layers, a small model's thumbnails up to 120 px.
FIGURE_ROOM = (960, 720)


def _title_width(title: str) -> int:
    """The width the figure's title band needs (``figure_paint`` draws it at 12 pt)."""
    font = QFont(QApplication.font())
    font.setPointSizeF(12)
    return QFontMetrics(font).horizontalAdvance(title) + 24


class _Painted(QGraphicsWidget):
    """Paints ``twin`` at the item's own size (``figures`` resizes the item to lay a figure out)."""

    def __init__(self, twin):
        super().__init__()
        self.twin = twin

    def paint(self, painter, _option, _widget=None) -> None:
        size = self.size().toSize()
        self.twin.resize(size)
        self.twin.layout_for_figure()
        self.twin.render(painter, QPoint(0, 0), QRegion(0, 0, size.width(), size.height()))


class _Mark:
    """The selected head's frame as a figure's selection mark (the dialog's "Include the
    selection" hides it through ``isVisible``/``setVisible``, as it hides a plot's marks)."""

    def __init__(self, twin):
        self.twin = twin

    def isVisible(self) -> bool:
        return self.twin.show_selection

    def setVisible(self, shown: bool) -> None:
        self.twin.show_selection = shown


class _ViewFigure:
    """A figure panel (``kind``, ``title``, ``export_item``) over one of the model window's views."""

    document = None

    def __init__(self, twin):
        font = QFont(twin.font())
        font.setPointSizeF(FIGURE_POINT_SIZE)
        twin.setFont(font)
        self.twin = twin
        self.item = _Painted(twin)
        self.scene = QGraphicsScene()
        self.scene.addItem(self.item)
        self.title = self.kind

    def selection_marks(self) -> list:
        return [_Mark(self.twin)]

    def _place(self, width: int, height: int) -> None:
        self.item.resize(QSizeF(max(width, 1), max(height, 1)))


class ModelViewFigure(_ViewFigure):
    """The model view with its colouring (``sync`` copies the on-screen grid)."""

    kind = "model_view"
    short_title = "Model view"
    heading = "Model view"   # the window names the model and text in it

    def __init__(self, grid: ModelGrid):
        super().__init__(FigureGrid())
        self.grid = grid
        self.title = "Model view"

    def export_item(self):
        grid = self.grid
        if grid.is_empty:
            return None
        twin = self.twin
        twin.copy_from(grid)
        self.title = f"{self.heading}, rings by {grid.colouring[0]}" if grid.colouring else self.heading
        # folded as the view folds a window of FIGURE_ROOM (not the screen's room: a figure's
        # shape should not depend on the window), then trimmed to the thumbnails
        twin.resize(*FIGURE_ROOM)
        twin.layout_for_figure()
        hint = twin.sizeHint()
        self._place(max(hint.width(), _title_width(self.title)), hint.height())
        return self.item


class HeadViewFigure(_ViewFigure):
    """The head view of one layer: the head shown (or all heads) and the hovered token."""

    kind = "head_view"
    short_title = "Head view"

    def __init__(self, view: HeadView):
        super().__init__(FigureHeadView())
        self.view = view
        self.layer: int | None = None
        self.title = "Head view"

    def export_item(self):
        view = self.view
        if view.is_empty:
            return None
        twin = self.twin
        twin.copy_from(view)
        which = "all heads" if view.head is None else f"head {view.head}"
        self.title = f"Head view: layer {self.layer}, {which}" if self.layer is not None else f"Head view: {which}"
        self._place(max(view.width(), 360), max(view.height(), 240))
        return self.item


class FigureGrid(ModelGrid):
    """A model view that is only ever painted into figures."""

    show_selection = True

    def layout_for_figure(self) -> None:
        self._fit()

    def set_selected(self, layer, head) -> None:   # the twin follows the view, it is not clicked
        self._selected = None if layer is None else (layer, head)

    def paintEvent(self, event) -> None:
        selected = self._selected
        if not self.show_selection:
            self._selected = None
        try:
            super().paintEvent(event)
        finally:
            self._selected = selected


class FigureHeadView(HeadView):
    show_selection = True   # a head view has no selection mark; the hovered token is its subject

    def layout_for_figure(self) -> None:
        pass
