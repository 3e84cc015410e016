"""The model view of a real model's attention on one text (the model window's other picture,
the head view, is ``head_view``).

- ``ModelGrid``: every layer × head attention pattern as a thumbnail (queries down, keys
  across, viridis 0…1), layers down the side, heads along the top; a tall model is folded into
  side-by-side bands of layers so that all of it fits the window (``models.views.grid_layout``).
  Clicking a thumbnail emits ``chosen(layer, head)``; Ctrl+click, or the context menu, asks to
  ablate the head (``ablate(layer, head, kind)``, kind None to restore it; ``reset`` for all),
  and ablated heads are marked (a red cross and the ablation's letter: Z, M or P). Beside each
  band, the logit-lens strip (``ui.model.lens_strip``): each layer's top token at the predicted position,
  with the interventions where there are any. One widget
  paints all of them (30 × 9 thumbnails for SmolLM2 would be 270 child widgets otherwise);
  each thumbnail is a QImage made once per run.
  Where each thumbnail goes is ``thumbnail_places``.
- ``head_view.HeadView``: the tokens in two columns (queries left, keys right) joined by lines
  whose opacity is the weight, for one head or all heads in their colours.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import QMenu, QSizePolicy, QToolTip, QWidget

from ...models.views import grid_layout
from . import lens_strip
from .thumbnail_places import ThumbnailPlaces, grid_size

_LUT = pg.colormap.get("viridis").getLookupTable(0.0, 1.0, 256, alpha=False).astype(np.uint8)


def thumbnail_rgb(weights: np.ndarray) -> np.ndarray:
    """Weights (any leading axes, … × n × n) as viridis RGB bytes (… × n × n × 3): Qt-free, so a
    worker can colour a whole model's thumbnails and the GUI thread only wraps them."""
    index = np.clip(np.nan_to_num(weights) * 255.0, 0, 255).astype(np.uint8)
    return _LUT[index]


def _image(rgb: np.ndarray) -> QImage:
    rgb = np.ascontiguousarray(rgb)
    n_rows, n_cols = rgb.shape[:2]
    image = QImage(rgb.data, n_cols, n_rows, 3 * n_cols, QImage.Format.Format_RGB888)
    return image.copy()   # own the pixels: the numpy buffer goes away


def _thumbnail(weights: np.ndarray) -> QImage:
    """An n × n RGB image of one head's weights (0…1 through viridis), painted scaled later."""
    return _image(thumbnail_rgb(weights))


ABLATION_LABELS = {"zero": "Zero-ablate", "mean": "Mean-ablate", "patch": "Patch from the second text"}


