"""ALiBi: the bias −slope_h · |i − j| each head adds to its scaled scores.

The large heatmap is the selected head's bias (queries down the side, keys along the
bottom): zero on the diagonal, more negative the further a key is from its query, so far
keys lose weight. The strip under it gives every head's slope (a steep head looks only
nearby, a shallow one far); click a head there to select it everywhere. One colour scale
for all heads, so the heads compare. The numbers are the result's ``position_bias``.
"""

from __future__ import annotations

import numpy as np

from ...core.reading.stage_views import alibi_window
from . import theme
from .common import FigurePanel, clamp_selection
from .matrix_view import MatrixView

# A long session's result does not hold the H × n × n bias: this many tokens around the
# selected query are drawn instead (the bias depends on |i − j| only, so any window shows it).
WINDOW = 256


def head_slopes(result) -> np.ndarray:
    """Each head's slope, from the session the result was computed from."""
    session = result.session
    return np.asarray(session.positions.slopes_for(session.heads), dtype=np.float64)


class AlibiPanel(FigurePanel):
    kind = "alibi"
    title = "ALiBi position bias −slope·|i − j|"
    short_title = "ALiBi"
    needs = frozenset({"position_bias"})
    # The slopes of every head and the distances between the tokens: no weight or embedding.
    draws_from = ("tokens", "positions", "heads", "source")
    minimum_size = (360, 300)

    def build(self) -> None:
        super().build()
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
        self._first = 0  # the first token of the window drawn (0 when the whole bias is)
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
        if result is None or not self.applies_to(result.session):
            self.view.clear_matrix()
            self.slopes.clear_matrix()
            return
        head, query, key = clamp_selection(self.document, result)
        slopes = head_slopes(result)
        bias = result.position_bias
        if bias is not None:
            self._first, matrix, shown = 0, bias[head], result.n
        else:
            self._first, matrix = alibi_window(slopes, result.n, head, query, WINDOW)
            shown = matrix.shape[0]
        # One scale for every head: the steepest head's furthest distance in view.
        bound = max(theme.symmetric_levels(np.array([float(slopes.max()) * (shown - 1)]))[1], 1e-12)
        rows = result.tokens[self._first:self._first + shown]
        self.view.set_matrix(matrix, row_labels=rows, col_labels=rows, levels=(-bound, bound))
        top = float(slopes.max()) if slopes.size and slopes.max() > 0 else 1.0
        self.slopes.set_matrix(slopes[None, :], row_labels=["slope"], col_labels=[f"h{h}" for h in range(len(slopes))],
                               levels=(0.0, top))
        slope = theme.format_value(float(slopes[head]))
        where = f" — head {head}, slope {slope}" if len(slopes) > 1 else f", slope {slope}"
        if shown < result.n:
            where += f" (tokens {self._first}–{self._first + shown - 1} of {result.n})"
        self.set_heading(self.title + where)
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None or self.view.data is None or not self.applies_to(result.session):
            return
        head, query, key = clamp_selection(self.document, result)
        if result.position_bias is None and not self._first <= query < self._first + self.view.matrix_shape[0]:
            self.redraw()  # the query left the window: move it
            return
        shown = self.view.matrix_shape[0]
        inside = key is not None and self._first <= key < self._first + shown
        self.view.set_selection(query - self._first, key - self._first if inside else None)
        self.slopes.set_selection(None, head)

    def _on_cell_clicked(self, row: int, col: int) -> None:
        self.document.selection.set(query=self._first + row, key=self._first + col)

    def _on_head_clicked(self, row: int, col: int) -> None:
        self.document.selection.set(head=col)
