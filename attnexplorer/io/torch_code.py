""""Copy as PyTorch code": the session as a self-contained script that needs only torch.

The snippet rebuilds the tokens, embeddings, per-head weights, mask and scale with exact
numbers (``repr`` of each float64) and computes scores, weights and output with plain torch,
in the same order of operations as ``core.compute.engine.compute``, so in float64 it gives the same
numbers. It never imports attnexplorer and prints only the shapes and the output. The stages
of a real head (positions, norm, biases, grouped K/V heads, a source, RoPE, ALiBi, b_o) are
written out only when the session uses them, each as the few lines of torch that define it.
"""

from __future__ import annotations

import numpy as np

from .. import __version__


def _number(v: float) -> str:
    return repr(float(v))


def _matrix(a: np.ndarray, indent: str) -> str:
    rows = [indent + "    [" + ", ".join(_number(v) for v in row) + "]," for row in a]
    return "[\n" + "\n".join(rows) + "\n" + indent + "]"


def _stack(a: np.ndarray) -> str:
    """An (H, r, c) array as a nested list literal, one head per block."""
    heads = []
    for h in range(a.shape[0]):
        heads.append(f"    # head {h}\n    " + _matrix(a[h], "    ") + ",")
    return "[\n" + "\n".join(heads) + "\n]"


def _vector(v: np.ndarray) -> str:
    return "[" + ", ".join(_number(x) for x in v) + "]"


def _mask_code(session) -> list[str]:
    mask = session.mask
    if session.source is not None:  # cross-attention: n queries × n_k source keys
        if mask.kind == "none":
            return ["mask = torch.zeros(n, n_k, dtype=torch.bool)  # nothing blocked"]
        if mask.kind == "padding":
            return ["mask = torch.zeros(n, n_k, dtype=torch.bool)",
                    f"mask[:, {[int(j) for j in mask.padding]!r}] = True  # padded source keys nobody attends to"]
    if mask.kind == "none":
        return ["mask = torch.zeros(n, n, dtype=torch.bool)  # nothing blocked"]
    if mask.kind == "causal":
        return ["mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # causal: no looking ahead"]
    if mask.kind == "window":
        return [f"window = {int(mask.window)}  # a query sees itself and the window - 1 tokens before it",
                "i = torch.arange(n)",
                "mask = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - window)"]
    if mask.kind == "padding":
        return ["mask = torch.zeros(n, n, dtype=torch.bool)",
                f"mask[:, {[int(j) for j in mask.padding]!r}] = True  # padded keys nobody attends to"]
    rows = ",\n".join("    [" + ", ".join("1" if b else "0" for b in row) + "]" for row in mask.blocked)
    return ["mask = torch.tensor([\n" + rows + "\n], dtype=torch.bool)  # custom: 1 = blocked"]


def _scale_code(session) -> str:
    scale = session.scale
    if scale.kind == "inv_sqrt_dk":
        return "scale = 1.0 / math.sqrt(d_k)"
    if scale.kind == "none":
        return "scale = 1.0  # unscaled"
    if scale.kind == "factor":
        return f"scale = {_number(scale.multiplier)}  # an explicit factor (e.g. query_pre_attn_scalar ** -0.5)"
    return f"scale = 1.0 / {_number(scale.temperature)}  # softmax(scores / temperature)"


def _input_code(session) -> list[str]:
    """X = norm(E + P), when positions or a norm apply; else X is E."""
    p, norm = session.positions, session.norm
    if (p is None or not p.absolute) and norm is None:
        return ["X = E  # no absolute positions, no norm: the attention input is the embeddings"]
    lines = []
    x = "E"
    if p is not None and p.kind == "sinusoidal":
        lines += [f"pos = torch.arange(n, dtype=torch.float64)[:, None]",
                  f"angle = pos / {_number(p.base)} ** (torch.arange(0, E.shape[1], 2, dtype=torch.float64) / E.shape[1])",
                  "P = torch.zeros(n, E.shape[1], dtype=torch.float64)",
                  "P[:, 0::2] = torch.sin(angle)  # PE[pos, 2i] = sin(pos / base^(2i/d))",
                  "P[:, 1::2] = torch.cos(angle[:, : E.shape[1] // 2])  # PE[pos, 2i+1] = cos(…)",
                  "P = P.to(dtype)"]
        x = "E + P"
    elif p is not None and p.kind == "learned":
        lines.append("P = torch.tensor(" + _matrix(p.table[: session.n], "") + ", dtype=dtype)  # learned positions")
        x = "E + P"
    if norm is None:
        lines.append(f"X = {x}")
        return lines
    weight = "None" if norm.weight is None else f"torch.tensor({_vector(norm.weight)}, dtype=dtype)"
    if norm.kind == "layer":
        bias = "None" if norm.bias is None else f"torch.tensor({_vector(norm.bias)}, dtype=dtype)"
        lines.append(f"X = torch.nn.functional.layer_norm({x}, (E.shape[1],), {weight}, {bias}, {norm.eps!r})"
                     "  # LayerNorm")
    else:
        lines.append(f"X = ({x}) * torch.rsqrt(({x}).pow(2).mean(-1, keepdim=True) + {norm.eps!r})  # RMSNorm")
        if norm.weight is not None:
            lines.append(f"X = X * {weight}")
    return lines


