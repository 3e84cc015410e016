"""The heatmap panels: Q/K/V, raw scores, scaled and masked scores, weights, outputs.

Each shows the selected head (``document.selection.current.head``). Clicking a cell selects its
query (row) and, in token × token matrices, its key (column) everywhere.
"""

from __future__ import annotations

import numpy as np

from ...core.compute.blocked_cells import MaskMatrix
from . import theme
from .base import when_built
from .common import FigurePanel, clamp_selection, feature_names, set_plot_title
from .heatmaps import heatmap_for
from .long_matrix import PartialMatrix, partial_draws
from .matrix_view import MatrixView


class _SingleMatrixPanel(FigurePanel):
    """A token × token matrix of the selected head (scores, scaled scores, weights).

    A long session's (core/compute/long) fills in while its streamed pass runs: the compute runner's
    ``overview_progress`` brings the pooled overview so far, drawn with the rows not yet
    reached greyed out, until the result replaces it.
    """

    signed = True
    field = "scores"
    masked = False
    needs = frozenset({"scores"})

    def __init__(self, document, parent=None):
        super().__init__(document, parent)
        self._partial = None  # the newest partial overview not yet drawn: (session, Pooled)
        # Listened to from the start, built or not (in the panels' order): a panel that is not
        # on screen draws no partial overview, and one on screen is built.
        compute = getattr(document, "compute", None)  # a fixed ResultSource (figures) computes nothing
        if compute is not None:
            compute.overview_progress.connect(self._on_overview_progress)

    def build(self) -> None:
        super().build()
        self.view = MatrixView(None, signed=self.signed, row_name="query", col_name="key",
                               on_click=self._on_cell_clicked, on_hover=self.show_readout)
        self.view.on_image_changed = self._update_heading
        self.figure.addItem(self.view, row=1, col=0)
        self.figure.layout.setRowStretchFactor(1, 1)
        self._heading_base = ""

    def views(self) -> list[MatrixView]:
        return [self.view]

    def heading_text(self, head: int, heads: int) -> str:
        return self.title if heads == 1 else f"{self.title} — head {head}"

    @when_built
    def set_pool(self, pool: str) -> None:
        """How a zoomed-out heatmap pools cells into pixels ("max" or "mean"); a long result
        pooled the other way is recomputed by the window (``menus.apply_overview_pool``)."""
        self.view.set_pool(pool)
        self._update_heading()

    def redraw(self) -> None:
        result = self.document.result
        head, query, key = (0, 0, None) if result is None else clamp_selection(self.document, result)
        # A long session's (core/compute/long) is read in exact tiles and drawn from a pooled overview.
        matrix = None if result is None else result.matrix(self.field, head)
        if matrix is None or getattr(matrix, "overview", True) is None:
            self.view.clear_matrix()
            return
        heads = result.heads
        blocked = result.mask if self.masked else None
        blocked_rows = result.blocked_rows if self.masked else None
        levels = None if self.signed else self.levels_for(matrix, blocked)
        self.view.set_matrix(matrix, row_labels=result.tokens, col_labels=result.key_tokens, levels=levels,
                             blocked=blocked, blocked_rows=blocked_rows)
        self._heading_base = self.heading_text(head, heads)  # after set_matrix: it may name the levels
        self._update_heading()
        self.view.set_selection(query, key)

    def _on_overview_progress(self, session, overviews) -> None:
        pooled = overviews.get(self.field)
        if pooled is None or not self._partial_wanted(session):
            return
        # Drawn at a turn of its own (``PartialDraws``), from the newest report by then.
        self._partial = (session, pooled)
        partial_draws().ask(self)

    def _partial_wanted(self, session) -> bool:
        result = self.document.result
        return (session is self.document.session and self._should_draw()
                and not (result is not None and result.session is session))

    def draw_partial(self) -> None:
        """Draw the newest partial overview reported (``_on_overview_progress``), unless its
        session was edited again or its result came meanwhile."""
        partial, self._partial = self._partial, None
        if partial is None or getattr(self, "_disposed", False) or not self._partial_wanted(partial[0]):
            return
        session, pooled = partial
        head = min(self.document.selection.current.head, session.heads - 1)
        dtype = pooled.data.dtype
        matrix = PartialMatrix(pooled, head, session.n_keys, dtype)
        blocked = MaskMatrix(session) if self.masked else None
        levels = None if self.signed else self.levels_for(matrix, blocked)
        keys = session.tokens if session.source is None else session.source.tokens
        self.view.set_matrix(matrix, row_labels=session.tokens, col_labels=keys, levels=levels, blocked=blocked)
        self._heading_base = self.title if session.heads == 1 else f"{self.title} — head {head}"
        self._update_heading()
        self._stale = True  # the result, when it comes, is drawn whatever this panel showed

    def dispose(self) -> None:
        partial_draws().forget(self)
        self._partial = None
        super().dispose()

    def _update_heading(self) -> None:
        heading = self._heading_base
        view = self.view
        pooled = view.pooled_by
        done = view.rows_done
        notes = []
        if done is not None:
            # Not the percentage: a heading of another width lays the figure out again, axes
            # and all (tens of ms at 16,384 tokens) on every step; the grey rows and the status
            # bar say how far.
            notes.append("computing")
        if pooled is not None:
            fy, fx = view.image_factor
            notes.append(f"{pooled}-pooled, {fy}×{fx} cells a pixel")
        if notes and heading.startswith(self.title):
            # The notes matter more than the long title's explanation: it gives way to them.
            heading = self.short_title + heading[len(self.title):]
        heading = " — ".join([heading] + notes)
        if heading:
            self.set_heading(heading)

    def levels_for(self, matrix, blocked) -> tuple[float, float]:
        """The colour range of an unsigned matrix: 0..1 (weights are probabilities)."""
        return (0.0, 1.0)

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None:
            return
        _, query, key = clamp_selection(self.document, result)
        self.view.set_selection(query, key)

    def _on_cell_clicked(self, row: int, col: int) -> None:
        # With a custom mask the masked panels are the mask's editor: a click blocks or frees
        # the cell (one undo step), as well as selecting it.
        if self.masked and self.document.session.mask.kind == "custom":
            from ..user_actions import toggle_blocked

            toggle_blocked(self.document, row, col)
        self.document.selection.set(query=row, key=col)


