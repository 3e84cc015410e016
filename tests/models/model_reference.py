"""The attention a version-2 or 3 session describes, computed in float64 numpy straight from the
formulas of issue 13 (E + P → norm → x·W + b → QK-norm → RoPE (scaled) → scores → scale →
soft-cap → mask → softmax → ·V → concat·W_o + b_o). Written apart from the import code and the engine, so that a session which
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


def _inv_freq(theta: float, dims: int, scaling: dict | None) -> np.ndarray:
    """θ^(−2i/dims), stretched as Llama 3's paper and transformers' rope utils describe: linear
    divides every frequency by the factor; llama3 divides those whose wavelength is longer than
    original/low_freq_factor, keeps those shorter than original/high_freq_factor, and blends
    between them."""
    inv = theta ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)
    if scaling is None:
        return inv
    if scaling["kind"] == "linear":
        return inv / scaling["factor"]
    assert scaling["kind"] == "llama3", scaling
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * np.pi / inv
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    out = np.where(wavelength > original / low, inv / factor, inv)
    middle = (wavelength >= original / high) & (wavelength <= original / low)
    return np.where(middle, blended, out)


def _rope_half(x: np.ndarray, theta: float, dims: int, offset: int, scaling: dict | None = None) -> np.ndarray:
    """Rotate pairs (i, i + dims/2) by (position + offset) · θ^(−2i/dims), as HF Llama does."""
    n = x.shape[0]
    half = dims // 2
    inv = _inv_freq(theta, dims, scaling)
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
    qk_norm = s.get("qk_norm")
    d_k = len(_a(heads[0]["W_q"])[0])

    def project(head, w, b):
        return x @ _a(head[w]) + (0 if head.get(b) is None else _a(head[b]))

    queries = [project(head, "W_q", "b_q") for head in heads]
    keys = [project(src, "W_k", "b_k") for src in (kv or heads)]
    if qk_norm:   # each head's or the whole projection's RMS, times the weight, before RoPE
        assert qk_norm["kind"] == "rms"

        def norm(parts, weight):
            whole = np.concatenate(parts, axis=1)
            weight = _a(weight)
            if qk_norm["over"] == "all":
                whole = whole / np.sqrt((whole ** 2).mean(-1, keepdims=True) + qk_norm["eps"]) * weight
                return np.split(whole, len(parts), axis=1)
            out = [p / np.sqrt((p ** 2).mean(-1, keepdims=True) + qk_norm["eps"]) for p in parts]
            if len(weight) == d_k:
                return [p * weight for p in out]
            return [p * weight[i * d_k:(i + 1) * d_k] for i, p in enumerate(out)]

        queries, keys = norm(queries, qk_norm["query_weight"]), norm(keys, qk_norm["key_weight"])
    weights, outs = [], []
    for h, head in enumerate(heads):
        src = kv[h // group] if kv else head
        q, k = queries[h], keys[h // group if kv else h]
        v = x @ _a(src["W_v"]) + (0 if src.get("b_v") is None else _a(src["b_v"]))
        if pos and pos["kind"] == "rope":
            assert pos["layout"] == "half"
            q = _rope_half(q, pos["theta"], pos["dims"], pos["offset"], pos.get("scaling"))
            k = _rope_half(k, pos["theta"], pos["dims"], pos["offset"], pos.get("scaling"))
        scores = q @ k.T
        if scale == "inv_sqrt_dk":
            scores = scores / np.sqrt(q.shape[1])
        elif isinstance(scale, dict) and "factor" in scale:
            scores = scores * scale["factor"]
        elif isinstance(scale, dict):
            scores = scores / scale["temperature"]
        if s.get("softcap") is not None:   # c · tanh(s / c) after the scale
            scores = s["softcap"] * np.tanh(scores / s["softcap"])
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
