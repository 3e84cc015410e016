"""The attention a version-2 session describes, computed in float64 numpy straight from the
formulas of issue 13 (E + P → norm → x·W + b → RoPE → scores → scale → mask → softmax → ·V →
concat·W_o + b_o). Written apart from the import code and the engine, so that a session which
matches the model here matches it by arithmetic, not because both sides share a helper.
"""

import numpy as np


def _a(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def attention_input(s: dict) -> np.ndarray:
    x = _a(s["embeddings"])
    n, d = x.shape
    pos = s.get("positions")
    if pos and pos["kind"] == "learned":
        x = x + _a(pos["table"])[:n]
    norm = s.get("norm")
    if norm and norm["kind"] == "layer":
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        x = (x - mu) / np.sqrt(var + norm["eps"]) * _a(norm["weight"]) + _a(norm["bias"])
    elif norm and norm["kind"] == "rms":
        x = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + norm["eps"]) * _a(norm["weight"])
    return x


def _rope_half(x: np.ndarray, theta: float, dims: int, offset: int) -> np.ndarray:
    """Rotate pairs (i, i + dims/2) by (position + offset) · θ^(−2i/dims), as HF Llama does."""
    n = x.shape[0]
    half = dims // 2
    inv = theta ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)
    ang = (np.arange(n, dtype=np.float64) + offset)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[:, :half], x[:, half:dims]
    out = x.copy()
    out[:, :half] = x1 * cos - x2 * sin
    out[:, half:dims] = x2 * cos + x1 * sin
    return out


def reference(s: dict) -> tuple[np.ndarray, np.ndarray]:
    """(weights H × n × n, output n × d_out) of the session's attention."""
    x = attention_input(s)
    n = x.shape[0]
    heads = s["heads"]
    kv = s.get("kv_heads")
    group = len(heads) // len(kv) if kv else 1
    pos = s.get("positions")
    scale = s["scale"]
    weights, outs = [], []
    for h, head in enumerate(heads):
        src = kv[h // group] if kv else head
        q = x @ _a(head["W_q"]) + (0 if head.get("b_q") is None else _a(head["b_q"]))
        k = x @ _a(src["W_k"]) + (0 if src.get("b_k") is None else _a(src["b_k"]))
        v = x @ _a(src["W_v"]) + (0 if src.get("b_v") is None else _a(src["b_v"]))
        if pos and pos["kind"] == "rope":
            assert pos["layout"] == "half"
            q = _rope_half(q, pos["theta"], pos["dims"], pos["offset"])
            k = _rope_half(k, pos["theta"], pos["dims"], pos["offset"])
        scores = q @ k.T
        if scale == "inv_sqrt_dk":
            scores = scores / np.sqrt(q.shape[1])
        elif isinstance(scale, dict):
            scores = scores / scale["temperature"]
        if s["mask"] == "causal":
            scores = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, scores)
        elif isinstance(s["mask"], dict):   # a sliding window: query i sees keys i - w + 1 … i
            i, j = np.indices((n, n))
            scores = np.where((j > i) | (i - j >= s["mask"]["window"]), -np.inf, scores)
        else:
            assert s["mask"] == "none"
        e = np.exp(scores - scores.max(-1, keepdims=True))
        w = e / e.sum(-1, keepdims=True)
        weights.append(w)
        outs.append(w @ v)
    concat = np.concatenate(outs, axis=1)
    output = concat @ _a(s["W_o"]) + (0 if s.get("b_o") is None else _a(s["b_o"]))
    return np.stack(weights), output