class ScoresPanel(_SingleMatrixPanel):
    """Raw scores QKᵀ (before scaling and masking), diverging colours centred at 0."""

    kind = "scores"
    title = "Raw scores QKᵀ"
    short_title = "Raw scores"
    field = "scores"
    needs = frozenset({"scores"})


class ScaledScoresPanel(_SingleMatrixPanel):
    """Scores × the scale factor, with blocked cells hatched (their unmasked value in the hover)."""

    kind = "scaled_scores"
    title = "Scaled and masked scores"
    short_title = "Scaled scores"
    field = "scaled_scores"
    needs = frozenset({"scaled_scores"})
    masked = True

    def heading_text(self, head: int, heads: int) -> str:
        session = self.document.result.session  # the one drawn, maybe an edit behind the document
        scale = session.scale.describe(session.d_k)
        if session.softcap is not None:  # Gemma 2: squashed into (−c, c) after the scale
            scale += f", soft-capped at ±{theme.format_value(session.softcap, 4)}"
        mask = session.mask.kind
        text = f"{self.title} ({scale}" + (f", {mask} mask)" if mask != "none" else ")")
        return text if heads == 1 else f"{text} — head {head}"


class WeightsPanel(_SingleMatrixPanel):
    """softmax of the scaled, masked scores: 0..1, each row sums to 1 (blocked cells hatched)."""

    kind = "weights"
    title = "Attention weights (softmax; each row sums to 1)"
    short_title = "Weights"
    field = "weights"
    needs = frozenset({"weights"})
    signed = False
    masked = True
    # "auto": colours from 0 to the largest weight shown (a nice bound above it), so a long
    # sentence whose weights are all small is not uniformly dark; the heading says so.
    color_range = "unit"

    @when_built
    def set_color_range(self, color_range: str) -> None:
        if color_range not in ("unit", "auto"):
            raise ValueError(f"unknown colour range {color_range!r}; use 'unit' or 'auto'")
        if color_range != self.color_range:
            self.color_range = color_range
            self.refresh()

    def levels_for(self, matrix, blocked) -> tuple[float, float]:
        if self.color_range == "unit":
            return (0.0, 1.0)
        top = heatmap_for(matrix, blocked, signed=False, pool="max").largest()
        return (0.0, min(1.0, theme.nice_bound(top)) if top > 0 else 1.0)

    def heading_text(self, head: int, heads: int) -> str:
        text = super().heading_text(head, heads)
        result = self.document.result
        if result is not None and result.session.sinks is not None:
            # The sink is one more key with no value: the keys shown get less than all of a row.
            text = text.replace("(softmax; each row sums to 1)",
                                "(softmax with a sink per head; each row sums to 1 − its sink's share)")
        if self.color_range == "auto" and self.view.levels[1] < 1.0:  # (up to 1: nothing to say)
            text += f" — colours 0 to {theme.format_value(self.view.levels[1], 3)} (auto)"
        return text