def _bias_code(name: str, b, comment: str) -> str:
    if b is None:
        return f"{name} = 0.0  # no bias"
    return f"{name} = torch.tensor(" + _matrix(b, "") + f", dtype=dtype)[:, None, :]  # {comment}"


def _qk_norm_code(qk, heads: int, kv_heads: int, d_k: int) -> list[str]:
    """QK-norm of Q and K (H, n, d_k) before RoPE: over each head's numbers or, with "all",
    over a token's whole projection (every head side by side)."""
    def tensor(v, count):
        if v is None:
            return "None"
        # Over each head, a weight of its own per head is (heads, 1, d_k); one shared, (d_k,).
        per_head = qk.over == "head" and v.shape[0] != d_k
        return f"torch.tensor({_vector(v)}, dtype=dtype)" + (f".view({count}, 1, {d_k})" if per_head else "")

    kind = "RMSNorm" if qk.kind == "rms" else "LayerNorm"
    lines = [f"# QK-norm ({kind} over {'each head' if qk.over == 'head' else 'the whole projection'}) before RoPE",
             "def qk_norm(x, weight, bias):"]
    if qk.over == "all":
        lines.append("    h = x.shape[0]")
        lines.append("    x = x.transpose(0, 1).reshape(x.shape[1], -1)  # (n, heads · d_k): one row per token")
    if qk.kind == "layer":
        lines.append(f"    x = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + {qk.eps!r})")
    else:
        lines.append(f"    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + {qk.eps!r})")
    lines += ["    x = x if weight is None else x * weight", "    x = x if bias is None else x + bias"]
    if qk.over == "all":
        lines.append("    return x.reshape(x.shape[0], h, -1).transpose(0, 1)")
    else:
        lines.append("    return x")
    lines += ["",
              "Q_unnormed, K_unnormed = Q, K",
              f"Q = qk_norm(Q, {tensor(qk.query_weight, heads)}, {tensor(qk.query_bias, heads)})",
              f"K = qk_norm(K, {tensor(qk.key_weight, kv_heads)}, {tensor(qk.key_bias, kv_heads)})"]
    return lines


def _rope_frequency_code(p, dims: int) -> list[str]:
    """cos and sin of every position and pair, as the engine makes them (``rope_cos_sin``)."""
    if p.scaling is None and p.angles == "float64":
        return [f"# RoPE: pair i of the first {dims} dimensions turns by position × theta^(-2i/dims)",
                f"positions = torch.arange({p.offset}, {p.offset} + n, dtype=torch.float64)",
                f"inv_freq = {_number(p.theta)} ** (-torch.arange(0, {dims}, 2, dtype=torch.float64) / {dims})",
                "angles = positions[:, None] * inv_freq[None, :]",
                "cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)"]
    from ..core.kernel.attention import rope_inv_freq

    wide = "torch.float32" if p.angles == "float32" else "torch.float64"
    inv_freq, factor = rope_inv_freq(dims, p.theta, p.scaling, float32=p.angles == "float32")
    what = "theta^(-2i/dims)" if p.scaling is None else f"theta^(-2i/dims) scaled ({p.scaling.describe()})"
    lines = [f"# RoPE: pair i of the first {dims} dimensions turns by position × inv_freq[i], {what},",
             f"# the angles made in {wide.removeprefix('torch.')} as the model makes them",
             f"positions = torch.arange({p.offset}, {p.offset} + n, dtype={wide})",
             f"inv_freq = torch.tensor({_vector(inv_freq.double().numpy())}, dtype={wide})",
             "angles = positions[:, None] * inv_freq[None, :]"]
    if factor != 1.0:
        lines.append(f"attention_factor = {_number(factor)}  # YaRN scales cos and sin")
        lines.append("cos, sin = (angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)")
    else:
        lines.append("cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)")
    return lines


