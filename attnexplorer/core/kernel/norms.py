"""The one LayerNorm/RMSNorm of attnexplorer (``normalise``) and its QK-norm form
(``normalise_heads``): the session's norm stage and QK-norm stage (``attention``), a real
model's forward (``models.forward``) and fitting all call them, so each norm is written once.

torch is imported lazily, so that ``import attnexplorer.core`` stays light.
"""

from __future__ import annotations


def _torch():
    import torch

    return torch


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