def projection_titles(session) -> tuple[str, str, str]:
    """How Q, K and V were made in ``session``: ``Q = RoPE(X·W_q + b_q)``, ``K = source·W_k``
    (the source's rows, in cross-attention) …, naming only the stages it uses."""
    rope = session.positions is not None and session.positions.kind == "rope"
    normed = session.qk_norm is not None
    keys_from = "X" if session.source is None else "source"

    def made(name, rows, weight, bias, rotated):
        text = f"{rows}·{weight}" + (f" + {bias}" if getattr(session, name) is not None else "")
        text = f"QK-norm({text})" if rotated and normed else text
        return f"RoPE({text})" if rotated and rope else text

    return (f"Q = {made('b_query', 'X', 'W_q', 'b_q', True)}", f"K = {made('b_key', keys_from, 'W_k', 'b_k', True)}",
            f"V = {made('b_value', keys_from, 'W_v', 'b_v', False)}")


class QKVPanel(FigurePanel):
    """Q, K and V of the selected head side by side, on one shared colour scale.

    Clicking a row of Q selects that query; a row of K or V selects that key.
    """

    kind = "qkv"
    title = "Queries Q, keys K, values V"
    short_title = "Q · K · V"
    needs = frozenset({"Q", "K", "V"})
    minimum_size = (420, 260)

    def build(self) -> None:
        super().build()
        self.q_view = MatrixView("Q = X·W_q", row_name="token", col_name="feature", colorbar=False,
                                 on_click=lambda r, c: self.document.selection.set(query=r), on_hover=self.show_readout)
        self.k_view = MatrixView("K = X·W_k", row_name="token", col_name="feature", colorbar=False,
                                 on_click=lambda r, c: self.document.selection.set(key=r), on_hover=self.show_readout)
        self.v_view = MatrixView("V = X·W_v", row_name="token", col_name="feature", colorbar=True,
                                 on_click=lambda r, c: self.document.selection.set(key=r), on_hover=self.show_readout)
        for col, view in enumerate((self.q_view, self.k_view, self.v_view)):
            self.figure.addItem(view, row=1, col=col)
            view.setLabel("bottom", None)
        for view in (self.k_view, self.v_view):
            # Same tokens in the same rows as Q: one set of row labels leaves room for the numbers.
            view.setLabel("left", None)
            view.getAxis("left").setStyle(showValues=False)
        self._keys_labelled = False
        self.figure.layout.setRowStretchFactor(1, 1)

    def views(self) -> list[MatrixView]:
        return [self.q_view, self.k_view, self.v_view]

    def redraw(self) -> None:
        result = self.document.result
        if result is None or result.Q is None or result.K is None or result.V is None:
            for view in self.views():
                view.clear_matrix()
            return
        head, query, key = clamp_selection(self.document, result)
        # With grouped-query attention this query head reads a shared K/V head: the heading
        # says which, and which other query heads read it too.
        group = head if result.kv_head_of is None else int(result.kv_head_of[head])
        self.set_heading(self.heading_text(result, head, group))
        q, k, v = result.Q[head], result.K[group], result.V[group]
        bound = max(theme.symmetric_levels(m)[1] for m in (q, k, v))
        levels = (-bound, bound)
        tokens = result.tokens
        for view, text in zip(self.views(), projection_titles(result.session)):
            set_plot_title(view, text)
        self.q_view.set_matrix(q, row_labels=tokens, col_labels=feature_names("q", q.shape[1]), levels=levels)
        keys = result.key_tokens
        cross = result.source_tokens is not None
        if cross != self._keys_labelled:
            # Cross-attention: K and V rows are the source's tokens, not Q's, so they get labels.
            self._keys_labelled = cross
            for view in (self.k_view, self.v_view):
                view.getAxis("left").setStyle(showValues=cross)
        self.k_view.set_matrix(k, row_labels=keys, col_labels=feature_names("k", k.shape[1]), levels=levels)
        self.v_view.set_matrix(v, row_labels=keys, col_labels=feature_names("v", v.shape[1]), levels=levels)
        self.redraw_selection()

    def heading_text(self, result, head: int, group: int) -> str:
        heads = result.Q.shape[0]
        if heads == 1:
            return self.title
        kv_heads = result.K.shape[0]
        if kv_heads == heads:
            return f"{self.title} — head {head}"
        sharing = ", ".join(str(h) for h in np.flatnonzero(np.asarray(result.kv_head_of) == group))
        return f"{self.title} — head {head} · K/V head {group} (read by heads {sharing})"

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None:
            return
        _, query, key = clamp_selection(self.document, result)
        self.q_view.set_selection(query, None)
        self.k_view.set_selection(key, None)
        self.v_view.set_selection(key, None)


# The width (px) an output heatmap needs beside the others for its labels and colour bar, and
# the room a column's label needs written upright at a readable size.
OUTPUT_VIEW_WIDTH = 230
LABEL_ROOM = 16


