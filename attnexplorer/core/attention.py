"""The attention arithmetic itself, once: torch tensors in, every intermediate out.

``attend(inputs)`` is the only place in attnexplorer that computes attention. Everything that
needs the numbers goes through it:

- ``engine.compute()`` calls it under ``torch.inference_mode()`` for the window, the CLI, the
  exports and the bench, with device copies cached from the session (``device_inputs``);
- fitting (``core.fit``) calls it with autograd enabled, on inputs whose W_q and W_k are
  trainable leaf tensors, and back-propagates a loss on its ``weights``. So the gradient is
  torch's autograd through the very code whose result the window displays, never a second
  formula.

A new stage of the computation (a bias, a norm, a positional scheme, grouped keys, keys from
another sequence, ...) is added here, as a field of ``AttentionInputs`` (``None`` or a neutral
default when absent, so that callers that do not know it are unchanged) and as a step in
``attend`` between the ones it sits between. Keep each step differentiable: in-place updates
are used only where the caller asked not to keep the overwritten tensor and autograd is off
(see ``_inplace_ok``), because an in-place write into a tensor that backward needs breaks it.

torch is imported lazily, as in the engine, so that ``import attnexplorer.core`` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Every intermediate ``attend`` can return, in the order it makes them.
INTERMEDIATES = ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "concat", "output")
# Those of the optional stages: None in a result whose session does not use the stage.
STAGE_INTERMEDIATES = ("P", "X", "Q_unrotated", "K_unrotated", "position_bias")


class AttentionOverflow(ArithmeticError):
    """The scores overflowed the dtype (inf/NaN) before masking; ``compute`` words the message."""


@dataclass(frozen=True, eq=False)
class AttentionInputs:
    """The tensors one attention computation reads, all on one device in one dtype.

    - ``x``: the embeddings E, (n, d).
    - ``w_qkv``: W_q, W_k and W_v of every head side by side, (d, H·d_k + H_kv·d_k + H_kv·d_v);
      head h's query columns are h·d_k … h·d_k + d_k − 1, then the keys', then the values'
      (``join_projections`` builds it from per-head (H, d, ·) stacks, differentiably). With a
      ``source`` it holds only the query columns, and ``w_kv`` the keys' and values'.
    - ``heads``, ``d_k``, ``d_v``: the layout of ``w_qkv``; ``kv_heads`` (None: ``heads``) the
      number of K/V heads, each shared by heads / kv_heads consecutive query heads.
    - ``factor``: the scale multiplying the raw scores (1/√d_k, 1, 1/τ).
    - ``mask``: (n, n_k) bool, True = blocked, or None when nothing is blocked.
    - ``blocked_rows``: (n,) bool, queries with every key blocked, or None when there are none.
      Their weights are set to 0 (softmax of an all −inf row is NaN).
    - ``w_out``: (H·d_v, d_out) or None.

    The optional stages, None when absent (and then they cost one ``is None`` each):

    - ``positions_add``: P, (n, d), added to E (sinusoidal or learned positions).
    - ``norm``: ``("layer", weight, bias, eps)`` or ``("rms", weight, None, eps)`` applied to
      each row of E + P; weight/bias None mean ones/zeros.
    - ``b_qkv``: the biases in ``w_qkv``'s column layout extended by ``w_kv``'s, (H·d_k +
      H_kv·d_k + H_kv·d_v,).
    - ``source_x``, ``w_kv``: cross-attention: keys and values are ``source_x`` (n_k, d_s) ·
      ``w_kv`` (d_s, H_kv·d_k + H_kv·d_v) + their biases.
    - ``rope``: ``(cos, sin, dims, layout)``, cos/sin (n, dims/2): rotates the first ``dims``
      dimensions of Q and K in pairs (i, i + dims/2) for ``half``, (2i, 2i+1) for
      ``interleaved``.
    - ``position_bias``: (H, n, n), added to the scaled scores (ALiBi).
    - ``b_out``: (d_out,), added to the output.

    ``linear``: a function ``(x, w, b) -> x·w + b`` for the projections in place of the plain
    ``linear`` (the engine's reuse of the previous edit's product,
    ``projection_reuse.reuse_linear``); None: the plain product.
    """

    x: Any
    w_qkv: Any
    heads: int
    d_k: int
    d_v: int
    factor: float
    mask: Any = None
    blocked_rows: Any = None
    w_out: Any = None
    kv_heads: int | None = None
    positions_add: Any = None
    norm: Any = None
    b_qkv: Any = None
    source_x: Any = None
    w_kv: Any = None
    rope: Any = None
    position_bias: Any = None
    b_out: Any = None
    linear: Any = None


def _torch():
    import torch

    return torch


def join_projections(w_query, w_key, w_value):
    """(H, d, d_k), (H, d, d_k), (H, d, d_v) torch stacks → the (d, ·) ``w_qkv`` layout.

    Differentiable, so fitting can join trainable W_q and W_k with a fixed W_v; the engine's
    cached device copy is built by this same function.
    """
    torch = _torch()
    # (H, d, k) → (d, H·k): head h's columns are h·k … h·k + k − 1.
    columns = [w.permute(1, 0, 2).reshape(w.shape[1], -1) for w in (w_query, w_key, w_value)]
    return torch.cat(columns, dim=1)


def split_projections(joined, heads: int, d_k: int, d_v: int, kv_heads: int | None = None):
    """Q, K and V as (H, n, ·) views of the joined (n, H·d_k + H_kv·d_k + H_kv·d_v) product
    (K and V have H_kv = ``kv_heads`` heads, by default H).

    ``joined`` is the torch tensor or its host numpy array (one host copy serves all three).
    """
    n = joined.shape[0]
    host = isinstance(joined, np.ndarray)
    kv_heads = heads if kv_heads is None else kv_heads
    if d_k == d_v and kv_heads == heads:  # the usual case, in as few operations as possible
        if host:
            qkv = joined.reshape(n, 3, heads, d_k).transpose(1, 2, 0, 3)
            return qkv[0], qkv[1], qkv[2]
        return joined.view(n, 3, heads, d_k).permute(1, 2, 0, 3).unbind(0)
    hk = heads * d_k
    return (_per_head(joined[:, :hk], heads),) + split_key_value(joined[:, hk:], kv_heads, d_k)


def split_key_value(joined, kv_heads: int, d_k: int):
    """K and V as (H_kv, n, ·) views of the joined (n, H_kv·d_k + H_kv·d_v) product."""
    hk = kv_heads * d_k
    return _per_head(joined[:, :hk], kv_heads), _per_head(joined[:, hk:], kv_heads)


def _per_head(columns, heads: int):
    return columns.reshape(columns.shape[0], heads, -1).swapaxes(0, 1)


def _normalise(x, norm):
    """LayerNorm or RMSNorm of each row, as torch's nn.LayerNorm / nn.RMSNorm compute them."""
    torch = _torch()
    kind, weight, bias, eps = norm
    if kind == "layer":
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if weight is None else x * weight