def _rope_code(p, d_k: int) -> list[str]:
    dims = p.rope_dims(d_k)
    if p.layout == "half":
        pairs = f"a, b = x[..., :{dims // 2}], x[..., {dims // 2}:{dims}]  # pairs (i, i + dims/2), as Llama"
        join = "turned = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)"
    else:
        pairs = f"a, b = x[..., 0:{dims}:2], x[..., 1:{dims}:2]  # pairs (2i, 2i+1), as GPT-J"
        join = "turned = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)"
    return [
        *_rope_frequency_code(p, dims),
        "",
        "def rope(x):",
        f"    {pairs}",
        f"    {join}",
        f"    return torch.cat((turned, x[..., {dims}:]), dim=-1)",
        "",
        "Q_unrotated, K_unrotated = Q, K",
        "Q, K = rope(Q), rope(K)",
    ]


def _stages_used(session) -> bool:
    from ..core.compute.engine import uses_stages

    return uses_stages(session)


def session_to_torch_code(session) -> str:
    """A runnable Python script (imports math and torch only) that recomputes ``session``.

    Names in the script: ``tokens``, ``X`` (n, d), ``W_q``/``W_k`` (H, d, d_k), ``W_v``
    (H, d, d_v), ``W_o`` (or None), ``mask`` (n, n, True = blocked), ``scale``, then ``Q``,
    ``K``, ``V``, ``scores``, ``scaled_scores``, ``weights``, ``head_outputs``, ``concat``
    and ``output`` — the CLI's names. ``dtype`` at the top is float64 (exact) by default.
    """
    if _stages_used(session):
        return _staged_code(session)
    lines = [
        f"# Self-attention as plain PyTorch, generated by attnexplorer {__version__}.",
        "# Convention: row vectors, Q = X @ W_q (the x @ W of the walkthroughs), heads stacked first.",
        "import math",
        "",
        "import torch",
        "",
        "dtype = torch.float64  # float32 is what models use; float64 reproduces attnexplorer exactly",
        "",
        f"tokens = {list(session.tokens)!r}",
        "X = torch.tensor(" + _matrix(session.embeddings, "") + ", dtype=dtype)  # (n, d)",
        "W_q = torch.tensor(" + _stack(session.w_query) + ", dtype=dtype)  # (H, d, d_k)",
        "W_k = torch.tensor(" + _stack(session.w_key) + ", dtype=dtype)  # (H, d, d_k)",
        "W_v = torch.tensor(" + _stack(session.w_value) + ", dtype=dtype)  # (H, d, d_v)",
    ]
    if session.w_out is None:
        lines.append("W_o = None  # no output projection: the output is the heads concatenated")
    else:
        lines.append("W_o = torch.tensor(" + _matrix(session.w_out, "") + ", dtype=dtype)  # (H * d_v, d_out)")
    lines += [
        "",
        "n, d_k = X.shape[0], W_q.shape[-1]",
        *_mask_code(session),
        _scale_code(session),
        "",
        "Q = X @ W_q  # (H, n, d_k): every head at once",
        "K = X @ W_k",
        "V = X @ W_v",
        "scores = Q @ K.transpose(-1, -2)  # (H, n, n), raw q·k",
        "scaled_scores = scores * scale",
        "weights = torch.softmax(scaled_scores.masked_fill(mask, float('-inf')), dim=-1)",
        "# A query whose every key is blocked attends to nothing: weights 0, not NaN.",
        "weights = weights.masked_fill(mask.all(dim=-1)[:, None], 0.0)",
        "head_outputs = weights @ V  # (H, n, d_v)",
        "concat = head_outputs.transpose(0, 1).reshape(n, -1)  # (n, H * d_v)",
        "output = concat if W_o is None else concat @ W_o",
        "",
        "print('weights', tuple(weights.shape), 'output', tuple(output.shape))",
        "print(output)",
        "",
    ]
    return "\n".join(lines)


