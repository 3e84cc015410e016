"""The selected query token up close: its score and weight rows, and its output as a sum.

Top left, the query's scaled scores against every key (blocked keys hatched: the score is
computed, the mask throws it away); top right, its weights (they sum to 1). Below, its
output (the selected head's, before W_o) split into each key's contribution weight × v:
one stacked bar per output dimension, positive parts stacked up and negative parts down,
with a black outline at the total. The keys with the largest weights get their own colour,
the same colour as their bar in the weights chart, named in the legend beside the bars; the
rest are grey and summed as "other keys". Hovering a stacked part names its key.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from . import theme
from .common import FigurePanel, clamp_selection, feature_names, query_row, set_plot_title
from .bars import Bars, StackedBars
from .key_legend import KeyLegend
from .token_axis import TokenAxis

# Keys drawn with their own colour in the contribution chart; the rest become "other keys".
MAX_CONTRIBUTORS = len(theme.CATEGORY_COLORS) - 1
# Output dimensions drawn in the contribution chart; beyond, the title says how many are left out.
MAX_OUTPUT_DIMS = 64
SUM_TITLE = "output = Σ weight × value"


def nice_y_range(values: np.ndarray) -> tuple[float, float]:
    """A y range that holds ``values`` and 0, with ends snapped to nice numbers.

    Snapped ends keep the axis (and its cached picture) still while small edits change the
    bars, instead of re-labelling it on every keystroke as auto-range did.
    """
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)] if values.size else values
    if finite.size == 0:
        return (0.0, 1.0)
    hi, lo = float(finite.max()), float(finite.min())
    top = theme.nice_bound(hi) if hi > 0 else 0.0
    bottom = -theme.nice_bound(-lo) if lo < 0 else 0.0
    return (bottom, top) if top > bottom else (0.0, 1.0)


# While the same row is redrawn after an edit (a slider dragged), the y range stays as it is
# as long as the bars fit in it and fill at least this share of it: relabelling the axis
# (new tick texts, a new cached picture) on every step of a drag was the largest part of a
# τ drag's frame, two to three axes a frame.
KEEP_SHARE = 0.5


def still_fits(wanted: tuple[float, float], current, padding: float = 0.03) -> bool:
    """Whether the range ``current`` (shown with ``padding``, a share of it, beyond each end)
    can stay for bars whose nice range is ``wanted``: the bars are in sight, and they fill at
    least ``KEEP_SHARE`` of it."""
    if current is None:
        return False
    low, high = current
    pad = padding * (high - low)
    return (low - pad <= wanted[0] and wanted[1] <= high + pad
            and (wanted[1] - wanted[0]) >= KEEP_SHARE * (high - low))


def set_nice_y_range(plot: pg.PlotItem, values: np.ndarray, current, steady: bool = False):
    """Give ``plot`` the nice range of ``values`` if it changed; returns the range now set.
    ``steady`` (the same bars redrawn after an edit): keep ``current`` while it ``still_fits``."""
    wanted = nice_y_range(values)
    if steady and still_fits(wanted, current):
        return current
    if wanted != current:
        plot.setYRange(*wanted, padding=0.03)
    return wanted


class _BarChart(pg.PlotItem):
    """Bars at cell centres (0.5, 1.5, …) labelled by token, like a MatrixView column axis."""

    def __init__(self, title: str, y_label: str, y_range: tuple[float, float] | None = None):
        self.token_axis = TokenAxis("bottom")
        super().__init__(axisItems={"bottom": self.token_axis}, enableMenu=False)  # no menu: never built
        self.setTitle(title, size="10pt")
        self.setLabel("left", y_label)
        self.hideButtons()
        self.setMouseEnabled(x=True, y=False)
        theme.light_grid(self, y=True)
        self.getAxis("left").enableAutoSIPrefix(False)
        # The axis keeps the widest width its labels needed: shrinking it as a drag changed
        # the labels laid the panel out again and painted it a second time.
        self.getAxis("left").setStyle(autoReduceTextSpace=False)
        # A few bar items with one brush each, not one brush per bar: at 4,096 keys a redraw
        # stays a handful of numpy calls. ``highlight`` colours a few chosen keys on top,
        # ``blocked`` draws masked keys hatched, ``marked`` outlines the selected key.
        self.bars = Bars(width=0.8, brush=theme.QUERY_COLOR, pen=None)
        self.blocked = Bars(width=0.8, brush=theme.HATCH_BRUSH, pen=pg.mkPen("#8c8c8c", width=1))
        self.highlight = Bars(width=0.8, pen=None)
        self.marked = Bars(width=0.9, brush=pg.mkBrush(0, 0, 0, 0), pen=pg.mkPen(theme.SELECTION_COLOR, width=2.5))
        for item in (self.bars, self.blocked, self.highlight, self.marked):
            self.addItem(item)
        self.zero = pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("k", width=1))
        self.addItem(self.zero, ignoreBounds=True)
        self._n = -1
        self._heights = np.zeros(0)
        # A fixed y range (weights: 0..1) is set once: re-enabling auto-range on every redraw
        # and setting the range back made the axis regenerate its text each time.
        self._fixed_y = y_range
        self._y_range: tuple[float, float] | None = None
        if y_range is not None:
            self.setYRange(*y_range, padding=0.02)
            self._y_range = y_range

    @property
    def heights(self) -> np.ndarray:
        """Every key's bar height as drawn (blocked keys included)."""
        return self._heights

    def set_bars(self, heights: np.ndarray, labels, *, color=None, blocked=None, highlight=(), selected=None,
                 steady: bool = False) -> None:
        """Draw ``heights`` (one per key). ``blocked`` (bool per key) are hatched;
        ``highlight`` is ``[(key, colour), …]`` drawn on top; ``selected`` is outlined.
        ``steady``: the same row as last time, after an edit (the y range then moves only
        when the bars leave it or shrink to under half of it: ``still_fits``)."""
        heights = np.asarray(heights, dtype=float)
        n = len(heights)
        x = np.arange(n) + 0.5
        self._heights = heights
        if blocked is None or not blocked.any():
            self.bars.setOpts(x=x, height=heights, brush=color or theme.QUERY_COLOR)
            self.blocked.setOpts(x=[], height=[])
        else:
            self.bars.setOpts(x=x[~blocked], height=heights[~blocked], brush=color or theme.QUERY_COLOR)
            self.blocked.setOpts(x=x[blocked], height=heights[blocked])
        keys = [k for k, _ in highlight]
        self.highlight.setOpts(x=x[keys] if keys else [], height=heights[keys] if keys else [],
                               brushes=[c for _, c in highlight])
        if selected is not None and 0 <= selected < n:
            self.marked.setOpts(x=[x[selected]], height=[heights[selected]])
        else:
            self.marked.setOpts(x=[], height=[])
        self.token_axis.set_labels(labels)
        self.token_axis.set_marked(selected)
        if n != self._n:
            self._n = n
            self.vb.setLimits(xMin=0, xMax=max(n, 1))
            self.setXRange(0, max(n, 1), padding=0)
        if self._fixed_y is None:
            self._y_range = set_nice_y_range(self, heights, self._y_range, steady)
        else:
            self._y_range = self._fixed_or_zoomed(heights, steady)

    def _fixed_or_zoomed(self, heights: np.ndarray, steady: bool = False) -> tuple[float, float]:
        """The fixed range (weights: 0 to 1, so rows compare at a glance), unless every bar
        is under a tenth of its top: a row over thousands of keys would be flat there, so the
        axis then goes up to a nice bound over its largest bar (the tick labels say how far)."""
        low, high = self._fixed_y
        finite = heights[np.isfinite(heights)]
        top = float(finite.max()) if finite.size else high
        wanted = (low, theme.nice_bound(top)) if 0 < top < low + 0.1 * (high - low) else (low, high)
        if steady and wanted != (low, high) and self._y_range != (low, high) and still_fits(wanted, self._y_range, 0.02):
            return self._y_range
        if wanted != self._y_range:
            self.setYRange(*wanted, padding=0.02)
        return wanted

    def key_at(self, scene_pos) -> int | None:
        if not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = self.vb.mapSceneToView(scene_pos).x()
        k = int(np.floor(x))
        return k if 0 <= k < self._n else None


