"""The logit lens as a strip of the model view: beside each layer's row of thumbnails, the token
that layer's residual stream (at the predicted position) decodes to, its cell tinted by the
probability; with interventions, the intervened model's token, in orange where the interventions
changed it. ``ModelGrid`` places and paints it; this module says what each cell shows."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen

WIDTH = 62        # a column per band: "␣Mary" and "<U+00A0>" whole, longer tokens shrunk or elided (the tooltip has them)
MIN_CELL = 30     # with the strip, thumbnails may be this small: SmolLM2 keeps two bands in 1280 px
TINT, CHANGED = (70, 110, 190), QColor(200, 90, 10)


@dataclass(frozen=True)
class LensCell:
    token: str
    prob: float
    changed: bool      # the interventions changed this layer's top token
    tooltip: str


def lens_cells(result: dict | None) -> list[LensCell]:
    """One cell per layer from ``Behaviour.predict(lens=True)``'s result; none without a lens."""
    lens = (result or {}).get("logit_lens") or []
    cells = []
    for entry in lens:
        base, edited = entry["baseline"], entry["intervened"]
        if base is None:
            return []
        shown = edited if edited is not None else base
        changed = edited is not None and edited["top"]["id"] != base["top"]["id"]
        tip = (f"layer {entry['layer']}, logit lens at position {result['position']}: top token "
               f"{base['top']['token']!r} (p = {base['top']['prob']:.3f})")
        if edited is not None:
            tip += f"; with the interventions {edited['top']['token']!r} (p = {edited['top']['prob']:.3f})"
        if base.get("target_prob") is not None:
            tip += f"; the picked token p = {base['target_prob']:.4f}" + (
                "" if edited is None or edited.get("target_prob") is None else f" → {edited['target_prob']:.4f}")
        cells.append(LensCell(shown["top"]["token"], float(shown["top"]["prob"]), changed, tip))
    return cells


SMALLEST_PT = 6.5   # the strip's text shrinks no further: smaller is unreadable
PADDING = 2         # px of tint left and right of the text


def fitted_text(token: str, font: QFont, width: float) -> tuple[QFont, str]:
    """``token`` as it fits ``width`` px: at ``font``'s size if it fits, else a smaller size
    down to ``SMALLEST_PT``, else elided in the middle at that size. The middle, because a
    shown code point ("<U+00A0>") and a word both read best by their two ends; the whole
    token is in the cell's tooltip."""
    room = max(int(width) - 2 * PADDING, 1)
    size = font.pointSizeF()
    while True:
        trial = QFont(font)
        trial.setPointSizeF(size)
        metrics = QFontMetrics(trial)
        if metrics.horizontalAdvance(token) <= room:
            return trial, token
        if size <= SMALLEST_PT:
            return trial, metrics.elidedText(token, Qt.TextElideMode.ElideMiddle, room)
        size = max(size - 0.5, SMALLEST_PT)


def paint_cell(p: QPainter, rect: QRectF, cell: LensCell, text_colour: QColor) -> None:
    """The token on a tint as strong as its probability (white at 0, the unedited blue at 1)."""
    p.save()
    tint = QColor(*TINT, int(round(40 + 180 * min(max(cell.prob, 0.0), 1.0))))
    p.fillRect(rect, tint)
    p.setPen(QPen(CHANGED, 2) if cell.changed else QPen(QColor(160, 160, 160), 1))
    p.drawRect(rect.adjusted(0.5, 0.5, -0.5, -0.5))
    p.setPen(QColor(255, 255, 255) if cell.prob > 0.55 else (CHANGED if cell.changed else text_colour))
    font = QFont(p.font())
    font.setPointSizeF(font.pointSizeF() * 0.85)   # a size under the thumbnails' labels
    font, text = fitted_text(cell.token, font, rect.width())
    p.setFont(font)
    p.drawText(rect.adjusted(PADDING, 0, -PADDING, 0), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
    p.restore()