class OutputPanel(FigurePanel):
    """The selected head's output (weights · V), the heads concatenated, and concat · W_o.

    The concatenation is shown only with more than one head (with one head it equals the
    head's output), and the projected output only when the session has W_o.
    """

    kind = "output"
    title = "Outputs"
    short_title = "Outputs"
    needs = frozenset({"head_outputs", "concat", "output"})
    minimum_size = (380, 260)

    def build(self) -> None:
        super().build()
        click = lambda r, c: self.document.selection.set(query=r)  # noqa: E731 - three identical handlers
        self.head_view = MatrixView("weights·V", row_name="query", col_name="feature",
                                    on_click=click, on_hover=self.show_readout)
        self.concat_view = MatrixView("all heads, concatenated", row_name="query", col_name="feature",
                                      on_click=click, on_hover=self.show_readout)
        self.out_view = MatrixView("output = concat·W_o", row_name="query", col_name="feature",
                                   on_click=click, on_hover=self.show_readout)
        self._placed: tuple = ()
        self._columns = 0
        self.figure.layout.setRowStretchFactor(1, 1)

    def views(self) -> list[MatrixView]:
        return [v for v in (self.head_view, self.concat_view, self.out_view) if v in self._placed]

    def columns_for(self, count: int) -> int:
        """Heatmaps side by side at the panel's width: all of them where each gets
        ``OUTPUT_VIEW_WIDTH`` and the concatenation room for every column's label, else two a
        row and the concatenation under them (three at 1280 px cut the third off and shrank
        the subtitles and the concatenation's labels past reading)."""
        if count <= 2:
            return count
        concat = self.concat_view.col_axis.labels
        need = (count - 1) * OUTPUT_VIEW_WIDTH + max(OUTPUT_VIEW_WIDTH, 110 + LABEL_ROOM * len(concat))
        return count if self.canvas.width() >= need else 2

    def _arrange(self, wanted: tuple) -> None:
        """Put exactly the wanted views in the figure (only when the session's structure or
        the number that fit a row changes)."""
        columns = self.columns_for(len(wanted))
        if wanted == self._placed and columns == self._columns:
            return
        for view in self._placed:
            self.figure.removeItem(view)
        if columns == len(wanted):
            for col, view in enumerate(wanted):
                self.figure.addItem(view, row=1, col=col)
            # An empty second row that still stretches takes its share of the height: the
            # heatmaps above it drew at half the panel's height over a blank lower half.
            self.figure.layout.setRowStretchFactor(2, 0)
        else:  # the selected head's and the projected output above; the concatenation, the
            # widest (heads × d_v columns), gets the next row's whole width
            first = [v for v in wanted if v is not self.concat_view]
            for col, view in enumerate(first):
                self.figure.addItem(view, row=1, col=col)
            self.figure.addItem(self.concat_view, row=2, col=0, colspan=len(first))
            self.figure.layout.setRowStretchFactor(2, 1)
        self._placed, self._columns = wanted, columns
        self.cache_axes()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.is_built and self._placed and self.columns_for(len(self._placed)) != self._columns:
            self._arrange(self._placed)

    def redraw(self) -> None:
        result = self.document.result
        if result is None or result.head_outputs is None:
            self.head_view.clear_matrix()
            return
        head, query, _ = clamp_selection(self.document, result)
        heads = result.head_outputs.shape[0]
        has_w_out = result.output is not None and result.session.w_out is not None
        wanted = (self.head_view,)
        if heads > 1 and result.concat is not None:
            wanted += (self.concat_view,)
        if has_w_out:
            wanted += (self.out_view,)
        self._arrange(wanted)
        self.set_heading(self.title if heads == 1 else f"{self.title} — head {head}")
        tokens = result.tokens
        d_v = result.head_outputs.shape[2]
        self.head_view.set_matrix(result.head_outputs[head], row_labels=tokens, col_labels=feature_names("v", d_v))
        title = f"head {head}: weights·V" if heads > 1 else "weights·V"
        set_plot_title(self.head_view, title)
        if self.concat_view in wanted:
            names = [f"h{h}v{j}" for h in range(heads) for j in range(d_v)]
            self.concat_view.set_matrix(result.concat, row_labels=tokens, col_labels=names)
        if self.out_view in wanted:
            self.out_view.set_matrix(result.output, row_labels=tokens,
                                     col_labels=feature_names("o", result.output.shape[1]))
        self._arrange(wanted)  # again: the concatenation's width may have changed what fits a row
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None:
            return
        _, query, _ = clamp_selection(self.document, result)
        for view in self.views():
            view.set_selection(query, None)
