"""Explanations of one attention cell or one output row, in numbers a person can follow.

``explain_cell`` retraces how a single weight came about (q·k, the scale, the mask, the
softmax); ``explain_output`` writes a query's output as a weighted sum of value vectors.
Both read an ``AttentionResult`` and never recompute attention with torch: the numbers they
show are the engine's, and the arithmetic in between is redone in float64 only to show the
steps. Both return frozen dataclasses with the numbers and a ``.text`` for the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compute.engine import AttentionResult
from ..errors import AttnExplorerError
from .explain_stages import stage_lines
from ..numbers.number_text import fmt, fmt_vector

# Longer sums are cut so that a line stays readable; the numbers are all in the dataclass.
MAX_TERMS_SHOWN = 8


def _factor(x: float) -> str:
    """A factor inside a product: negatives in parentheses so "a×(-b)" reads unambiguously."""
    s = fmt(x)
    return f"({s})" if s.startswith("-") else s


def _need(result: AttentionResult, *names: str) -> None:
    missing = [n for n in names if getattr(result, n) is None]
    if missing:
        raise AttnExplorerError(f"this result was computed without {', '.join(missing)}; recompute with them kept to explain it")


def query_row(result: AttentionResult, h: int, i: int):
    """Raw scores, scaled scores and weights of query ``i`` (float64 rows of length n_k), as
    the result gives them (``AttentionResult.row``: the rows of its matrices, of a long
    result's exact rows, or made from Q and K by the engine's own kernel when the result does
    not keep the matrices)."""
    return tuple(np.asarray(result.row(name, h, i), dtype=np.float64)
                 for name in ("scores", "scaled_scores", "weights"))


def _alibi_row(result: AttentionResult, h: int, i: int) -> np.ndarray | None:
    """ALiBi's bias row −slope_h·|i − j| of query i, or None without ALiBi."""
    row = result.row("position_bias", h, i)
    return None if row is None else np.asarray(row, dtype=np.float64)


def _kv(result: AttentionResult, h: int) -> int:
    """The K/V head query head ``h`` reads (itself unless grouped-query attention)."""
    return h if result.kv_head_of is None else int(result.kv_head_of[h])


