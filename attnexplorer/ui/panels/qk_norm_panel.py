"""QK-norm: the selected query's q and the selected key's k before and after it.

Each chart has one pair of bars per dimension: grey, the projection X·W (+ b) as it came;
coloured, after QK-norm (RMSNorm or LayerNorm of each head's numbers, or of the token's whole
projection, times the weight), which is what RoPE then turns and the scores are made from.
The title gives the norm's scale for that vector. A long vector in, a vector of
root-mean-square 1 (times the weight) out: QK-norm bounds how large a score can grow. The
numbers are the result's (``Q_unnormed``/``K_unnormed`` and Q/K before RoPE).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from ...core.inputs.stages import norm_statistics
from . import theme
from .bars import Bars
from .common import FigurePanel, clamp_selection, feature_names, set_plot_title
from .query_panel import set_nice_y_range
from .token_axis import TokenAxis

BEFORE_COLOR = "#c4c4c4"


class _PairChart(pg.PlotItem):
    """Bars before (light, left) and after (dark, right) QK-norm, per dimension."""

    def __init__(self, color):
        self.axis = TokenAxis("bottom")
        super().__init__(axisItems={"bottom": self.axis}, enableMenu=False)
        self.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        theme.light_grid(self, y=True)
        self.getAxis("left").enableAutoSIPrefix(False)
        self.before = Bars(width=0.38, brush=BEFORE_COLOR, pen=None)
        self.after = Bars(width=0.38, brush=color, pen=None)
        for item in (self.before, self.after):
            self.addItem(item)
        self.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("k", width=1)), ignoreBounds=True)
        self._y_range = None
        self.heights: tuple[np.ndarray, np.ndarray] | None = None

    def set_pair(self, before: np.ndarray, after: np.ndarray, labels, title: str) -> None:
        x = np.arange(len(before)) + 0.5
        self.before.setOpts(x=x - 0.2, height=before)
        self.after.setOpts(x=x + 0.2, height=after)
        self.axis.set_labels(labels)
        self.setXRange(0, max(len(before), 1), padding=0)
        self._y_range = set_nice_y_range(self, np.concatenate([before, after]), self._y_range)
        set_plot_title(self, title)
        self.heights = (before, after)

    def clear_pair(self) -> None:
        self.before.setOpts(x=[], height=[])
        self.after.setOpts(x=[], height=[])
        self.heights = None


class QKNormPanel(FigurePanel):
    kind = "qk_norm"
    title = "QK-norm"
    short_title = "QK-norm"
    needs = frozenset({"Q", "K", "Q_unnormed", "K_unnormed", "Q_unrotated", "K_unrotated"})
    minimum_size = (360, 300)

    def build(self) -> None:
        super().build()
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        self.query_chart = _PairChart(theme.QUERY_COLOR)
        self.key_chart = _PairChart(theme.CATEGORY_COLORS[0])
        self.figure.addItem(self.query_chart, row=1, col=0)
        self.figure.addItem(self.key_chart, row=2, col=0)

    def applies_to(self, session) -> bool:
        return session.qk_norm is not None

    def redraw(self) -> None:
        result = self.document.result
        if result is None or not self.applies_to(result.session) or result.Q_unnormed is None:
            self.query_chart.clear_pair()
            self.key_chart.clear_pair()
            return
        session = result.session
        head, query, key = clamp_selection(self.document, result)
        key = query if key is None or session.source is not None and key >= session.n_keys else key
        g = head if result.kv_head_of is None else int(result.kv_head_of[head])
        rope = session.positions is not None and session.positions.kind == "rope"
        after_q = result.Q_unrotated if rope else result.Q
        after_k = result.K_unrotated if rope else result.K
        qk = session.qk_norm
        kind = "RMSNorm" if qk.kind == "rms" else "LayerNorm"
        where = "each head" if qk.over == "head" else "the whole projection"
        heads = "" if result.heads == 1 else f" — head {head}"
        self.set_heading(f"{self.title}: {kind} over {where}, before RoPE{heads}")
        for chart, before_all, after_all, h, row, letter, token in (
                (self.query_chart, result.Q_unnormed, after_q, head, query, "q", result.tokens[query]),
                (self.key_chart, result.K_unnormed, after_k, g, key, "k", result.key_tokens[key])):
            before = np.asarray(before_all[h, row], dtype=np.float64)
            after = np.asarray(after_all[h, row], dtype=np.float64)
            stats = before if qk.over == "head" else np.asarray(before_all[:, row], dtype=np.float64).reshape(-1)
            _, scale = norm_statistics(qk.kind, stats[None, :], qk.eps)
            title = (f"{letter}({token!r}) before (grey) and after: × {theme.format_value(float(scale[0]), 4)}"
                     " × weight")
            chart.set_pair(before, after, feature_names(letter, len(before)), title)

    def redraw_selection(self) -> None:
        self.redraw()
