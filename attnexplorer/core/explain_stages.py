"""The explanation lines of the stages of a real head, for ``explain_cell``.

For one cell (head h, query i, key j) they say what each stage the session uses did on the
way to q(i) and k(j): the position added, the norm's mean and scale, the biases added, which
K/V head the query head reads, where cross-attention's keys come from and RoPE's rotation
angle of each pair. (The ALiBi term is part of the scaled-score line in ``explain_cell``.)
The numbers are the result's where it carries them; the norm's mean and scale, which it does
not carry, are worked out in float64 from the session's rows.
"""

from __future__ import annotations

import numpy as np

from .number_text import fmt, fmt_vector
from .stages import norm_statistics, rope_pairs

MAX_PAIRS_SHOWN = 4


def _norm_line(session, result, i: int, token: str) -> str:
    from .stage_inputs import positions_array

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
    if p is not None and p.kind == "rope":
        dims = p.rope_dims(session.d_k)
        p_i, p_j = p.offset + i, p.offset + j
        first, second = rope_pairs(dims, p.layout)
        before = "" if result.Q_unrotated is None else \
            f"; before it q = {fmt_vector(result.Q_unrotated[h, i])}, k = {fmt_vector(result.K_unrotated[g, j])}"
        lines.append(f"RoPE turns each pair of q({qt}) by position {p_i} × ω and of k({kt}) by {p_j} × ω, "
                     f"so q·k sees only the difference {p_j - p_i} × ω{before}")
        for m in range(min(dims // 2, MAX_PAIRS_SHOWN)):
            omega = p.theta ** (-2.0 * m / dims)
            lines.append(f"  pair {m} (dims {int(first[m])}, {int(second[m])}), ω = {fmt(omega)}: q turned "
                         f"{fmt(p_i * omega)} rad, k turned {fmt(p_j * omega)} rad, difference {fmt((p_j - p_i) * omega)} rad")
        if dims // 2 > MAX_PAIRS_SHOWN:
            lines.append(f"  … ({dims // 2 - MAX_PAIRS_SHOWN} more pairs)")
    return lines