class ModelGrid(QWidget):
    chosen = Signal(int, int)   # layer, head
    ablate = Signal(int, int, object)   # layer, head, "zero" | "mean" | "patch" | None (restore)
    reset = Signal()

    MIN_CELL, MAX_CELL = 36, 120
    GAP = 4

    def __init__(self, parent=None):
        super().__init__(parent)
        self._images: list[list[QImage]] = []
        self._selected: tuple[int, int] | None = None
        self.ablations: dict[tuple[int, int], str] = {}
        self.colouring: tuple[str, np.ndarray] | None = None   # (score name, layers × heads)
        self.lens: list = []   # lens_strip.LensCell per layer: the logit-lens strip beside each band
        self.generated: tuple[int, int] | None = None   # (prompt length, tokens) while generation grows the text
        self.CELL = self.MIN_CELL
        self.bands = 1
        self._places: ThumbnailPlaces | None = None
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def set_attentions(self, attentions: np.ndarray) -> None:
        """attentions: (layers, heads, n, n)."""
        self._images = [[_thumbnail(attentions[l, h]) for h in range(attentions.shape[1])]
                        for l in range(attentions.shape[0])]
        self._selected = None
        self.lens = []   # the old run's lens says nothing of this one
        self.generated = None
        self._fit()
        self.updateGeometry()
        self.update()

    @property
    def is_empty(self) -> bool:
        """Whether there are no thumbnails (no run shown yet)."""
        return not self._images

    def copy_from(self, grid: "ModelGrid") -> None:
        """Show what ``grid`` shows (its thumbnails, ablation marks, selected head and
        colouring): a figure's twin follows the view on screen without being clicked."""
        self._images, self.ablations, self._selected = grid._images, dict(grid.ablations), grid._selected
        self.colouring = grid.colouring
        self.update()

    def set_generated(self, rgb: np.ndarray, prompt_length: int | None) -> None:
        """The thumbnails of the text as generation grows it, coloured on a worker
        (``thumbnail_rgb``: layers, heads, N, N, 3), the rows past ``prompt_length`` marked in
        orange beside each; None: the prompt's own, unmarked. The selection, the ablation marks
        and the lens strip stay."""
        self._images = [[_image(rgb[l, h]) for h in range(rgb.shape[1])] for l in range(rgb.shape[0])]
        self.generated = None if prompt_length is None else (prompt_length, rgb.shape[2])
        self.update()

    def set_ablations(self, ablations: dict[tuple[int, int], str]) -> None:
        """(layer, head) → the ablation's kind, marked on the thumbnails."""
        self.ablations = dict(ablations)
        self.update()

    def set_lens(self, result: dict | None) -> None:
        """The logit-lens strip from a prediction's result (none: no strip)."""
        cells = lens_strip.lens_cells(result)
        cells = cells if len(cells) == len(self._images) else []
        if bool(cells) != bool(self.lens):
            self.lens = cells
            self._fit()
            self.updateGeometry()
        self.lens = cells
        self.update()

    def _lens_width(self) -> int:
        return lens_strip.WIDTH if self.lens else 0

    def _min_cell(self) -> int:
        return lens_strip.MIN_CELL if self.lens else self.MIN_CELL

    def lens_rect(self, layer: int) -> QRectF:
        """Where layer ``layer``'s lens token is drawn: right of its row of thumbnails."""
        return self.places().lens_rect(layer)

    def lens_at(self, x: float, y: float) -> int | None:
        for layer in range(len(self.lens)):
            if self.lens_rect(layer).contains(x, y):
                return layer
        return None

    def set_colouring(self, name: str | None, values: np.ndarray | None = None) -> None:
        """Ring each thumbnail in orange, as opaque as its value is high among all heads (an
        attribution, named ``dla …``/``ablate:…``: as its size is among them); ``values``:
        layers × heads, None for no colouring; hovering writes the value."""
        self.colouring = None if name is None or values is None else (name, np.asarray(values, dtype=float))
        self.update()

    def ring_colour(self, layer: int, head: int) -> QColor:
        name, values = self.colouring
        attribution = name.startswith(("dla ", "ablate:"))
        if attribution:
            values = np.abs(values)   # an attribution matters by its size, either sign: 0 is the least
        low, high = 0.0 if attribution else float(np.nanmin(values)), float(np.nanmax(values))
        share = 0.0 if high <= low else (float(values[layer, head]) - low) / (high - low)
        return QColor(255, 110, 0, int(round(255 * min(max(share, 0.0), 1.0))))

    def set_selected(self, layer: int | None, head: int | None) -> None:
        self._selected = None if layer is None else (layer, head)
        self.update()

    def _margins(self) -> tuple[int, int]:
        # Asked for by every cell_rect: measured once per font, not 2 × 270 times a paint.
        font = self.font()
        if getattr(self, "_margins_for", None) != font:
            fm = QFontMetrics(font)
            self._margins_for, self._margins_are = QFont(font), (fm.horizontalAdvance("L00 ") + 8, fm.height() + 8)
        return self._margins_are

    def _size_for(self, cell: int, bands: int) -> QSize:
        layers = len(self._images)
        return grid_size(layers, len(self._images[0]) if layers else 0, cell, bands, self._margins(),
                         self._lens_width(), self.GAP)

    def sizeHint(self) -> QSize:
        return self._size_for(self.CELL, self.bands)

    def minimumSizeHint(self) -> QSize:
        # Below this the scroll area scrolls: thumbnails smaller than 36 px show no pattern.
        return self._size_for(self._min_cell(), self.bands)

    def _room(self) -> tuple[int, int]:
        """The space to fill: in a scroll area, its viewport (the grid itself may be taller)."""
        parent = self.parentWidget()
        height = parent.height() if parent is not None and parent.height() > 0 else self.height()
        return self.width(), height

    def resizeEvent(self, event) -> None:
        before = (self.bands, self.CELL)
        self._fit()
        super().resizeEvent(event)
        if (self.bands, self.CELL) != before:
            self.updateGeometry()

    def _fit(self) -> None:
        """Thumbnails as large as the room allows (up to 120 px), the layers folded into bands
        when that shows the whole model (so 6 × 12 heads are not postage stamps and 30 × 9 does
        not scroll)."""
        if self._images:
            left, top = self._margins()
            width, height = self._room()
            self.bands, self.CELL = grid_layout(len(self._images), len(self._images[0]), width, height,
                                                left + self._lens_width(), top, self.GAP, self._min_cell(),
                                                self.MAX_CELL)

    def places(self) -> ThumbnailPlaces:
        """Where everything goes in the layout now (made again when the layout changes)."""
        layers = len(self._images)
        key = (layers, len(self._images[0]) if layers else 0, self.CELL, self.bands, self._margins(),
               self._lens_width(), self.GAP)
        if self._places is None or self._places.key != key:
            self._places = ThumbnailPlaces(*key)
        return self._places

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) under a point, or None between and around the thumbnails."""
        return self.places().cell_at(x, y)

    def cell_rect(self, layer: int, head: int) -> QRectF:
        return self.places().cell_rect(layer, head)

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), self.palette().base())
        p.setPen(self.palette().text().color())
        places = self.places()
        left, top = places.left, places.top
        for band in range(self.bands if places.layers else 0):
            for h in range(places.heads):
                r = places.cell_rect(band * places.rows, h)
                p.drawText(QRectF(r.left(), 2, r.width(), top - 4), Qt.AlignmentFlag.AlignCenter, f"H{h}")
        rects = places.rects
        for l, row in enumerate(self._images):
            r = rects[l][0]
            p.drawText(QRectF(r.left() - left + 2, r.top(), left - 8, r.height()),
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"L{l}")
            for place, image in zip(rects[l], row):
                p.drawImage(place, image)
        self._paint_colouring(p)
        self._paint_ablations(p)
        self._paint_lens(p, top)
        self._paint_generated(p)
        if self._selected is not None:
            p.setPen(QPen(QColor(230, 60, 40), 3))
            p.drawRect(self.cell_rect(*self._selected).adjusted(-2, -2, 2, 2))
        p.end()

    def _paint_generated(self, p: QPainter) -> None:
        """An orange bar left of each thumbnail beside the generated rows (the newest one: its
        last pixels): the thumbnail itself stays the weights."""
        if self.generated is None:
            return
        prompt, total = self.generated
        orange = QColor(235, 130, 40)
        for row_places in self.places().rects:
            for r in row_places:
                row = r.height() / total
                p.fillRect(QRectF(r.left() - 3, r.top() + prompt * row, 2, (total - prompt) * row), orange)

    def _paint_lens(self, p: QPainter, top: int) -> None:
        if not self.lens:
            return
        rows = self.places().rows
        text = self.palette().text().color()
        for band in range(self.bands):
            if band * rows < len(self.lens):
                r = self.lens_rect(band * rows)
                p.setPen(text)
                p.drawText(QRectF(r.left(), 2, r.width(), top - 4), Qt.AlignmentFlag.AlignCenter, "lens")
        for layer, cell in enumerate(self.lens):
            lens_strip.paint_cell(p, self.lens_rect(layer), cell, text)

    def _paint_colouring(self, p: QPainter) -> None:
        if self.colouring is None:
            return
        layers, heads = self.places().layers, self.places().heads
        values = self.colouring[1]
        if values.shape != (layers, heads):
            return
        p.setBrush(Qt.BrushStyle.NoBrush)
        for layer in range(layers):
            for head in range(heads):
                # a ring in the gap between thumbnails (GAP = 4: 2 px each side), the pattern left visible
                p.setPen(QPen(self.ring_colour(layer, head), 2))
                p.drawRect(self.cell_rect(layer, head).adjusted(-1, -1, 1, 1))

    def _paint_ablations(self, p: QPainter) -> None:
        layers, heads = self.places().layers, self.places().heads
        bold = QFont(self.font())
        bold.setBold(True)
        p.setFont(bold)
        for (layer, head), kind in self.ablations.items():
            if not (0 <= layer < layers and 0 <= head < heads):
                continue
            r = self.cell_rect(layer, head)
            p.fillRect(r, QColor(255, 255, 255, 150))
            p.setPen(QPen(QColor(200, 20, 30), 2))
            p.drawLine(r.topLeft(), r.bottomRight())
            p.drawLine(r.topRight(), r.bottomLeft())
            p.drawText(r.adjusted(2, 1, -2, -1), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, kind[0].upper())
        p.setFont(self.font())

    def mouseMoveEvent(self, event) -> None:
        cell = self.cell_at(event.position().x(), event.position().y())
        self.setCursor(Qt.CursorShape.PointingHandCursor if cell else Qt.CursorShape.ArrowCursor)
        if cell:
            QToolTip.showText(event.globalPosition().toPoint(), self.cell_tooltip(*cell), self)
            return
        lens = self.lens_at(event.position().x(), event.position().y())
        if lens is not None:
            QToolTip.showText(event.globalPosition().toPoint(), self.lens[lens].tooltip, self)

    def cell_tooltip(self, layer: int, head: int) -> str:
        """What hovering a thumbnail says: which head, its ablation and colouring value, what a click does."""
        cell = (layer, head)
        return (f"layer {layer}, head {head}{self._ablation_note(cell)}{self._value_note(cell)}: "
                "click to load this layer into the tables; Ctrl+click to zero-ablate the head (again to "
                "restore it); right-click for mean and patched ablation")

    def _value_note(self, cell) -> str:
        if self.colouring is None or self.colouring[1].shape[0] <= cell[0]:
            return ""
        name, values = self.colouring
        return f", {name} {values[cell[0], cell[1]]:.3f}"

    def _ablation_note(self, cell) -> str:
        kind = self.ablations.get(tuple(cell))
        return f" ({kind}-ablated)" if kind else ""

    def mousePressEvent(self, event) -> None:
        cell = self.cell_at(event.position().x(), event.position().y())
        if not cell or event.button() != Qt.MouseButton.LeftButton:
            return
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.ablate.emit(cell[0], cell[1], None if cell in self.ablations else "zero")
            return
        self.set_selected(*cell)
        self.chosen.emit(*cell)

    def menu_for(self, layer: int, head: int) -> QMenu:
        """The thumbnail's context menu: each ablation, restoring the head, resetting all."""
        menu = QMenu(self)
        current = self.ablations.get((layer, head))
        for kind, label in ABLATION_LABELS.items():
            action = menu.addAction(f"{label} L{layer}H{head}", lambda k=kind: self.ablate.emit(layer, head, k))
            action.setCheckable(True)
            action.setChecked(current == kind)
        restore = menu.addAction(f"Restore L{layer}H{head}", lambda: self.ablate.emit(layer, head, None))
        restore.setEnabled(current is not None)
        menu.addSeparator()
        menu.addAction("Reset interventions", self.reset.emit)
        return menu

    def contextMenuEvent(self, event) -> None:
        cell = self.cell_at(event.pos().x(), event.pos().y())
        if cell:
            self.menu_for(*cell).exec(event.globalPos())
