"""The attention arithmetic itself, once: torch tensors in, every intermediate out.

``attention_block`` is the one softmax-attention kernel of attnexplorer (scores, scale, bias,
mask, softmax, grouped-query product, ·V, for a block of query rows over a block of keys);
``normalise`` the one LayerNorm/RMSNorm (``norms``), ``rotate``/``rope_cos_sin`` the one RoPE
and ``alibi_bias`` the one ALiBi bias (``position_encoding``), and ``kv_head_map`` the one
K/V head layout. ``attend(inputs)``
runs a session's whole computation with them (the dense engine and fitting), the streamed path
for long inputs (``core.compute.long``) runs them a block of rows at a time, and a real model's forward
runs them for every layer. Everything that needs the numbers goes through them:

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

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

# The norms, the position encodings and the projections are the kernel's parts, written in
# modules of their own; importable from here as before.
from .norms import normalise, normalise_heads  # noqa: F401
from .position_encoding import alibi_bias, rope_cos_sin, rope_inv_freq, rotate  # noqa: F401
from .projections import (join_projections, linear, queries_keys_values, split_key_value,  # noqa: F401
                          split_projections)

# Every intermediate ``attend`` can return, in the order it makes them.
INTERMEDIATES = ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "concat", "output")
# Those of the optional stages: None in a result whose session does not use the stage.
STAGE_INTERMEDIATES = ("P", "X", "Q_unrotated", "K_unrotated", "position_bias", "Q_unnormed", "K_unnormed",
                       "sink_share")


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
    - ``qk_norm``: ``(kind, over, eps, q_weight, q_bias, k_weight, k_bias)``: each query and
      key head normalised after the projection and before RoPE (``normalise_heads``).
    - ``softcap``: the cap c of ``attention_block``'s soft-capping of the scaled scores.
    - ``sinks``: (H,), one learned logit per query head that joins every row's softmax
      (``attention_block``).
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
    qk_norm: Any = None
    softcap: float | None = None
    sinks: Any = None


def _torch():
    import torch

    return torch


def kv_head_map(heads: int, kv_heads: int) -> np.ndarray:
    """The K/V head each of ``heads`` query heads reads (H,), read-only and shared: query head
    h reads K/V head h // (heads / kv_heads), the grouped-query layout of ``attention_block``."""
    return _kv_head_map(int(heads), int(kv_heads))


@functools.lru_cache(maxsize=32)
def _kv_head_map(heads: int, kv_heads: int) -> np.ndarray:
    a = np.arange(heads) // (heads // kv_heads)
    a.flags.writeable = False
    return a


def _inplace_ok(keep_overwritten: bool) -> bool:
    """Whether a step may overwrite its input: only when nobody reads it later, without autograd."""
    return not keep_overwritten and not _torch().is_grad_enabled()


class AttentionBlock(NamedTuple):
    """What ``attention_block`` made, for H query heads, r query rows and c keys. A stage
    not reached (``until``) or not asked for is None; a stage not named in ``keep`` may have
    been overwritten in place by a later one and must not be read."""

    scores: Any          # (H, r, c) raw q·kᵀ
    scaled_scores: Any   # (H, r, c) scores × factor + bias, before the mask
    weights: Any         # (H, r, c) softmax rows; blocked cells 0, blocked rows 0
    output: Any          # (H, r, d_v) weights·V
    log_sum_exp: Any     # (H, r) log Σ_j exp(masked scaled score), when asked (+ exp(sink) with sinks)
    sink_share: Any = None  # (H, r) the sink's weight in each row, with sinks


STAGES = ("scores", "scaled_scores", "weights", "output")
_NOTHING_KEPT = frozenset()


