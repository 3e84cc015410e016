"""The engine with the stages of a real head against the same arithmetic in bare torch.

``measure_stages_overhead(n, positions="rope" | "alibi" | "rope+new")`` times ``compute()`` on a
session with biases on Q, K and V, grouped-query K/V heads (8 query heads sharing 2) and RoPE
or ALiBi (a session holds one kind of positions), against bare torch from tensors already on
the device: ``softmax((X·W_q + b_q)(X·W_k + b_k)ᵀ·s [+ bias])·(X·W_v + b_v)`` with RoPE applied
to Q and K by hand and K, V repeated for the query heads that share them. "rope+new" adds
version 3's stages to RoPE's session (QK-norm of each head, soft-capping at 50, a sink per
head), written out in the bare torch the way the models' eager code writes them (RMSNorm
formula, c·tanh(s / c), the sink as one more column of the softmax). Like
``engine.measure_engine_overhead``, calls alternate, device work is synchronised before a
clock is read, and the ratio is everything the engine adds (its caches, overflow bound and
host arrays of every intermediate). ``bench_stages`` makes the ``stages`` rows of
``attnexplorer bench`` from it (target: ratio ≤ 1.3, as the engine's).
"""

from __future__ import annotations

import numpy as np

from ..core.compute.engine import compute, resolve
from ..core.errors import EngineError
from ..core.inputs.session import Session
from ..core.inputs.stages import Positions, QKNorm, alibi_slopes, rope_angles

POSITIONS = ("rope", "alibi", "rope+new")


def stage_session(n: int, d: int = 512, heads: int = 8, kv_heads: int = 2, d_k: int = 64, positions: str = "rope",
                  seed: int = 0) -> Session:
    """A random session with biases, grouped K/V heads and ``positions`` ("rope" or "alibi";
    "rope+new": RoPE with QK-norm, soft-capping and sinks too)."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.sqrt(d)  # keeps the scores O(1), as in a trained layer, so no softmax saturates
    newer = {}
    if positions == "rope+new":
        newer = dict(qk_norm=QKNorm("rms", "head", 1e-6, 1 + 0.1 * rng.normal(size=d_k), 1 + 0.1 * rng.normal(size=d_k)),
                     softcap=50.0, sinks=rng.normal(size=heads))
    return Session(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        w_query=rng.normal(size=(heads, d, d_k)) * w, w_key=rng.normal(size=(kv_heads, d, d_k)) * w,
        w_value=rng.normal(size=(kv_heads, d, d_k)) * w,
        b_query=rng.normal(size=(heads, d_k)) * 0.1, b_key=rng.normal(size=(kv_heads, d_k)) * 0.1,
        b_value=rng.normal(size=(kv_heads, d_k)) * 0.1,
        positions=Positions("alibi") if positions == "alibi" else Positions("rope"),
        **newer,
    )


def measure_stages_overhead(n: int, positions: str = "rope", repeats: int = 5, device: str = "cpu",
                            dtype: str = "float32", d: int = 512, heads: int = 8, kv_heads: int = 2,
                            d_k: int = 64) -> dict:
    """Median milliseconds of ``compute()`` and of the bare torch equivalent, side by side.

    Returns ``{"n", "d", "heads", "kv_heads", "positions", "device", "dtype", "repeats",
    "engine_ms", "bare_ms", "ratio"}``.
    """
    import torch

    if positions not in POSITIONS:
        raise EngineError(f"positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise EngineError(f"repeats must be a whole number >= 1, got {repeats!r}")
    dev, tdtype = resolve(device, dtype)
    s = stage_session(n, d, heads, kv_heads, d_k, positions)
    keep = None if dev.type == "cpu" else ("output",)

    def t(a):
        return torch.tensor(a, dtype=tdtype, device=dev)

    x, wq, wk, wv = t(s.embeddings), t(s.w_query), t(s.w_key), t(s.w_value)
    bq, bk, bv = t(s.b_query)[:, None, :], t(s.b_key)[:, None, :], t(s.b_value)[:, None, :]
    angles = rope_angles(n, d_k, s.positions.theta)
    cos, sin = t(np.cos(angles)), t(np.sin(angles))
    i = np.arange(n)
    bias = t(-alibi_slopes(heads)[:, None, None] * np.abs(i[:, None] - i[None, :])[None]) if positions == "alibi" else None
    factor = s.scale.factor(d_k)
    group = heads // kv_heads
    half = d_k // 2

    def rope(z):
        a, b = z[..., :half], z[..., half:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    qk = s.qk_norm
    if qk is not None:
        q_weight, k_weight, cap, sinks = t(qk.query_weight), t(qk.key_weight), s.softcap, t(s.sinks)[:, None, None]

    def rms(z, weight):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + qk.eps) * weight

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def bare():
        with torch.inference_mode():
            q, k, v = x @ wq + bq, x @ wk + bk, x @ wv + bv
            if qk is not None:
                q, k = rms(q, q_weight), rms(k, k_weight)
            if bias is None:
                q, k = rope(q), rope(k)
            scores = q @ k.repeat_interleave(group, dim=0).mT * factor
            if qk is not None:
                scores = torch.tanh(scores / cap) * cap
                logits = torch.cat((scores, sinks.expand(heads, n, 1)), dim=-1)
                weights = torch.softmax(logits, dim=-1)[..., :-1]
            else:
                if bias is not None:
                    scores = scores + bias
                weights = torch.softmax(scores, dim=-1)
            out = weights @ v.repeat_interleave(group, dim=0)
        sync()
        return out

    def engine():
        return compute(s, device=device, dtype=dtype, keep=keep)

    from .engine import interleaved_medians  # engine.py imports this module lazily, so no cycle

    # The two must compute the same thing, or the ratio means nothing.
    shown = engine().output
    plain = bare().transpose(0, 1).reshape(n, -1).float().cpu().numpy()
    if not np.allclose(shown, plain, rtol=1e-3, atol=1e-4):
        raise EngineError(f"the bare torch equivalent ({positions}) differs from the engine by "
                          f"{float(np.abs(shown - plain).max()):.3g}")
    engine_ms, bare_ms = interleaved_medians(engine, bare, repeats, warmups=2)
    return {"n": n, "d": d, "heads": heads, "kv_heads": kv_heads, "positions": positions, "device": str(dev),
            "dtype": dtype, "repeats": repeats, "engine_ms": engine_ms, "bare_ms": bare_ms, "ratio": engine_ms / bare_ms}


def bench_stages(sizes, devices, repeats) -> list[dict]:
    from .engine import TARGETS

    rows = []
    for device in devices:
        for positions in POSITIONS:
            for n in sizes:
                row = measure_stages_overhead(n, positions, repeats=repeats, device=device)
                row["met"] = row["ratio"] <= TARGETS["engine_ratio"]
                rows.append(row)
    return rows

