"""What the window's stage panels show, worked out from a result without Qt.

``rope_pair`` picks one rotated pair of the selected query and key out of a result (before
and after RoPE, their positions, angles and dot products); ``rope_pair_names`` labels the
pairs. The numbers are the result's own (Q and K after RoPE, Q_unrotated and K_unrotated
before), so what a panel draws is what the engine computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernel.attention import alibi_bias
from ..inputs.stages import rope_pairs


@dataclass(frozen=True)
class RopePair:
    """One rotated pair (dims ``a``, ``b``) of query ``query`` and key ``key`` of a head.

    ``q_before``/``q_after`` and ``k_before``/``k_after`` are 2-vectors in the pair's plane;
    the query sits at ``query_position`` (offset + its index) and turns by ``query_angle`` =
    position × ``omega`` radians, the key likewise. ``pair_before``/``pair_after`` are the
    pair's share of q·k; ``score_before``/``score_after`` the whole q·k (all d_k dimensions)
    without and with RoPE: the latter depends only on key position − query position.
    """

    pair: int
    a: int
    b: int
    omega: float
    query_position: int
    key_position: int
    q_before: np.ndarray
    q_after: np.ndarray
    k_before: np.ndarray
    k_after: np.ndarray
    pair_before: float
    pair_after: float
    score_before: float
    score_after: float

    @property
    def query_angle(self) -> float:
        return self.query_position * self.omega

    @property
    def key_angle(self) -> float:
        return self.key_position * self.omega


def _dims(positions, d_k: int) -> int:
    return positions.rope_dims(d_k)


def rope_pair_names(positions, d_k: int) -> list[str]:
    """``pair 0 · dims 0, 2 · ω = 1`` for each rotated pair of ``positions`` (a RoPE one)."""
    from ..numbers.number_text import fmt

    dims = _dims(positions, d_k)
    first, second = rope_pairs(dims, positions.layout)
    return [f"pair {m} · dims {int(first[m])}, {int(second[m])} · ω = {fmt(positions.theta ** (-2.0 * m / dims))}"
            for m in range(dims // 2)]


def rope_pair(result, head: int, query: int, key: int, pair: int) -> RopePair | None:
    """Pair ``pair`` of query ``query`` (head ``head``) and key ``key`` in ``result``, or None
    when the result's session has no RoPE or the result lacks Q, K or their unrotated forms."""
    session = result.session
    p = session.positions
    if p is None or p.kind != "rope" or any(
            getattr(result, name) is None for name in ("Q", "K", "Q_unrotated", "K_unrotated")):
        return None
    dims = _dims(p, session.d_k)
    first, second = rope_pairs(dims, p.layout)
    m = min(max(int(pair), 0), dims // 2 - 1)
    a, b = int(first[m]), int(second[m])
    g = head if result.kv_head_of is None else int(result.kv_head_of[head])
    q0 = np.asarray(result.Q_unrotated[head, query], dtype=np.float64)
    k0 = np.asarray(result.K_unrotated[g, key], dtype=np.float64)
    q1 = np.asarray(result.Q[head, query], dtype=np.float64)
    k1 = np.asarray(result.K[g, key], dtype=np.float64)
    q_before, k_before = q0[[a, b]], k0[[a, b]]
    q_after, k_after = q1[[a, b]], k1[[a, b]]
    return RopePair(
        pair=m, a=a, b=b, omega=float(p.theta ** (-2.0 * m / dims)),
        query_position=p.offset + query, key_position=p.offset + key,
        q_before=q_before, q_after=q_after, k_before=k_before, k_after=k_after,
        pair_before=float(q_before @ k_before), pair_after=float(q_after @ k_after),
        score_before=float(q0 @ k0), score_after=float(q1 @ k1))


def alibi_window(slopes, n: int, head: int, query: int, size: int) -> tuple[int, np.ndarray]:
    """ALiBi's bias of head ``head`` among at most ``size`` tokens around ``query``: (first,
    block), ``block[a, b]`` = −slope·|(first + a) − (first + b)|. For a long session, whose
    result does not hold the H × n × n bias, the panel draws this window instead."""
    m = min(int(size), n)
    first = min(max(int(query) - m // 2, 0), n - m)
    window = slice(first, first + m)
    return first, alibi_bias(np.asarray(slopes)[head:head + 1], window, window).numpy()[0]