def attention_block(q, k, v=None, *, factor: float = 1.0, bias=None, mask=None, causal: bool = False,
                    key_offset: int = 0, fill: float = float("-inf"), blocked_rows=None, softmax_dtype=None,
                    log_sum_exp: bool = False, normalisers=None, until: str = "output", keep=_NOTHING_KEPT,
                    observe=None, out=None, softcap: float | None = None, sinks=None) -> AttentionBlock:
    """Softmax attention of a block of query rows over a block of keys: the one kernel of
    attnexplorer. ``attend`` (the dense engine and fitting), the streamed path for long
    inputs (``core.compute.long``) and a model's forward make every score and weight here.

    Tensors (torch, one device, one dtype):

    - ``q`` (H, r, d_k): r query rows of H heads; ``k`` (H_kv, c, d_k) and ``v`` (H_kv, c,
      d_v): c keys of H_kv K/V heads. H must be a multiple of H_kv: query heads
      h·g … h·g + g − 1 (g = H / H_kv) read K/V head h (``kv_head_map``), multiplied as one
      (H_kv, g·r, ·) product, never copying K or V (no ``repeat_interleave``).
    - ``factor``: the scale. scores = q·kᵀ, then scores × factor: transformers' eager
      attention's ``matmul(q, kᵀ) * scaling`` in that order.
    - ``softcap``: soft-capping (Gemma 2): the scaled scores become c·tanh(s / c) (as
      transformers: ÷ c, tanh, × c), before the bias and the mask. None: no cap.
    - ``bias``: added to the scaled scores, broadcastable to (H, r, c) (ALiBi, ``alibi_bias``).
    - ``mask``: bool, broadcastable to (H, r, c), True = blocked. ``causal``: also block key j
      for row i when j > i + ``key_offset`` (``key_offset``: the position of query row 0 among
      the keys: r0 − c0 for rows r0… of one sequence over keys c0…, or the number of cached
      keys before the first new query).
    - ``fill``: what a blocked cell's score becomes before the softmax: −inf (default; a blocked
      cell weighs exactly 0) or ``torch.finfo(dtype).min`` (transformers' eager masking).
    - ``blocked_rows``: (r,) bool, rows whose every key is blocked: their weights are set to 0
      (a softmax over −inf only is NaN). None: no such rows (or ``fill`` is finite).
    - ``sinks``: (H,) learned logits (GPT-OSS), one per query head, each joining every row's
      softmax as one more key with no value: w_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sink_h)),
      so a row's weights over the real keys sum to less than 1; the rest, the sink's share,
      comes back in ``sink_share`` (H, r) (1 for a fully blocked row, whose weights are 0), and
      ``log_sum_exp`` includes the sink's term. With ``normalisers`` the sink is already in
      their row scale (the caller made them with the sinks) and ``sinks`` is not read.
    - ``softmax_dtype``: the dtype the softmax runs in (transformers: torch.float32); the
      weights are brought back to q's dtype after it. None: q's dtype.
    - ``log_sum_exp``: also give log Σ_j exp(s_ij) per row (the softmax is then written out as
      max, exp, sum, divide, so the sum comes with it; −inf for a fully blocked row).
    - ``normalisers``: ``(row_max, row_scale)``, (H, r, 1) tensors: the weights are then
      exp(s − row_max)·row_scale instead of a softmax over these keys alone (a tile of a long
      row whose softmax was taken over all its keys earlier; row_max −inf for a blocked row).
    - ``until``: the last stage made: "scores", "scaled_scores", "weights" or "output" (the
      default; needs ``v``).
    - ``keep``: the stages the caller reads besides the last one. Without autograd a stage not
      kept is overwritten in place by the next (an r × c buffer per stage is the whole memory
      bill of a block); under autograd nothing is written in place.
    - ``observe(stage, tensor)``: called with "scores", "scaled_scores" (before the mask) and
      "masked" (after it) while each is intact: to check for overflow (raise), to pool a
      block, to take each row's maximum.
    - ``out``: preallocated flat buffers ``{"scores": …, "weights": …}`` at least H·r·c
      long, written instead of new allocations (a fresh 64 MB block costs as much in page
      faults as the product that fills it). Only without autograd.

    Returns an ``AttentionBlock``. Differentiable when autograd is on.
    """
    torch = _torch()
    grad = torch.is_grad_enabled()
    heads, r = q.shape[0], q.shape[1]
    kv_heads, c = k.shape[0], k.shape[1]
    group = heads // kv_heads
    if group * kv_heads != heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} K/V heads evenly")
    # Grouped-query: the `group` query heads of one K/V head in one product, no copy of K.
    qg = q.reshape(kv_heads, group * r, q.shape[-1]) if group > 1 else q
    # torch.bmm, not @: the same product (matmul of two 3-D tensors calls bmm), without
    # matmul's broadcasting bookkeeping, which costs as much as the product at teaching sizes.
    if out is not None and "scores" in out and not grad:
        scores = torch.bmm(qg, k.mT, out=out["scores"][: heads * r * c].view(kv_heads, group * r, c))
    else:
        scores = torch.bmm(qg, k.mT)
    if group > 1:
        scores = scores.view(heads, r, c)
    if observe is not None:
        observe("scores", scores)
    if until == "scores":
        return AttentionBlock(scores, None, None, None, None)
    scaled = scores.mul_(factor) if not grad and "scores" not in keep else scores * factor
    if softcap is not None:
        # Without autograd scaled is a buffer of its own (a new one, or scores given up to it).
        scaled = scaled.div_(softcap).tanh_().mul_(softcap) if not grad else (scaled / softcap).tanh() * softcap
    if bias is not None:
        # scaled is a buffer of its own here unless scores was given up to it.
        scaled = scaled + bias if grad else scaled.add_(bias)
    if observe is not None:
        observe("scaled_scores", scaled)
    if until == "scaled_scores":
        return AttentionBlock(scores, scaled, None, None, None)
    masked, own = scaled, not grad and "scaled_scores" not in keep
    if mask is not None:
        masked = masked.masked_fill_(mask, fill) if own else masked.masked_fill(mask, fill)
        own = not grad
    if causal:
        masked = _mask_causal(masked, key_offset, fill, own)
        own = not grad
    if observe is not None:
        observe("masked", masked)
    lse = share = None
    if normalisers is not None:
        row_max, row_scale = normalisers
        shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        weights = (masked.sub_(shift).exp_().mul_(row_scale) if own
                   else ((masked - shift).exp() * row_scale))
    elif sinks is not None:
        if softmax_dtype is not None and masked.dtype != softmax_dtype:
            masked, own = masked.to(softmax_dtype), not grad
        weights, lse, share = _softmax_with_sinks(masked, sinks.to(masked.dtype), own)
        if weights.dtype != q.dtype:
            weights, share = weights.to(q.dtype), share.to(q.dtype)
        lse = lse if log_sum_exp else None
    else:
        if softmax_dtype is not None and masked.dtype != softmax_dtype:
            masked, own = masked.to(softmax_dtype), not grad
        if log_sum_exp:
            weights, lse = _softmax_with_log_sum_exp(masked, own)
        elif out is not None and "weights" in out and not grad:
            weights = _softmax(masked, out["weights"][: masked.numel()].view(masked.shape))
        else:
            weights = torch.softmax(masked, dim=-1)
        if weights.dtype != q.dtype:
            weights = weights.to(q.dtype)
    del masked
    if blocked_rows is not None:
        # softmax over an all −inf row is NaN; such a query attends to nothing. Out of place
        # under autograd: softmax's backward reads its own output.
        rows = blocked_rows[:, None]
        weights = weights.masked_fill(rows, 0.0) if grad else weights.masked_fill_(rows, 0.0)
    if until == "weights":
        return AttentionBlock(scores, scaled, weights, None, lse, share)
    if group > 1:
        head_out = torch.bmm(weights.view(kv_heads, group * r, c), v).view(heads, r, -1)
    else:
        head_out = torch.bmm(weights, v)
    return AttentionBlock(scores, scaled, weights, head_out, lse, share)