def _staged_code(session) -> str:
    """The script for a session with stages: E → + P → norm → X → Q/K/V + biases → RoPE →
    scores × scale + ALiBi → mask → softmax → weights → head outputs → concat · W_o + b_o."""
    cross = session.source is not None
    p = session.positions
    lines = [
        f"# Attention as plain PyTorch, generated by attnexplorer {__version__}.",
        "# Convention: row vectors, Q = X @ W_q + b_q (the x @ W of the walkthroughs), heads stacked first.",
        "import math",
        "",
        "import torch",
        "",
        "dtype = torch.float64  # float32 is what models use; float64 reproduces attnexplorer exactly",
        "",
        f"tokens = {list(session.tokens)!r}",
        "E = torch.tensor(" + _matrix(session.embeddings, "") + ", dtype=dtype)  # (n, d) embeddings",
        "n = E.shape[0]",
        *_input_code(session),
    ]
    if cross:
        lines += [f"source_tokens = {list(session.source.tokens)!r}",
                  "source_X = torch.tensor(" + _matrix(session.source.embeddings, "") +
                  ", dtype=dtype)  # (n_k, d_s): cross-attention's keys and values come from here",
                  "n_k = source_X.shape[0]"]
    kv_in = "source_X" if cross else "X"
    lines += [
        "W_q = torch.tensor(" + _stack(session.w_query) + ", dtype=dtype)  # (H, d, d_k)",
        "W_k = torch.tensor(" + _stack(session.w_key) + ", dtype=dtype)  # (H_kv, d_in, d_k)",
        "W_v = torch.tensor(" + _stack(session.w_value) + ", dtype=dtype)  # (H_kv, d_in, d_v)",
        _bias_code("b_q", session.b_query, "(H, 1, d_k)"),
        _bias_code("b_k", session.b_key, "(H_kv, 1, d_k)"),
        _bias_code("b_v", session.b_value, "(H_kv, 1, d_v)"),
    ]
    if session.w_out is None:
        lines.append("W_o = None  # no output projection: the output is the heads concatenated")
    else:
        lines.append("W_o = torch.tensor(" + _matrix(session.w_out, "") + ", dtype=dtype)  # (H * d_v, d_out)")
    lines.append("b_o = 0.0" if session.b_out is None else f"b_o = torch.tensor({_vector(session.b_out)}, dtype=dtype)")
    lines += [
        "",
        "d_k = W_q.shape[-1]",
        *_mask_code(session),
        _scale_code(session),
        "",
        "Q = X @ W_q + b_q  # (H, n, d_k): every head at once",
        f"K = {kv_in} @ W_k + b_k  # (H_kv, n_k, d_k)",
        f"V = {kv_in} @ W_v + b_v",
    ]
    if session.qk_norm is not None:
        lines += _qk_norm_code(session.qk_norm, session.heads, session.kv_heads, session.d_k)
    if p is not None and p.kind == "rope":
        lines += _rope_code(p, session.d_k)
    group = session.heads // session.kv_heads
    if group > 1:
        lines += [f"# grouped-query: query head h reads K/V head h // {group}",
                  f"kv_head_of = torch.arange({session.heads}) // {group}",
                  "scores = Q @ K[kv_head_of].transpose(-1, -2)  # raw q·k"]
    else:
        lines.append("scores = Q @ K.transpose(-1, -2)  # raw q·k")
    scaled = "scores * scale"
    if session.softcap is not None:
        lines.append(f"softcap = {_number(session.softcap)}  # soft-capping: scaled scores → softcap · tanh(s / softcap)")
        scaled = "torch.tanh(scores * scale / softcap) * softcap"
    if p is not None and p.kind == "alibi":
        lines += ["slopes = torch.tensor(" + _vector(p.slopes_for(session.heads)) + ", dtype=torch.float64)",
                  "i = torch.arange(n, dtype=torch.float64)",
                  "position_bias = (-slopes[:, None, None] * (i[:, None] - i[None, :]).abs()).to(dtype)  # ALiBi",
                  f"scaled_scores = {scaled} + position_bias"]
    else:
        lines.append(f"scaled_scores = {scaled}")
    if session.sinks is not None:
        lines += [f"sinks = torch.tensor({_vector(session.sinks)}, dtype=dtype)  # one learned logit per head",
                  "# Each head's sink joins every row's softmax as one more key with no value: the weights",
                  "# over the real keys sum to 1 − sink_share.",
                  "logits = torch.cat((scaled_scores.masked_fill(mask, float('-inf')),",
                  "                    sinks[:, None, None].expand(-1, n, 1)), dim=-1)",
                  "probabilities = torch.softmax(logits, dim=-1)",
                  "weights, sink_share = probabilities[..., :-1], probabilities[..., -1]"]
    else:
        lines.append("weights = torch.softmax(scaled_scores.masked_fill(mask, float('-inf')), dim=-1)")
    lines += [
        "# A query whose every key is blocked attends to nothing: weights 0, not NaN.",
        "weights = weights.masked_fill(mask.all(dim=-1)[:, None], 0.0)",
        "head_outputs = weights @ " + ("V[kv_head_of]" if group > 1 else "V") + "  # (H, n, d_v)",
        "concat = head_outputs.transpose(0, 1).reshape(n, -1)  # (n, H * d_v)",
        "output = concat if W_o is None else concat @ W_o + b_o",
        "",
        "print('weights', tuple(weights.shape), 'output', tuple(output.shape))",
        "print(output)",
        "",
    ]
    return "\n".join(lines)
