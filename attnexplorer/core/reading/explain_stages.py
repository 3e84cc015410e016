"""The explanation lines of the stages of a real head, for ``explain_cell``.

For one cell (head h, query i, key j) they say what each stage the session uses did on the
way to q(i) and k(j): the position added, the norm's mean and scale, the biases added, which
K/V head the query head reads, where cross-attention's keys come from, QK-norm's scale of q and
k, and RoPE's rotation angle of each pair (its frequencies scaled, when the session scales them). (The ALiBi term is part of the scaled-score line in ``explain_cell``.)
The numbers are the result's where it carries them; the norm's mean and scale, which it does
not carry, are worked out in float64 from the session's rows.
"""

from __future__ import annotations

import numpy as np

from ..numbers.number_text import fmt, fmt_vector
from ..inputs.stages import norm_statistics, rope_angles, rope_pairs

MAX_PAIRS_SHOWN = 4


def _norm_line(session, result, i: int, token: str) -> str:
    from ..compute.stage_inputs import positions_array

    x = np.asarray(session.embeddings[i], dtype=np.float64)
    table = positions_array(session)
    if table is not None:
        x = x + table[i]
    norm = session.norm
    out = "" if result.X is None else f" = {fmt_vector(result.X[i])}"
    mean, scale = norm_statistics(norm.kind, x[None, :], norm.eps)
    scale = float(scale[0])
    if norm.kind == "layer":
        mean = float(mean[0])
        var = float(((x - mean) ** 2).mean())
        # "row − −1.13" reads as a typo: subtracting a negative mean is written as adding it.
        centred = f"row − {fmt(mean)}" if mean >= 0 else f"row + {fmt(-mean)}"
        return (f"LayerNorm of {token}'s row: mean {fmt(mean)}, scale 1/√(variance + eps) = 1/√({fmt(var)} + {norm.eps:g}) "
                f"= {fmt(scale)}; X({token}) = ({centred}) × {fmt(scale)} × weight + bias{out}")
    return (f"RMSNorm of {token}'s row: scale 1/√(mean(row²) + eps) = 1/√({fmt(float((x * x).mean()))} + {norm.eps:g}) "
            f"= {fmt(scale)}; X({token}) = row × {fmt(scale)} × weight{out}")


def _qk_norm_line(session, result, name: str, head: int, row: int, token: str) -> str | None:
    """What QK-norm did to q (``name`` "Q") or k ("K") of one token in one head."""
    qk = session.qk_norm
    before_all = getattr(result, f"{name}_unnormed")
    after_all = getattr(result, f"{name}_unrotated") if session.positions is not None and \
        session.positions.kind == "rope" else getattr(result, name)
    if before_all is None or after_all is None:
        return None
    before = np.asarray(before_all[head, row], dtype=np.float64)
    # "all" normalises the token's whole projection (every head side by side) as one row.
    stats_row = before if qk.over == "head" else np.asarray(before_all[:, row], dtype=np.float64).reshape(-1)
    mean, scale = norm_statistics(qk.kind, stats_row[None, :], qk.eps)
    what = "each head's" if qk.over == "head" else "the whole projection's (every head's)"
    letter = name.lower()
    centred = letter if mean is None else f"({letter} − {fmt(float(mean[0]))})"
    kind = "RMSNorm" if qk.kind == "rms" else "LayerNorm"
    bias = " + bias" if qk.kind == "layer" else ""
    return (f"QK-norm ({kind} of {what} numbers, before RoPE): {letter}({token}) = {fmt_vector(before)} → "
            f"{centred} × {fmt(float(scale[0]))} × weight{bias} = {fmt_vector(after_all[head, row])}")


def stage_lines(session, result, h: int, i: int, j: int) -> list[str]:
    """The lines for the stages ``session`` uses, in pipeline order (empty for a plain head)."""
    lines: list[str] = []
    qt = result.tokens[i]
    kt = result.key_tokens[j]
    cross = session.source is not None
    own_rows = [(i, qt)] if cross or j == i else [(i, qt), (j, kt)]
    p = session.positions
    if p is not None and p.absolute and result.P is not None:
        for row, token in own_rows:
            lines.append(f"P({token}) = {fmt_vector(result.P[row])} ({p.kind} position {row}) is added to E({token})")
    if session.norm is not None:
        lines += [_norm_line(session, result, row, token) for row, token in own_rows]
    if cross:
        lines.append(f"cross-attention: keys and values are made from the source sequence; k({kt}) from source row {j}")
    g = h if result.kv_head_of is None else int(result.kv_head_of[h])
    if session.kv_heads != session.heads:
        sharing = [int(x) for x in np.flatnonzero(np.asarray(session.kv_head_of) == g)]
        lines.append(f"grouped-query: query head {h} reads K/V head {g}, shared by query heads "
                     f"{', '.join(map(str, sharing))}")
    if session.b_query is not None:
        lines.append(f"q({qt}) = X({qt})·W_q + b_q: the bias {fmt_vector(session.b_query[h])} is added")
    if session.b_key is not None:
        lines.append(f"k({kt}) = X({kt})·W_k + b_k: the bias {fmt_vector(session.b_key[g])} is added")
    if session.qk_norm is not None:
        lines += [line for line in (_qk_norm_line(session, result, "Q", h, i, qt), _qk_norm_line(session, result, "K", g, j, kt))
                  if line is not None]
    if p is not None and p.kind == "rope":
        dims = p.rope_dims(session.d_k)
        p_i, p_j = p.offset + i, p.offset + j
        first, second = rope_pairs(dims, p.layout)
        omegas = rope_angles(1, dims, p.theta, 1, p.scaling)[0]   # each pair's angle per position
        before = "" if result.Q_unrotated is None else \
            f"; before it q = {fmt_vector(result.Q_unrotated[h, i])}, k = {fmt_vector(result.K_unrotated[g, j])}"
        lines.append(f"RoPE turns each pair of q({qt}) by position {p_i} × ω and of k({kt}) by {p_j} × ω, "
                     f"so q·k sees only the difference {p_j - p_i} × ω{before}")
        if p.scaling is not None:
            lines.append(f"  the frequencies are scaled for long contexts: {p.scaling.describe()}")
            factor = p.scaling.yarn_attention_factor
            if factor != 1.0:
                lines.append(f"  YaRN multiplies cos and sin by {fmt(factor)}: the turned dimensions of q and k "
                             f"grow by that factor, their part of q·k by {fmt(factor * factor)}")
        if dims < session.d_k:
            rest = f"dim {dims} passes" if dims == session.d_k - 1 else f"dims {dims} … {session.d_k - 1} pass"
            lines.append(f"  partial rotary: {rest} unturned")
        for m in range(min(dims // 2, MAX_PAIRS_SHOWN)):
            omega = float(omegas[m])
            lines.append(f"  pair {m} (dims {int(first[m])}, {int(second[m])}), ω = {fmt(omega)}: q turned "
                         f"{fmt(p_i * omega)} rad, k turned {fmt(p_j * omega)} rad, difference {fmt((p_j - p_i) * omega)} rad")
        if dims // 2 > MAX_PAIRS_SHOWN:
            lines.append(f"  … ({dims // 2 - MAX_PAIRS_SHOWN} more pairs)")
    return lines