def _index(value, count: int, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < count:
        raise AttnExplorerError(f"{what} {value!r} is outside 0..{count - 1}")
    return int(value)


@dataclass(frozen=True, eq=False)
class CellExplanation:
    """How weight[head, query, key] came about.

    ``exp_shifted`` is exp(scaled score − ``row_max``), where ``row_max`` is the largest
    unblocked scaled score of the row; ``denominator`` is the row's sum of those. Shifting
    by the row maximum is what a stable softmax does and leaves every weight the same, so
    ``weight == exp_shifted / denominator`` (0 for a blocked cell or a fully blocked row).

    With attention sinks, ``row_max`` is the larger of that score and the head's sink logit,
    ``denominator`` includes exp(sink − row_max), and ``sink_share`` is the sink's part of
    the row (None without sinks): the row's weights over the keys sum to 1 − sink_share.
    """

    head: int
    query: int
    key: int
    query_token: str
    key_token: str
    q: np.ndarray
    k: np.ndarray
    products: np.ndarray
    score: float
    scale_factor: float
    scale_text: str
    scaled_score: float
    masked: bool
    row_blocked: bool
    row_max: float
    exp_shifted: float
    denominator: float
    weight: float
    lines: tuple[str, ...]
    sink_share: float | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _sum_text(a: np.ndarray, b: np.ndarray) -> str:
    terms = [f"{_factor(x)}×{_factor(y)}" for x, y in zip(a[:MAX_TERMS_SHOWN], b[:MAX_TERMS_SHOWN])]
    if len(a) > MAX_TERMS_SHOWN:
        terms.append(f"… ({len(a) - MAX_TERMS_SHOWN} more terms)")
    return " + ".join(terms)


def explain_cell(result: AttentionResult, head: int, query: int, key: int) -> CellExplanation:
    """Explain weight[head, query, key] of ``result``; the mask and scale named are those of
    the session the result was computed from (``result.session``).

    Raises AttnExplorerError for an index out of range, or a result computed without Q and K. The score, scaled-score and weight rows are read from
    the result when it carries them and worked out from Q and K when it does not.
    """
    session = result.session
    _need(result, "Q", "K")
    h = _index(head, result.heads, "head")
    i = _index(query, result.n, "query")
    j = _index(key, len(result.key_tokens), "key")
    qt, kt = result.tokens[i], result.key_tokens[j]
    g = _kv(result, h)
    q = np.array(result.Q[h, i], dtype=np.float64)
    k = np.array(result.K[g, j], dtype=np.float64)
    products = q * k
    scores_row, row, weights_row = query_row(result, h, i)
    score = float(scores_row[j])
    scaled = float(row[j])
    factor = float(result.scale_factor)
    scale_text = session.scale.describe(session.d_k)
    masked = bool(result.mask[i, j])
    row_blocked = bool(result.blocked_rows[i])
    free = ~np.asarray(result.mask[i])
    sink = None if session.sinks is None else float(session.sinks[h])
    sink_term = 0.0
    if row_blocked:
        row_max, exps, denominator = 0.0, np.zeros_like(row), 0.0
    else:
        row_max = float(row[free].max()) if sink is None else max(float(row[free].max()), sink)
        # exp of the free keys only: a blocked key may score far above them (τ = 0.0001)
        # and its exp would overflow, although its weight is 0 anyway.
        exps = np.zeros_like(row)
        exps[free] = np.exp(row[free] - row_max)
        sink_term = 0.0 if sink is None else float(np.exp(sink - row_max))
        denominator = float(exps.sum()) + sink_term
    exp_shifted = float(exps[j])
    weight = float(weights_row[j])
    sink_share = None
    if sink is not None:
        sink_share = 1.0 if row_blocked else float(result.sink_share[h, i]) if result.sink_share is not None \
            else sink_term / denominator

    # The summary line (inserted first, below) already writes out q·k term by term.
    lines = stage_lines(session, result, h, i, j)
    lines.append(f"score = q({qt})·k({kt}), the sum of the {len(q)} products above = {fmt(score)}")
    bias_row = _alibi_row(result, h, i)
    bias = None if bias_row is None else float(bias_row[j])
    cap = session.softcap
    if cap is not None:
        # Soft-capping comes between the scale and the bias (Gemma 2: s → c·tanh(s / c)).
        raw = score * factor
        capped = cap * np.tanh(raw / cap)
        after = "" if bias is None else f"; + ALiBi ({fmt(bias)})"
        lines.append(f"scaled score = {fmt(score)} × {fmt(factor)} = {fmt(raw)}, soft-capped at {fmt(cap)}: "
                     f"{fmt(cap)}·tanh({fmt(raw)} / {fmt(cap)}) = {fmt(capped)}{after} → {fmt(scaled)}"
                     f"  (every scaled score stays between −{fmt(cap)} and {fmt(cap)})")
    elif bias is not None:
        # The slope from the session (on the diagonal the bias is 0 and does not tell it).
        slope = float(session.positions.slopes_for(session.heads)[h])
        what = f"ALiBi −{fmt(slope)}×|{i}−{j}|"
        lines.append(f"scaled score = {fmt(score)} × {fmt(factor)} + {what} = {fmt(score * factor)} + ({fmt(bias)})"
                     f" = {fmt(scaled)}")
    elif session.scale.kind == "none":
        lines.append(f"scaled score = {fmt(scaled)} (no scaling)")
    else:
        lines.append(f"scaled score = {fmt(score)} {scale_text} = {fmt(score)} × {fmt(factor)} = {fmt(scaled)}")
    if row_blocked:
        lines.append(f"every key is blocked for {qt!r} (mask: {session.mask.kind}): it attends to nothing, so weight = 0")
    elif masked:
        lines.append(f"{kt!r} is blocked for {qt!r} by the {session.mask.kind} mask: exp = 0, so weight = 0")
    else:
        largest = "the row's largest score" if sink is None else "the larger of the row's largest score and the sink"
        lines.append(
            f"exp(scaled − row max) = exp({fmt(scaled)} − {fmt(row_max)}) = {fmt(exp_shifted)}"
            f"  (shifting by {largest}, as a stable softmax does, leaves the weights unchanged)"
        )
        if sink is None:
            lines.append(f"row sum of exp(scaled − row max) over the {int(free.sum())} visible keys = {fmt(denominator)}")
        else:
            lines.append(f"row sum over the {int(free.sum())} visible keys {fmt(denominator - sink_term)} + the sink's "
                         f"exp({fmt(sink)} − {fmt(row_max)}) = {fmt(sink_term)}: {fmt(denominator)}  (head {h}'s sink "
                         f"logit joins every row's softmax as a key with no value)")
        lines.append(f"weight = {fmt(exp_shifted)} / {fmt(denominator)} = {fmt(weight)}")
    if sink_share is not None:
        lines.append(f"the sink takes {fmt(sink_share)} of the row of {qt!r}: its weights over the keys sum to "
                     f"1 − {fmt(sink_share)} = {fmt(1.0 - sink_share)}, not 1")
    summary = f"score({qt}, {kt}) = {_sum_text(q, k)} = {fmt(score)}"
    if cap is not None:
        summary += f"; × {fmt(factor)}, soft-capped at {fmt(cap)}" + ("" if bias is None else " + ALiBi") + f" = {fmt(scaled)}"
    elif bias is not None:
        summary += f"; × {fmt(factor)} + ALiBi ({fmt(bias)}) = {fmt(scaled)}"
    elif session.scale.kind != "none":
        summary += f"; {scale_text} = {fmt(scaled)}"
    summary += f"; weight = {fmt(weight)}" + (" (blocked)" if masked else "")
    lines.insert(0, summary)
    return CellExplanation(
        head=h, query=i, key=j, query_token=qt, key_token=kt, q=q, k=k, products=products, score=score,
        scale_factor=factor, scale_text=scale_text, scaled_score=scaled, masked=masked, row_blocked=row_blocked,
        row_max=row_max, exp_shifted=exp_shifted, denominator=denominator, weight=weight, lines=tuple(lines),
        sink_share=sink_share,
    )


@dataclass(frozen=True, eq=False)
class OutputTerm:
    """One key's share of a query's output: ``contribution = weight × value``."""

    key: int
    token: str
    weight: float
    value: np.ndarray
    contribution: np.ndarray


@dataclass(frozen=True, eq=False)
class OutputExplanation:
    """head_outputs[head, query] as a weighted sum of value vectors.

    ``terms`` are the visible keys sorted by weight, largest first (ties by position),
    cut to ``top`` when asked; ``omitted`` keys with ``omitted_weight`` in total were cut.
    ``output`` is the engine's head output (before W_o). For a fully blocked query
    ``blocked`` is True, ``terms`` is empty and ``output`` is 0.
    """

    head: int
    query: int
    query_token: str
    terms: tuple[OutputTerm, ...]
    omitted: int
    omitted_weight: float
    output: np.ndarray
    blocked: bool
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def explain_output(result: AttentionResult, head: int, query: int, top: int | None = None) -> OutputExplanation:
    """Explain head ``head``'s output for ``query`` as Σ weight × v(key), largest weights first.

    ``top`` keeps only the largest terms (None keeps every visible key). Raises
    AttnExplorerError for an index out of range, a bad ``top``, or a result computed without V (and without Q and K, or the weights). The weights row is
    read from the result when it carries it, else worked out from Q and K.
    """
    session = result.session
    _need(result, "V")
    if result.weights is None:
        _need(result, "Q", "K")
    h = _index(head, result.heads, "head")
    i = _index(query, result.n, "query")
    if top is not None and (isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1):
        raise AttnExplorerError(f"top must be a whole number >= 1 or None, got {top!r}")
    qt = result.tokens[i]
    weights = np.asarray(result.row("weights", h, i), dtype=np.float64)
    if result.head_outputs is not None:
        output = np.array(result.head_outputs[h, i], dtype=np.float64)
    else:
        output = weights @ np.asarray(result.V[_kv(result, h)], dtype=np.float64)
    if result.blocked_rows[i]:
        lines = (
            f"out({qt}) = 0: every key is blocked for {qt!r} (mask: {session.mask.kind}), so it attends to nothing",
            f"= {fmt_vector(output)}",
        )
        return OutputExplanation(h, i, qt, (), 0, 0.0, output, True, lines)
    visible = np.flatnonzero(~np.asarray(result.mask[i]))
    # A stable sort on -weight keeps equal weights in token order.
    order = visible[np.argsort(-weights[visible], kind="stable")]
    kept = order if top is None else order[: int(top)]
    cut = order[len(kept):]
    g = _kv(result, h)
    keys = result.key_tokens
    terms = tuple(
        OutputTerm(int(j), keys[j], float(weights[j]), np.array(result.V[g, j], dtype=np.float64),
                   float(weights[j]) * np.array(result.V[g, j], dtype=np.float64))
        for j in kept
    )
    omitted_weight = float(weights[cut].sum()) if len(cut) else 0.0
    shown = [f"{fmt(t.weight)} × v({t.token})" for t in terms[:MAX_TERMS_SHOWN]]
    rest = len(terms) - len(shown) + len(cut)
    rest_weight = sum(t.weight for t in terms[MAX_TERMS_SHOWN:]) + omitted_weight
    if rest:
        shown.append(f"… ({rest} more, total weight {fmt(rest_weight)})")
    lines = [f"out({qt}) = " + " + ".join(shown)]
    if session.b_value is not None:
        lines.append(f"  each v = X·W_v + b_v: the bias {fmt_vector(session.b_value[g])} is added to every value")
    for t in terms[:MAX_TERMS_SHOWN]:
        lines.append(f"  {fmt(t.weight)} × {fmt_vector(t.value)} = {fmt_vector(t.contribution)}   ({t.token})")
    lines.append(f"= {fmt_vector(output)}" + (f"  (the whole sum over all {len(order)} visible keys)" if rest else ""))
    if session.sinks is not None:
        total = float(weights[visible].sum())
        lines.append(f"  the weights sum to {fmt(total)}, not 1: head {h}'s sink takes the rest ({fmt(1.0 - total)}) "
                     "and, having no value, adds nothing to the output")
    return OutputExplanation(h, i, qt, terms, len(cut), omitted_weight, output, False, tuple(lines))