def rotate(x, rope):
    """RoPE: turn each pair of the first ``dims`` dimensions of x (…, n, d_k) by its angle."""
    torch = _torch()
    cos, sin, dims, layout = rope
    half = dims // 2
    if layout == "half":
        a, b = x[..., :half], x[..., half:dims]
    else:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
    turned_a = a * cos - b * sin
    turned_b = a * sin + b * cos
    if layout == "half":
        turned = torch.cat((turned_a, turned_b), dim=-1)
    else:
        turned = torch.stack((turned_a, turned_b), dim=-1).flatten(-2)
    return turned if dims == x.shape[-1] else torch.cat((turned, x[..., dims:]), dim=-1)


def linear(x, w, b=None):
    """x·w (+ b): one matrix product, the bias fused into it when there is one."""
    return x @ w if b is None else _torch().addmm(b, x, w)


def _inplace_ok(keep_overwritten: bool) -> bool:
    """Whether a step may overwrite its input: only when nobody reads it later, without autograd."""
    return not keep_overwritten and not _torch().is_grad_enabled()


def queries_keys_values(inputs: AttentionInputs) -> dict:
    """Every step before the scores: X = norm(E + P), then Q, K and V of every head (RoPE
    applied), as a dict of tensors (see ``attend``'s first entries).

    ``attend`` starts with it, and so does the streamed path for long inputs
    (``core.long``), which then makes the scores a block of rows at a time: one formula for
    X, Q, K and V, whichever path shows them.
    """
    x = inputs.x
    if inputs.positions_add is not None:
        x = x + inputs.positions_add
    if inputs.norm is not None:
        x = _normalise(x, inputs.norm)
    heads, d_k = inputs.heads, inputs.d_k
    kv_heads = heads if inputs.kv_heads is None else inputs.kv_heads
    product = linear if inputs.linear is None else inputs.linear
    if inputs.source_x is None:
        # X·[W_q | W_k | W_v] (+ b): every projection of every head in one matrix product.
        joined = product(x, inputs.w_qkv, inputs.b_qkv)
        joined_kv = None
        q, k, v = split_projections(joined, heads, d_k, inputs.d_v, kv_heads)
    else:
        # Cross-attention: queries from X, keys and values from the source's rows.
        hk = heads * d_k
        b = inputs.b_qkv
        joined = product(x, inputs.w_qkv, None if b is None else b[:hk])
        joined_kv = product(inputs.source_x, inputs.w_kv, None if b is None else b[hk:])
        q = _per_head(joined, heads)
        k, v = split_key_value(joined_kv, kv_heads, d_k)
    q_unrotated = k_unrotated = None
    if inputs.rope is not None:
        q_unrotated, k_unrotated = q, k
        q, k = rotate(q, inputs.rope), rotate(k, inputs.rope)
    return {"joined": joined, "joined_kv": joined_kv, "X": x, "Q": q, "K": k, "V": v,
            "Q_unrotated": q_unrotated, "K_unrotated": k_unrotated}