class QueryPanel(FigurePanel):
    """Bar charts for the selected query (``document.selection.current.query``) of the selected head."""

    kind = "query"
    title = "Selected query"
    short_title = "Query"
    needs = frozenset({"scaled_scores", "weights", "V", "head_outputs", "sink_share"})
    minimum_size = (400, 300)

    def build(self) -> None:
        super().build()
        self.score_chart = _BarChart("scaled scores", "score")
        self.weight_chart = _BarChart("weights (sum to 1)", "weight", y_range=(0.0, 1.0))
        self.figure.addItem(self.score_chart, row=1, col=0)
        self.figure.addItem(self.weight_chart, row=1, col=1)
        self.sum_chart = pg.PlotItem(axisItems={"bottom": TokenAxis("bottom")}, enableMenu=False)
        self.sum_chart.setTitle(SUM_TITLE, size="10pt")
        self.sum_chart.setLabel("left", "contribution")
        self.sum_chart.hideButtons()
        theme.light_grid(self.sum_chart, y=True)
        self.sum_chart.getAxis("left").enableAutoSIPrefix(False)
        self.sum_chart.getAxis("left").setStyle(autoReduceTextSpace=False)
        self.sum_chart.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("k", width=1)), ignoreBounds=True)
        # The stacked bars and their legend share the second row's width; the legend paints
        # itself (key_legend.py) and asks for no height, so the charts above keep theirs.
        self.lower = self.figure.addLayout(row=2, col=0, colspan=2)
        self.lower.setContentsMargins(0, 0, 0, 0)
        self.lower.addItem(self.sum_chart, row=0, col=0)
        # Every key's part in one item, reused on every redraw: a layer per coloured key.
        self.parts = StackedBars(width=0.7)
        self.sum_chart.addItem(self.parts)
        self.totals = Bars(width=0.8, brush=pg.mkBrush(0, 0, 0, 0), pen=pg.mkPen("k", width=1.5))
        self._sum_y_range = None
        self._drawn_row = None  # (head, query, keys, d_v) of the row drawn last
        self._sum_dims = self._sum_full_dims = -1
        self.sum_chart.addItem(self.totals)
        self._groups: list[tuple[str, np.ndarray]] = []
        # Which colour is which key, beside the stacked bars.
        self.legend = KeyLegend()
        self.lower.addItem(self.legend, row=0, col=1)
        self.figure.layout.setRowStretchFactor(1, 1)
        self.figure.layout.setRowStretchFactor(2, 1)
        self.figure.layout.setColumnStretchFactor(0, 1)
        self.figure.layout.setColumnStretchFactor(1, 1)
        self._contributions: dict = {}
        self.canvas.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.canvas.scene().sigMouseMoved.connect(self._on_scene_moved)

    def selection_marks(self) -> list:
        return [self.score_chart.marked, self.weight_chart.marked]

    # -- reading (tests, export) -------------------------------------------------------------
    def score_heights(self) -> np.ndarray:
        return self.score_chart.heights

    def weight_heights(self) -> np.ndarray:
        return self.weight_chart.heights

    def contributions(self) -> dict:
        """{legend name: contribution per output dimension} as drawn, plus "total" (the first
        ``MAX_OUTPUT_DIMS`` dimensions)."""
        return dict(self._contributions)

    # -- drawing ------------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        if result is None:
            return
        head, query, key = clamp_selection(self.document, result)
        row = query_row(result, head, query)
        if row is None:
            return
        scores, weights = row
        tokens = result.tokens
        token = tokens[query]
        where = "" if result.heads == 1 else f", head {head}"
        blocked_row = bool(result.blocked_rows[query])
        note = " — blocked: this query sees no key" if blocked_row else ""
        self.set_heading(f"Query {token!r} (#{query}){where}{note}")
        blocked = result.mask[query]
        colors = self._key_colors(weights)
        keys = result.key_tokens  # the source's tokens in cross-attention
        # The same row as last drawn (an edit, a slider's step): its axes stay still while the
        # bars fit them; another row (a click) gets ranges fitted to its own bars.
        row_id = (head, query, len(scores), result.V is None or result.V.shape[2])
        steady, self._drawn_row = row_id == self._drawn_row, row_id
        self.score_chart.set_bars(scores, keys, color=theme.QUERY_COLOR, blocked=blocked, selected=key, steady=steady)
        self.weight_chart.set_bars(weights, keys, color=theme.CATEGORY_COLORS[-1],
                                   highlight=list(colors.items()), selected=key, steady=steady)
        set_plot_title(self.weight_chart, self._weights_title(result, head, query, weights))
        self._draw_sum(result, head, query, weights, steady)

    def redraw_selection(self) -> None:
        self.redraw()

    @staticmethod
    def _weights_title(result, head: int, query: int, weights) -> str:
        """"weights (sum to 1)", or with attention sinks what this row sums to and the share
        its head's sink takes (the sink is a key with no value, so it is not a bar)."""
        if result.session.sinks is None:
            return "weights (sum to 1)"
        share = None if result.sink_share is None else float(result.sink_share[head, query])
        if share is None:
            share = 1.0 - float(np.sum(weights))
        shown = theme.format_value(1.0 - share, 3)
        return f"weights (sum {shown}; sink {theme.format_value(share, 3)})"

    @staticmethod
    def _contributors(weights: np.ndarray) -> tuple[list[int], np.ndarray]:
        """Keys with their own colour (largest weights first) and the rest with weight > 0
        (an array: at 16,384 keys a list of them cost the GUI thread milliseconds a redraw)."""
        weights = np.asarray(weights, dtype=np.float64)
        order = np.argsort(-weights, kind="stable")
        order = order[weights[order] > 0]
        return [int(k) for k in order[:MAX_CONTRIBUTORS]], order[MAX_CONTRIBUTORS:]

    def _key_colors(self, weights: np.ndarray) -> dict:
        shown, _ = self._contributors(weights)
        return {k: theme.CATEGORY_COLORS[i] for i, k in enumerate(shown)}

    def _draw_sum(self, result, head: int, query: int, weights: np.ndarray, steady: bool = False) -> None:
        if result.V is None or result.head_outputs is None:
            self.parts.clear()
            self.totals.setOpts(x=[], height=[], y0=[])
            self.legend.set_entries([])
            return
        weights = np.asarray(weights, dtype=np.float64)
        full_d_v = result.V.shape[2]
        d_v = min(full_d_v, MAX_OUTPUT_DIMS)  # more bars than this would be slivers
        group = head if result.kv_head_of is None else int(result.kv_head_of[head])  # grouped-query
        values = np.asarray(result.V[group, :, :d_v])
        total = np.asarray(result.head_outputs[head, query, :d_v], dtype=np.float64)
        shown, rest = self._contributors(weights)
        groups = [(f"{result.key_tokens[k]!r} (#{k}) w={theme.format_value(weights[k], 3)}",
                   weights[k] * np.asarray(values[k], dtype=np.float64)) for k in shown]
        if len(rest):
            # One product over the keys, in the values' own dtype: gathering the rest's rows as
            # float64 copied 8 MB per redraw at 16,384 keys (most of the GUI thread's block when
            # a long result arrived).
            others = np.zeros(len(weights), dtype=values.dtype)
            others[rest] = weights[rest]
            groups.append((f"other keys ({len(rest)})", np.asarray(others @ values, dtype=np.float64)))
        x = np.arange(d_v) + 0.5
        colors = [theme.CATEGORY_COLORS[k if k < len(shown) else -1] for k in range(len(groups))]
        self.parts.set_stack(x, np.array([contribution for _, contribution in groups]).reshape(len(groups), d_v), colors)
        up, down = self.parts.tops, self.parts.bottoms
        self._contributions = dict(groups)
        self._contributions["total"] = total
        # The total as a thin black outline bar from 0 to the output value.
        self.totals.setOpts(x=x, height=total, y0=np.zeros(d_v), width=0.85)
        if d_v != self._sum_dims or full_d_v != self._sum_full_dims:
            self._sum_dims, self._sum_full_dims = d_v, full_d_v
            note = "" if d_v == full_d_v else f" — first {d_v} of {full_d_v} dimensions"
            self.sum_chart.setTitle(SUM_TITLE + note, size="10pt")
            self.sum_chart.getAxis("bottom").set_labels(feature_names("v", d_v))
            self.sum_chart.vb.setLimits(xMin=0, xMax=max(d_v, 1))
            self.sum_chart.setXRange(0, max(d_v, 1), padding=0)
        self._sum_y_range = set_nice_y_range(self.sum_chart, np.concatenate([up, down, total]), self._sum_y_range, steady)
        self._groups = groups
        # Key labels: the source's tokens in cross-attention, which may outnumber the queries.
        self.legend.set_entries([(repr(result.key_tokens[k]), theme.CATEGORY_COLORS[i]) for i, k in enumerate(shown)]
                                + ([(f"other keys ({len(rest)})", theme.CATEGORY_COLORS[-1])] if len(rest) else []))

    # -- mouse ------------------------------------------------------------------------------
    def _on_scene_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        for chart in (self.score_chart, self.weight_chart):
            key = chart.key_at(event.scenePos())
            if key is not None:
                self.document.selection.set(key=key)
                return

    def _on_scene_moved(self, scene_pos) -> None:
        result = self.document.result
        if result is None:
            return
        head, query, _ = clamp_selection(self.document, result)
        row = query_row(result, head, query)
        for chart, name, data in ((self.score_chart, "scaled score", None if row is None else row[0]),
                                  (self.weight_chart, "weight", None if row is None else row[1])):
            key = chart.key_at(scene_pos)
            if key is not None and data is not None:
                value = theme.format_value(float(data[key]), 5)
                blocked = " (blocked by the mask)" if result.mask[query, key] else ""
                self.show_readout(f"query {result.tokens[query]!r} → key {result.key_tokens[key]!r} (#{key}): "
                                  f"{name} {value}{blocked}")
                return
        if self.sum_chart.vb.sceneBoundingRect().contains(scene_pos) and self._groups:
            point = self.sum_chart.vb.mapSceneToView(scene_pos)
            dim = int(np.floor(point.x()))
            total = self._contributions.get("total")
            if total is not None and 0 <= dim < len(total):
                parts = ", ".join(f"{name}: {theme.format_value(float(c[dim]), 3)}" for name, c in self._groups[:4])
                more = " …" if len(self._groups) > 4 else ""
                self.show_readout(f"v{dim} = {theme.format_value(float(total[dim]), 4)} = {parts}{more}")
                return
        self.show_readout("")