def _mask_causal(scores, key_offset: int, fill: float, own: bool):
    """Block key j for row i when j > i + key_offset; only the columns past key_offset can be
    blocked, so in place only those are touched."""
    torch = _torch()
    r, c = scores.shape[-2], scores.shape[-1]
    first = max(0, key_offset + 1)
    if first >= c:
        return scores
    if own:
        blocked = torch.ones(r, c - first, dtype=torch.bool, device=scores.device).triu(key_offset + 1 - first)
        scores[..., first:].masked_fill_(blocked, fill)
        return scores
    blocked = torch.ones(r, c, dtype=torch.bool, device=scores.device).triu(key_offset + 1)
    return scores.masked_fill(blocked, fill)


def _softmax_with_log_sum_exp(x, own: bool):
    """softmax over the last axis written out (max, exp, sum, divide: four passes where softmax
    and logsumexp apart take seven), with each row's log Σ exp; a row of −inf only has weights
    0 and log Σ exp −inf."""
    torch = _torch()
    top = x.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = x.sub_(shift).exp_() if own else (x - shift).exp()
    total = weights.sum(dim=-1, keepdim=True)
    with_total = total.log() + shift
    lse = torch.where(total > 0, with_total, torch.full_like(total, float("-inf")))[..., 0]
    weights = weights.div_(total) if own else weights / total
    if not bool((total > 0).all()):
        weights = weights.nan_to_num_(0.0) if own else weights.nan_to_num(0.0)
    return weights, lse


