"""Where the model view (``views.ModelGrid``) puts each thumbnail, label and lens cell.

A tall model is folded into side-by-side bands of layers (``models.views.grid_layout``
chooses the thumbnail size and the number of bands); ``ThumbnailPlaces`` is that choice laid
out: every thumbnail's rectangle, worked out once per layout (a step of a Run repaints all
270 of SmolLM2's, and working each place out anew took the GUI thread ~15 ms a paint), and
the way back from a point to the head under it.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize

from . import lens_strip


def grid_size(layers: int, heads: int, cell: int, bands: int, margins: tuple[int, int], lens_width: int,
              gap: int) -> QSize:
    """The room a grid of ``layers`` × ``heads`` thumbnails of ``cell`` px in ``bands`` bands takes."""
    left, top = margins
    rows = -(-layers // bands) if layers else 0
    step = cell + gap
    return QSize(bands * (left + heads * step + lens_width) + gap, top + rows * step + gap)


class ThumbnailPlaces:
    """The places of one layout: ``layers`` × ``heads`` thumbnails of ``cell`` px, ``gap`` px
    apart, folded into ``bands`` bands of ``rows`` layers each; ``margins`` (left, top) hold the
    layer and head labels; ``lens_width`` (0: none) is the logit-lens strip right of each band.
    ``key`` is all of that: a layout with another key is made anew."""

    def __init__(self, layers: int, heads: int, cell: int, bands: int, margins: tuple[int, int], lens_width: int,
                 gap: int):
        self.key = (layers, heads, cell, bands, margins, lens_width, gap)
        self.layers, self.heads, self.cell, self.bands, self.gap = layers, heads, cell, bands, gap
        self.left, self.top = margins
        self.rows = -(-layers // bands) if layers else 0
        self.band_width = self.left + heads * (cell + gap) + lens_width
        self.rects = [[self.place(layer, head) for head in range(heads)] for layer in range(layers)]

    def place(self, layer: int, head: int) -> QRectF:
        """Where thumbnail (layer, head) goes (also outside the grid: the next band's first, …)."""
        band, row = divmod(layer, self.rows) if self.rows else (0, layer)
        step = self.cell + self.gap
        return QRectF(band * self.band_width + self.left + head * step, self.top + row * step, self.cell, self.cell)

    def cell_rect(self, layer: int, head: int) -> QRectF:
        if 0 <= layer < self.layers and 0 <= head < self.heads:
            return QRectF(self.rects[layer][head])   # a copy: the caller may change it
        return self.place(layer, head)

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) under a point, or None between and around the thumbnails."""
        if not self.layers:
            return None
        band = int(x // self.band_width)
        bx = x - band * self.band_width
        step = self.cell + self.gap
        if bx < self.left or y < self.top or not 0 <= band < self.bands:
            return None
        col, row = int((bx - self.left) // step), int((y - self.top) // step)
        layer = band * self.rows + row
        if row >= self.rows or col >= self.heads or layer >= self.layers:
            return None
        if (bx - self.left) - col * step > self.cell or (y - self.top) - row * step > self.cell:
            return None
        return layer, col

    def lens_rect(self, layer: int) -> QRectF:
        """Where layer ``layer``'s lens token is drawn: right of its row of thumbnails."""
        r = self.cell_rect(layer, self.heads - 1)
        return QRectF(r.right() + self.gap, r.top(), lens_strip.WIDTH - self.gap, r.height())
