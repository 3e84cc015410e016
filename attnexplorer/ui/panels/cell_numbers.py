"""The numbers written in a heatmap's cells, painted by one item (``MatrixView``'s part).

``CellNumbers`` decides which cells get a number (few enough whole cells in view, big
enough to read), in which style (``core.numbers.display.NUMBER_FORMATS``) and colour, and paints
them; the view tells it what is in view (``whole_cells``) and where to read the values.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QFontMetricsF
from PySide6.QtWidgets import QGraphicsItem

from ...core.numbers import display
from . import theme

# Cell numbers are written only while at most this many cells are in view (16 × 16): more
# would be too small to read.
MAX_CELL_TEXTS = 256


class CellNumbers(QGraphicsItem):
    """Every number written in the cells, painted by this one item in one ``paint()``.

    A text item per cell cost about 40 µs each to lay out and paint (10 ms at 16 × 16);
    here each distinct string is measured once (its advance, from the font's metrics) and a
    repaint is one transform of the cell centres plus one ``drawText`` per cell. (A prepared
    ``QStaticText`` per string drew a little faster but cost ~15 µs to prepare, and an edit
    brings new numbers for every cell: 128 of them, ~2 ms, at each W_q edit of the bench.)
    Text is drawn in device pixels, so it keeps its size at any zoom; black on light cells,
    white on dark.
    """

    def __init__(self):
        super().__init__()
        self._font = theme.cell_font(10)
        self._font_px = 10
        self._metrics = QFontMetricsF(self._font)
        self._sizes: dict[str, tuple[str, tuple[float, float]]] = {}
        self._rows = np.zeros(0, dtype=int)
        self._cols = np.zeros(0, dtype=int)
        self._texts: list[str] = []
        self._dark = np.zeros(0, dtype=bool)
        self._centres = np.zeros((0, 2))
        self._half = np.zeros((0, 2))
        self._groups: list = []
        self._rect = QRectF()
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresParentOpacity, True)
        # Presenter mode draws the plots zoom times larger; text drawn in device pixels must
        # grow with them (ui/lesson/presenter.py sets it; 1 everywhere else).
        self.zoom = 1.0
        self._number_format = display.DEFAULT_NUMBER_FORMAT

    @property
    def number_format(self) -> str:
        return self._number_format

    def set_number_format(self, number_format: str) -> bool:
        """Write numbers in ``number_format`` (``core.numbers.display.NUMBER_FORMATS``: auto,
        fixed2..4) from the next ``write`` on; True when that changes them."""
        if number_format not in display.NUMBER_FORMATS:
            raise ValueError(f"unknown number format {number_format!r}")
        changed = number_format != self._number_format
        self._number_format = number_format
        return changed

    def set_zoom(self, zoom: float) -> None:
        """Draw the numbers ``zoom`` times their chosen size from the next ``set_block`` on."""
        if zoom != self.zoom:
            self.zoom = zoom
            self._font_px = -1  # lay every string out again at the new size

    @property
    def cells(self) -> list[tuple[int, int, str, bool]]:
        """(row, col, text, dark) of every number drawn; ``dark`` means black text."""
        return list(zip(self._rows.tolist(), self._cols.tolist(), self._texts, self._dark.tolist()))

    @property
    def font_px(self) -> int:
        return self._font_px

    def write(self, cells, visible, lut, levels) -> None:
        """Write the numbers of the cells in view when few enough are (``MAX_CELL_TEXTS``)
        and they are big enough to read; else none. ``visible``: (row0, row1, col0, col1,
        cell width px, cell height px) of the whole cells in view (``whole_cells``) or None;
        ``cells(r0, r1, c0, c1)`` gives their values as drawn (NaN where blocked);
        ``lut``/``levels`` the colours, for black or white text."""
        if visible is not None:
            r0, r1, c0, c1, cell_w, cell_h = visible
            if 0 < (r1 - r0) * (c1 - c0) <= MAX_CELL_TEXTS and cell_h >= 10 and cell_w >= 16:
                block = cells(r0, r1, c0, c1)
                # The most precise style, at the largest font (12 px down to 8 px) it fits.
                fonts = list(range(int(min(12, cell_h * 0.45)), 7, -1))
                chars = [int((cell_w - 2) / (px * 0.6)) for px in fonts]
                found = theme.cell_texts(block, chars, self._number_format) if fonts else None
                if found is not None:
                    texts, index = found
                    self.set_block(r0, c0, c1 - c0, texts, theme.text_is_dark(block, lut, levels), fonts[index])
                    return
        self.clear()

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
            self._font = theme.cell_font(font_px * self.zoom)
            self._metrics = QFontMetricsF(self._font)
            self._sizes.clear()
        if len(self._sizes) > 4096:  # a long session of edits: forget strings no longer shown
            self._sizes.clear()
        self._rows, self._cols, self._texts, self._dark = rows, cols, shown, dark
        self._centres = np.column_stack([cols + 0.5, rows + 0.5]).astype(float).reshape(-1, 2)
        # Everything a paint needs per cell, measured once: the text, its half size (to centre
        # it) and its colour group, so a repaint is a tight loop of draw calls.
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

    def _prepared(self, text: str) -> tuple[str, tuple[float, float]]:
        """The text and its half size (to centre it), measured once per string."""
        hit = self._sizes.get(text)
        if hit is None:
            metrics = self._metrics
            hit = self._sizes[text] = (text, (metrics.horizontalAdvance(text) / 2.0, metrics.height() / 2.0))
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
        ascent = round(self._metrics.ascent())  # drawText places the baseline
        for colour, group in self._groups:
            painter.setPen(colour)
            for k, text in group:
                painter.drawText(left[k], top[k] + ascent, text)
        painter.restore()


def whole_cells(visible, view_range):
    """``visible`` (a view's (row0, row1, col0, col1, cell width px, cell height px) of the
    cells in view, or None) less the cells cut by the view's edges ``view_range``
    (((x0, x1), (y0, y1)) in cells): a number written in a half-visible cell was clipped
    (the first column's, zoomed in)."""
    if visible is None:
        return None
    r0, r1, c0, c1, cell_w, cell_h = visible
    (x0, x1), (y0, y1) = view_range
    slack = 0.05  # of a cell: a view that ends a hair inside a cell still shows it whole
    c0, c1 = max(c0, math.ceil(x0 - slack)), min(c1, math.floor(x1 + slack))
    r0, r1 = max(r0, math.ceil(y0 - slack)), min(r1, math.floor(y1 + slack))
    return (r0, r1, c0, c1, cell_w, cell_h) if c1 > c0 and r1 > r0 else None


_BLACK = QColor("black")
_WHITE = QColor("white")
