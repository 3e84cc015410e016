"""ALiBi: the bias −slope_h · |i − j| each head adds to its scaled scores.

The large heatmap is the selected head's bias (queries down the side, keys along the
bottom): zero on the diagonal, more negative the further a key is from its query, so far
keys lose weight. The strip under it gives every head's slope (a steep head looks only
nearby, a shallow one far); click a head there to select it everywhere. One colour scale
for all heads, so the heads compare. The numbers are the result's ``position_bias``.
"""

from __future__ import annotations

import numpy as np

from . import theme
from .common import FigurePanel, clamp_selection
from .matrix_view import MatrixView


def head_slopes(result) -> np.ndarray:
    """Each head's slope, from the session the result was computed from."""
    session = result.session
    return np.asarray(session.positions.slopes_for(session.heads), dtype=np.float64)


class AlibiPanel(FigurePanel):
    kind = "alibi"
    title = "ALiBi position bias −slope·|i − j|"
    short_title = "ALiBi"
    needs = frozenset({"position_bias"})
    minimum_size = (360, 300)

    def __init__(self, document, parent=None):
        super().__init__(document, parent)
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        self.view = MatrixView(None, row_name="query", col_name="key", on_click=self._on_cell_clicked,
                               on_hover=self.show_readout)
        self.figure.addItem(self.view, row=1, col=0)
        self.slopes = MatrixView("slope per head (click to select)", signed=False, row_name="", col_name="head",
                                 colorbar=False, on_click=self._on_head_clicked, on_hover=self.show_readout)
        self.slopes.setLabel("left", None)
        self.slopes.getAxis("left").setStyle(showValues=False)
        self.slopes.setLabel("bottom", None)
        self.figure.addItem(self.slopes, row=2, col=0)
        self.figure.layout.setRowStretchFactor(1, 5)
        self.figure.layout.setRowStretchFactor(2, 1)
        self.slopes.setMaximumHeight(90)

    def applies_to(self, session) -> bool:
        return session.positions is not None and session.positions.kind == "alibi"

    def views(self) -> list[MatrixView]:
        return [self.view, self.slopes]

    def selection_marks(self) -> list:
        return [self.view.row_frame, self.view.col_frame, self.slopes.col_frame]

    def redraw(self) -> None:
        result = self.document.result
        bias = None if result is None else result.position_bias
        if bias is None:
            self.view.clear_matrix()
            self.slopes.clear_matrix()
            return
        head, query, key = clamp_selection(self.document, result)
        bound = max(theme.symmetric_levels(bias)[1], 1e-12)
        self.view.set_matrix(bias[head], row_labels=result.tokens, col_labels=result.key_tokens, levels=(-bound, bound))
        slopes = head_slopes(result)
        top = float(slopes.max()) if slopes.size and slopes.max() > 0 else 1.0
        self.slopes.set_matrix(slopes[None, :], row_labels=["slope"], col_labels=[f"h{h}" for h in range(len(slopes))],
                               levels=(0.0, top))
        heads = bias.shape[0]
        where = f" — head {head}, slope {theme.format_value(float(slopes[head]))}"
        self.set_heading(self.title + (where if heads > 1 else f", slope {theme.format_value(float(slopes[head]))}"))
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None or result.position_bias is None:
            return
        head, query, key = clamp_selection(self.document, result)
        self.view.set_selection(query, key)
        self.slopes.set_selection(None, head)

    def _on_cell_clicked(self, row: int, col: int) -> None:
        self.document.set_selection(query=row, key=col)

    def _on_head_clicked(self, row: int, col: int) -> None:
        self.document.set_selection(head=col)
