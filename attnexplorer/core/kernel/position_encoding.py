"""Where a token sits, as the attention arithmetic sees it: RoPE and ALiBi, each written once.

- RoPE: the frequencies (``rope_frequencies``, float64; ``rope_inv_freq`` with a long-context
  scaling and, for an imported layer, in float32 as transformers makes them), the angles
  (``rope_angles``), their ``cos``/``sin`` (``rope_cos_sin``) and the rotation of Q and K
  (``rotate``, both pair layouts);
- ALiBi: the bias −slope·|i − j| of any rectangle of cells (``alibi_bias``).

The session's stages (``stages.Positions``) describe them; the kernel (``attention``), the
streamed path (``core.compute.long``), the panels and a real model's forward compute with these.
torch is imported lazily, so that ``import attnexplorer.core`` stays light.
"""

from __future__ import annotations

import math

import numpy as np


def _torch():
    import torch

    return torch


def rope_frequencies(dims: int, theta: float) -> np.ndarray:
    """Pair i's angle per position, θ^(−2i/dims), i < dims/2, float64 (no scaling)."""
    return theta ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)


def rope_angles(n: int, dims: int, theta: float, offset: int = 0, scaling=None) -> np.ndarray:
    """The angle of pair i at position p (p = offset … offset + n − 1), (n, dims/2), radians,
    in float64, with the frequencies changed by ``scaling`` (``rope_inv_freq``)."""
    if scaling is None:
        inv_freq = rope_frequencies(dims, theta)
    else:
        inv_freq = rope_inv_freq(dims, theta, scaling)[0].numpy()
    pos = np.arange(offset, offset + n, dtype=np.float64)
    return pos[:, None] * inv_freq[None, :]


def rope_inv_freq(dims: int, theta: float, scaling=None, float32: bool = False):
    """RoPE's inverse frequencies θ^(−2i/dims), i < dims/2, as a CPU torch tensor, changed by
    ``scaling`` (a ``core.inputs.stages.RopeScaling`` or None), and the attention factor that scales
    cos and sin (YaRN's; 1 for the others): ``(inv_freq, attention_factor)``.

    ``float32=True`` repeats transformers' ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils``)
    operation for operation in float32, so an imported layer rounds as the model does; False
    makes the same formulas in float64 (without scaling: ``rope_angles``'s
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