def _softmax_with_sinks(x, sinks, own: bool):
    """softmax over the last axis of x (H, r, c) with one more logit per head, ``sinks`` (H,),
    in every row's sum: (weights over the real keys, log Σ exp including the sink, the
    sink's share), written out as GPT-OSS's eager attention computes it (the largest logit of
    the row and its sink subtracted first, so neither can overflow)."""
    torch = _torch()
    sink = sinks[:, None, None]
    top = torch.maximum(x.amax(dim=-1, keepdim=True), sink)   # finite: a sink is finite
    weights = x.sub_(top).exp_() if own else (x - top).exp()
    sink_term = (sink - top).exp()
    total = weights.sum(dim=-1, keepdim=True) + sink_term
    weights = weights.div_(total) if own else weights / total
    return weights, (total.log() + top)[..., 0], (sink_term / total)[..., 0]


def _softmax(x, out):
    """softmax over the last axis written into ``out``: a fresh block-sized result would cost
    as much in page faults as the softmax itself. ``torch._softmax`` is the out= form of
    ``torch.softmax`` (the same kernel); where a torch build lacks it, the plain call."""
    torch = _torch()
    try:
        return torch._softmax(x, -1, False, out=out)
    except (AttributeError, TypeError, RuntimeError):
        return torch.softmax(x, dim=-1)


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

    Fitting calls this with autograd on and takes the gradient of a loss on ``weights``. The
    scores, softmax and ·V are ``attention_block``'s, over every row and key at once.
    """
    t = queries_keys_values(inputs)
    observe = None if check_finite is None else _overflow_check(check_finite)
    block = attention_block(t["Q"], t["K"], t["V"], factor=inputs.factor, bias=inputs.position_bias,
                            mask=inputs.mask, blocked_rows=inputs.blocked_rows, keep=wanted, observe=observe,
                            softcap=inputs.softcap, sinks=inputs.sinks)
    t.update(scores=block.scores, scaled_scores=block.scaled_scores, weights=block.weights,
             head_outputs=block.output, output=combine_heads(block.output, inputs), sink_share=block.sink_share)
    return t


def _overflow_check(check_finite):
    """An ``observe`` for ``attention_block`` that raises ``AttentionOverflow`` when the scaled
    scores (or the raw scores, when they are a buffer of their own) hold an inf or NaN."""
    seen = {}

    def observe(stage, tensor):
        if stage == "scores":
            seen["scores"] = tensor
        elif stage == "scaled_scores":
            scores = seen["scores"]
            if not (check_finite(tensor) and (tensor is scores or check_finite(scores))):
                raise AttentionOverflow()

    return observe


def combine_heads(head_out, inputs: AttentionInputs):
    """output = concat·W_o + b_o from the (H, n, d_v) head outputs, or None without W_o."""
    if inputs.w_out is None:
        return None
    concat = head_out.transpose(0, 1).reshape(head_out.shape[1], -1)
    return linear(concat, inputs.w_out, inputs.b_out)
