"""The logit-lens strip's cells: a token fits its cell whole where a smaller size allows, else
it is elided in the middle (the whole token is in the tooltip)."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication

from attnexplorer.ui.model import lens_strip
from attnexplorer.ui.model.views import ModelGrid

CELL = lens_strip.WIDTH - ModelGrid.GAP   # a strip cell's width (ModelGrid.lens_rect)


def _strip_font() -> QFont:
    font = QFont(QApplication.font())
    font.setPointSizeF(font.pointSizeF() * 0.85)   # as paint_cell starts
    return font


def _width(font: QFont, text: str) -> int:
    return QFontMetrics(font).horizontalAdvance(text)


def test_a_shown_code_point_fits_its_cell_whole(qtbot):
    # SmolLM2's layer 0 tops with a lone no-break space, shown "<U+00A0>": it was cut to "<U+00..."
    font, text = lens_strip.fitted_text("<U+00A0>", _strip_font(), CELL)
    assert text == "<U+00A0>"
    assert font.pointSizeF() >= lens_strip.SMALLEST_PT
    assert _width(font, text) <= CELL - 2 * lens_strip.PADDING


def test_a_short_token_keeps_its_size(qtbot):
    start = _strip_font()
    font, text = lens_strip.fitted_text(" Mary", start, CELL)
    assert text == " Mary" and font.pointSizeF() == start.pointSizeF()


def test_a_long_token_is_elided_in_the_middle_at_the_smallest_size(qtbot):
    token = " internationalisation"
    font, text = lens_strip.fitted_text(token, _strip_font(), CELL)
    assert font.pointSizeF() == lens_strip.SMALLEST_PT
    assert "…" in text and text != token
    head, tail = text.split("…")
    assert token.startswith(head) and token.endswith(tail) and head.strip() and tail
    assert _width(font, text) <= CELL - 2 * lens_strip.PADDING
