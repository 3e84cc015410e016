"""The attention arithmetic itself, once: torch tensors in, every intermediate out.

``attention_block`` is the one softmax-attention kernel of attnexplorer (scores, scale, bias,
mask, softmax, grouped-query product, ·V, for a block of query rows over a block of keys);
``normalise`` the one LayerNorm/RMSNorm, ``rotate``/``rope_cos_sin`` the one RoPE,
``alibi_bias`` the one ALiBi bias and ``kv_head_map`` the one K/V head layout. ``attend(inputs)``
runs a session's whole computation with them (the dense engine and fitting), the streamed path
for long inputs (``core.long``) runs them a block of rows at a time, and a real model's forward
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
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

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


def normalise(x, kind: str, weight=None, bias=None, eps: float = 1e-5, cannot_overflow: bool = False):
    """LayerNorm (``kind`` "layer") or RMSNorm ("rms") of each row of x (…, d), the one norm
    of attnexplorer: the session's stage and the model forward both call it.

    - layer: ``torch.nn.functional.layer_norm(x, (d,), weight, bias, eps)`` (nn.LayerNorm).
    - rms: ``x · rsqrt(mean(x²) + eps) · weight`` computed in at least float32 and brought
      back to x's dtype before the weight, as transformers' LlamaRMSNorm does
      (``weight * (x32 * rsqrt(x32.pow(2).mean(-1) + eps)).to(x.dtype)``); bias is ignored.

    ``cannot_overflow`` (the session's stage; a model's forward keeps the model's own
    arithmetic): a row with an entry above 1 in size is first divided by its largest |entry|
    s, and eps by s², which leaves the norm unchanged while x² stays ≤ 1 (squared as it was, a
    float32 row of 1e20 overflowed to inf and came out as zeros; float16 rows near 300 did),
    and float16/bfloat16 rows are normalised in float32 (LayerNorm too), as models do. Rows
    with no entry above 1 take exactly the plain path.

    ``weight``/``bias`` None mean ones/zeros. Differentiable.
    """
    torch = _torch()
    if cannot_overflow:
        return _normalise_scaled(x, kind, weight, bias, eps)
    if kind == "layer":
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    wide = x.float() if x.dtype.itemsize < 4 else x
    y = (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight


def _normalise_scaled(x, kind: str, weight, bias, eps: float):
    torch = _torch()
    dtype = x.dtype
    if dtype.itemsize < 4:
        x = x.float()
        weight = None if weight is None else weight.float()
        bias = None if bias is None else bias.float()
    s = x.detach().abs().amax(-1, keepdim=True)
    if not bool((s > 1.0).any()):
        return normalise(x, kind, weight, bias, eps).to(dtype)
    s = s.clamp(min=1.0)
    x = x / s
    eps_rows = eps / s / s   # each row its own eps, so written out (nn.LayerNorm takes one)
    if kind == "layer":
        x = x - x.mean(-1, keepdim=True)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps_rows)
    x = x if weight is None else x * weight
    x = x if bias is None or kind != "layer" else x + bias
    return x.to(dtype)


def _normalise(x, norm):
    kind, weight, bias, eps = norm
    return normalise(x, kind, weight, bias, eps, cannot_overflow=True)


def normalise_heads(x, kind: str, weight=None, bias=None, eps: float = 1e-6, over: str = "head",
                    cannot_overflow: bool = False):
    """QK-norm: ``normalise`` applied to queries or keys x (H, n, d_k) after their projection
    (and its bias) and before RoPE, the one QK-norm of attnexplorer.

    - ``over`` "head" (Qwen3, Gemma 3): each head's d_k numbers of a row are one norm's row;
      ``weight``/``bias`` have d_k numbers (shared by every head) or H·d_k (head h's at
      h·d_k …, one weight per head).
    - ``over`` "all" (OLMo 2): a row's whole projection, H·d_k numbers across every head, is one
      norm's row; ``weight``/``bias`` have H·d_k numbers in the same layout.

    ``kind``, ``eps`` and ``cannot_overflow`` as ``normalise`` (which does the arithmetic, so a
    float16 row is normalised in float32 as transformers' RMSNorms do). Differentiable.
    """
    heads, n, width = x.shape
    if over == "all":
        flat = x.transpose(0, 1).reshape(n, heads * width)
        return normalise(flat, kind, weight, bias, eps, cannot_overflow).view(n, heads, width).transpose(0, 1)
    if weight is not None and weight.shape[-1] != width or bias is not None and bias.shape[-1] != width:
        # One weight per head: normalise, then each head's own weight and bias.
        y = normalise(x, kind, None, None, eps, cannot_overflow)
        y = y if weight is None else y * weight.view(heads, 1, width)
        return y if bias is None or kind != "layer" else y + bias.view(heads, 1, width)
    return normalise(x, kind, weight, bias, eps, cannot_overflow)


def rope_inv_freq(dims: int, theta: float, scaling=None, float32: bool = False):
    """RoPE's inverse frequencies θ^(−2i/dims), i < dims/2, as a CPU torch tensor, changed by
    ``scaling`` (a ``core.stages.RopeScaling`` or None), and the attention factor that scales
    cos and sin (YaRN's; 1 for the others): ``(inv_freq, attention_factor)``.

    ``float32=True`` repeats transformers' ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils``)
    operation for operation in float32, so an imported layer rounds as the model does; False
    makes the same formulas in float64 (without scaling: ``core.stages.rope_angles``'s
    frequencies exactly).

    - ``linear``: every frequency ÷ factor.
    - ``llama3``: wavelengths λ = 2π/f longer than original/low_freq_factor are ÷ factor,
      shorter than original/high_freq_factor kept, and between them blended:
      s = (original/λ − low) / (high − low), f' = (1 − s)·f/factor + s·f.
    - ``yarn``: f' = f/factor·(1 − e) + f·e, e = 1 − clamp((i − low)/(high − low), 0, 1) with
      low/high the pair indices ``d·ln(original / (2π·β)) / (2 ln θ)`` for β = beta_fast and
      beta_slow (floored/ceiled when ``truncate``, then clipped to 0 … dims − 1); the attention
      factor is ``scaling.attention_factor`` (default 0.1·ln(factor) + 1 for factor > 1).
    """
    torch = _torch()
    kind = None if scaling is None else scaling.kind
    dtype = torch.float32 if float32 else torch.float64
    if not float32 and kind is None:
        from .stages import rope_frequencies

        return torch.from_numpy(rope_frequencies(dims, theta)), 1.0
    exponents = torch.arange(0, dims, 2, dtype=torch.int64).to(dtype) / dims
    if kind == "yarn":
        return _yarn_inv_freq(theta ** exponents, dims, theta, scaling, dtype), scaling.yarn_attention_factor
    inv_freq = 1.0 / (theta ** exponents)
    if kind == "linear":
        return inv_freq / scaling.factor, 1.0
    if kind == "llama3":
        return _llama3_inv_freq(inv_freq, scaling), 1.0
    return inv_freq, 1.0


def _llama3_inv_freq(inv_freq, scaling):
    torch = _torch()
    factor, low, high = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
    original = scaling.original_max_position_embeddings
    long_wavelength, short_wavelength = original / low, original / high
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > long_wavelength, inv_freq / factor, inv_freq)
    blend = (original / wavelength - low) / (high - low)
    blended = (1 - blend) * scaled / factor + blend * scaled
    between = ~(wavelength < short_wavelength) * ~(wavelength > long_wavelength)
    return torch.where(between, blended, scaled)


def _yarn_inv_freq(pos_freqs, dims: int, theta: float, scaling, dtype):
    torch = _torch()

    def pair_index(rotations):  # the pair that turns ``rotations`` times over the original length
        return dims * math.log(scaling.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = pair_index(scaling.beta_fast), pair_index(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = ((torch.arange(dims // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1 - ramp
    return 1.0 / (scaling.factor * pos_freqs) * (1 - extrapolated) + 1.0 / pos_freqs * extrapolated


def rope_cos_sin(n: int, dims: int, theta: float, dtype, device, offset: int = 0, float32_angles: bool = False,
                 scaling=None):
    """cos and sin, (n, dims/2) tensors in ``dtype`` on ``device``, of the RoPE angles
    p·f_i for positions p = offset … offset + n − 1 and pairs i < dims/2, f_i θ^(−2i/dims)
    changed by ``scaling`` (``rope_inv_freq``), both times YaRN's attention factor: the
    ``cos``/``sin`` of ``rotate``'s ``rope`` tuple.

    By default the angles are made in float64 on the host and only their cosines rounded to
    ``dtype``. ``float32_angles=True`` makes them as transformers does: the frequencies and
    ``position × inv_freq`` in float32, then cos/sin × attention factor in float32, so a
    model's forward and an imported layer repeat its rounding at every length.
    """
    torch = _torch()
    if float32_angles:
        inv_freq, attention_factor = rope_inv_freq(dims, theta, scaling, float32=True)
        angles = torch.arange(offset, offset + n, dtype=torch.float32)[:, None] * inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        if attention_factor != 1.0:
            cos, sin = cos * attention_factor, sin * attention_factor
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)
    from .stages import rope_angles

    angles = rope_angles(n, dims, theta, offset, scaling)
    attention_factor = 1.0 if scaling is None else scaling.yarn_attention_factor
    return (torch.tensor(np.cos(angles) * attention_factor, dtype=dtype, device=device),
            torch.tensor(np.sin(angles) * attention_factor, dtype=dtype, device=device))


def rotate(x, rope):
    """RoPE, the one rotation of attnexplorer: turn each pair of the first ``dims`` dimensions
    of x (…, n, d_k) by its angle. ``rope`` is ``(cos, sin, dims, layout)`` with cos/sin
    (n, dims/2) (``rope_cos_sin``); ``layout`` "half" pairs (i, i + dims/2) (Llama/GPT-NeoX's
    ``rotate_half``: ``x·cos + rotate_half(x)·sin`` with cos repeated twice gives exactly the
    same numbers), "interleaved" pairs (2i, 2i + 1). Dimensions past ``dims`` pass unchanged."""
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


def alibi_bias(slopes, rows: slice, cols: slice, dtype=None, device=None):
    """ALiBi's bias, the one of attnexplorer: −slope_h·|i − j| for heads h (``slopes``, (H,)),
    query positions i in ``rows`` and key positions j in ``cols`` (step-1 slices with bounds),
    as an (H, rows, cols) tensor in ``dtype`` (default float64) on ``device``. Made in float64
    and rounded once, so any rectangle equals the same cells of the whole; the diagonal is +0,
    not −0 (which exports would write as "-0.0")."""
    torch = _torch()
    i = torch.arange(rows.start, rows.stop, device=device, dtype=torch.float64)
    j = torch.arange(cols.start, cols.stop, device=device, dtype=torch.float64)
    distance = (i[:, None] - j[None, :]).abs()
    s = torch.tensor(np.asarray(slopes, dtype=np.float64), device=device)
    bias = 0.0 - s[:, None, None] * distance
    return bias if dtype is None else bias.to(dtype)


def kv_head_map(heads: int, kv_heads: int) -> np.ndarray:
    """The K/V head each of ``heads`` query heads reads (H,), read-only and shared: query head
    h reads K/V head h // (heads / kv_heads), the grouped-query layout of ``attention_block``."""
    return _kv_head_map(int(heads), int(kv_heads))


@functools.lru_cache(maxsize=32)
def _kv_head_map(heads: int, kv_heads: int) -> np.ndarray:
    a = np.arange(heads) // (heads // kv_heads)
    a.flags.writeable = False
    return a


def linear(x, w, b=None):
    """x·w (+ b): one matrix product, the bias fused into it when there is one."""
    return x @ w if b is None else _torch().addmm(b, x, w)


def _inplace_ok(keep_overwritten: bool) -> bool:
    """Whether a step may overwrite its input: only when nobody reads it later, without autograd."""
    return not keep_overwritten and not _torch().is_grad_enabled()


def queries_keys_values(inputs: AttentionInputs) -> dict:
    """Every step before the scores: X = norm(E + P), then Q, K and V of every head (QK-norm
    and RoPE applied), as a dict of tensors (see ``attend``'s first entries; ``Q_unnormed``/
    ``K_unnormed`` are before QK-norm, ``Q_unrotated``/``K_unrotated`` after it and before RoPE).

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
    q_unnormed = k_unnormed = None
    if inputs.qk_norm is not None:
        q_unnormed, k_unnormed = q, k
        kind, over, eps, q_weight, q_bias, k_weight, k_bias = inputs.qk_norm
        q = normalise_heads(q, kind, q_weight, q_bias, eps, over, cannot_overflow=True)
        k = normalise_heads(k, kind, k_weight, k_bias, eps, over, cannot_overflow=True)
    q_unrotated = k_unrotated = None
    if inputs.rope is not None:
        q_unrotated, k_unrotated = q, k
        q, k = rotate(q, inputs.rope), rotate(k, inputs.rope)
    return {"joined": joined, "joined_kv": joined_kv, "X": x, "Q": q, "K": k, "V": v,
            "Q_unrotated": q_unrotated, "K_unrotated": k_unrotated, "Q_unnormed": q_unnormed, "K_unnormed": k_unnormed}


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
    inputs (``core.long``) and a model's forward make every score and weight here.

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
    if out is not None and "scores" in out and not grad:
        scores = torch.bmm(qg, k.mT, out=out["scores"][: heads * r * c].view(kv_heads, group * r, c))
    else:
        scores = qg @ k.mT
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
        head_out = (weights.view(kv_heads, group * r, c) @ v).view(heads, r, -1)
    else:
        head_out = weights @ v
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
