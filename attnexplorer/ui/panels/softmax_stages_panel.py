"""Soft-capping and attention sinks: what happens to the scores between the scale and the weights.

Top, with soft-capping (Gemma 2): the curve c·tanh(s / c) that every scaled score s goes
through, the line y = s it leaves behind, and the selected query's scores as points on the
curve (the selected key ringed): scores far beyond ±c all come out near ±c. Below, with
attention sinks (GPT-OSS): the share of each query's softmax that the selected head's sink
takes, one bar per query (the selected query outlined); the weights shown elsewhere are over
the real keys, so each row of them sums to 1 minus this. The numbers are the result's.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from . import theme
from .common import FigurePanel, clamp_selection, set_plot_title
from .query_panel import _BarChart

CURVE_POINTS = 201


class SoftmaxStagesPanel(FigurePanel):
    kind = "softmax_stages"
    title = "Soft-cap and sinks"
    short_title = "Cap and sinks"
    needs = frozenset({"scores", "sink_share"})
    minimum_size = (360, 300)

    def build(self) -> None:
        super().build()
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        self.curve_plot = pg.PlotItem(enableMenu=False)
        self.curve_plot.hideButtons()
        self.curve_plot.setMouseEnabled(x=False, y=False)
        self.curve_plot.setLabel("bottom", "scaled score s (before the cap)")
        self.curve_plot.setLabel("left", "c·tanh(s / c)")
        theme.light_grid(self.curve_plot, x=True, y=True)
        self.identity = pg.PlotDataItem(pen=pg.mkPen("#9a9a9a", width=1, style=pg.QtCore.Qt.PenStyle.DashLine))
        self.curve = pg.PlotDataItem(pen=pg.mkPen(theme.QUERY_COLOR, width=2))
        self.points = pg.ScatterPlotItem(size=7, brush=pg.mkBrush(theme.CATEGORY_COLORS[-1]), pen=None)
        self.selected_point = pg.ScatterPlotItem(size=13, brush=pg.mkBrush(0, 0, 0, 0),
                                                 pen=pg.mkPen(theme.SELECTION_COLOR, width=2.5))
        for item in (self.identity, self.curve, self.points, self.selected_point):
            self.curve_plot.addItem(item)
        self.figure.addItem(self.curve_plot, row=1, col=0)
        self.share_chart = _BarChart("sink's share per query", "sink share", y_range=(0.0, 1.0))
        self.figure.addItem(self.share_chart, row=2, col=0)
        self._shares: np.ndarray | None = None
        self._capped_points: tuple[np.ndarray, np.ndarray] | None = None

    def applies_to(self, session) -> bool:
        return session.softcap is not None or session.sinks is not None

    # -- reading (tests, export) -------------------------------------------------------------
    def shares(self) -> np.ndarray | None:
        """The sink shares drawn (one per query), or None when none are."""
        return self._shares

    def capped_points(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The selected query's (scaled score before the cap, after it) points drawn."""
        return self._capped_points

    # -- drawing ------------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        if result is None or not self.applies_to(result.session):
            self._clear()
            return
        session = result.session
        head, query, key = clamp_selection(self.document, result)
        where = "" if result.heads == 1 else f" — head {head}"
        self.set_heading(self.title + where)
        self._draw_curve(result, head, query, key)
        self._draw_shares(result, head, query)

    def redraw_selection(self) -> None:
        self.redraw()

    def _clear(self) -> None:
        for item in (self.identity, self.curve):
            item.setData([], [])
        self.points.setData([], [])
        self.selected_point.setData([], [])
        self._shares = self._capped_points = None

    def _draw_curve(self, result, head: int, query: int, key) -> None:
        cap = result.session.softcap
        self.curve_plot.setVisible(cap is not None)
        if cap is None:
            self._capped_points = None
            return
        raw = result.row("scores", head, query)
        if raw is None:
            self._capped_points = None
            return
        s = np.asarray(raw, dtype=np.float64) * float(result.scale_factor)
        visible = ~np.asarray(result.mask[query])
        capped = cap * np.tanh(s / cap)
        # The curve spans the row's scores and at least ±2c, where tanh has flattened.
        reach = max(2.0 * cap, float(np.abs(s[visible]).max()) if visible.any() else 0.0) * 1.05
        x = np.linspace(-reach, reach, CURVE_POINTS)
        self.curve.setData(x, cap * np.tanh(x / cap))
        # s = s up to the plot's top and bottom, no further: an SVG export does not clip to the
        # plot (QSvgGenerator writes no clip), and ±1.5c ran past the axes there.
        self.identity.setData([-cap * 1.15, cap * 1.15], [-cap * 1.15, cap * 1.15])
        self.points.setData(s[visible], capped[visible])
        if key is not None and 0 <= key < len(s) and visible[key]:
            self.selected_point.setData([s[key]], [capped[key]])
        else:
            self.selected_point.setData([], [])
        self.curve_plot.setXRange(-reach, reach, padding=0.02)
        self.curve_plot.setYRange(-cap * 1.15, cap * 1.15, padding=0)
        token = result.tokens[query]
        set_plot_title(self.curve_plot, f"s → c·tanh(s / c), c = {theme.format_value(cap, 4)}; dots: query {token!r}")
        self._capped_points = (s[visible], capped[visible])

    def _draw_shares(self, result, head: int, query: int) -> None:
        sinks = result.session.sinks
        self.share_chart.setVisible(sinks is not None)
        if sinks is None or result.sink_share is None:
            self._shares = None
            return
        shares = np.asarray(result.sink_share[head], dtype=np.float64)
        self.share_chart.set_bars(shares, result.tokens, color=theme.CATEGORY_COLORS[-1], selected=query)
        set_plot_title(self.share_chart, f"sink's share per query (sink logit {theme.format_value(float(sinks[head]), 4)})")
        self._shares = shares