def attend(inputs: AttentionInputs, wanted=frozenset(INTERMEDIATES), check_finite=None) -> dict:
    """Run scaled dot-product attention for all heads at once (batched, no loop over heads).

    Returns a dict of tensors: ``joined`` (X·w_qkv, (n, ·): Q, K and V side by side), ``Q``,
    ``K``, ``V`` (H, n, ·) views of it, ``scores`` (raw QKᵀ), ``scaled_scores`` (× factor, not
    masked), ``weights`` (H, n, n; blocked cells 0, blocked rows 0), ``head_outputs``
    (H, n, d_v), and ``output`` (concat·W_o, or None without W_o: the concatenation is made by
    whoever needs it). ``wanted`` names the intermediates the caller will read: without
    autograd, a buffer not wanted is overwritten in place (an n×n buffer per intermediate is the
    whole memory bill at 4,096 tokens), so ``scores`` and ``scaled_scores`` may then be the same
    tensor as a later stage and must not be read.

    ``check_finite`` (a function tensor → bool), when given, is asked about the scaled scores
    before the mask writes its own −inf into them; a False raises ``AttentionOverflow`` (a score
    that overflowed to −inf would otherwise pass for a masked cell and never reach the output).

    Fitting calls this with autograd on and takes the gradient of a loss on ``weights``.
    """
    torch = _torch()
    t = queries_keys_values(inputs)
    q, k, v = t["Q"], t["K"], t["V"]
    heads, d_k = inputs.heads, inputs.d_k
    kv_heads = heads if inputs.kv_heads is None else inputs.kv_heads
    group = heads // kv_heads
    n = q.shape[1]
    if group > 1:
        # Grouped-query: the `group` query heads of one K/V head in one product, no copy of K.
        scores = (q.reshape(kv_heads, group * n, d_k) @ k.mT).view(heads, n, -1)
    else:
        scores = q @ k.mT
    scaled = scores.mul_(inputs.factor) if _inplace_ok("scores" in wanted) else scores * inputs.factor
    if inputs.position_bias is not None:
        # scaled is a buffer of its own here unless scores was given up to it.
        scaled = scaled.add_(inputs.position_bias) if not torch.is_grad_enabled() else scaled + inputs.position_bias
    if check_finite is not None and not (check_finite(scaled) and (scaled is scores or check_finite(scores))):
        raise AttentionOverflow()
    if inputs.mask is not None:
        # exp(-inf) = 0, so blocked cells get weight exactly 0 in rows with a free key.
        if _inplace_ok("scaled_scores" in wanted):
            masked = scaled.masked_fill_(inputs.mask, float("-inf"))
        else:
            masked = scaled.masked_fill(inputs.mask, float("-inf"))
        weights = torch.softmax(masked, dim=-1)
        del masked
        if inputs.blocked_rows is not None:
            # softmax over an all -inf row is NaN; such a query attends to nothing. Out of place
            # under autograd: softmax's backward reads its own output.
            rows = inputs.blocked_rows[:, None]
            weights = weights.masked_fill_(rows, 0.0) if _inplace_ok(False) else weights.masked_fill(rows, 0.0)
    else:
        # No mask, no extra pass: this branch is the bare softmax(QKᵀ·s)·V.
        weights = torch.softmax(scaled, dim=-1)
    if group > 1:
        head_out = (weights.view(kv_heads, group * n, -1) @ v).view(heads, n, -1)
    else:
        head_out = weights @ v
    t.update(scores=scores, scaled_scores=scaled, weights=weights, head_outputs=head_out,
             output=combine_heads(head_out, inputs))
    return t


def combine_heads(head_out, inputs: AttentionInputs):
    """output = concat·W_o + b_o from the (H, n, d_v) head outputs, or None without W_o."""
    if inputs.w_out is None:
        return None
    concat = head_out.transpose(0, 1).reshape(head_out.shape[1], -1)
    return linear(concat, inputs.w_out, inputs.b_out)
