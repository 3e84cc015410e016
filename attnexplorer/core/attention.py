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


class AttentionOverflow(ArithmeticError):
    """The scores overflowed the dtype (inf/NaN) before masking; ``compute`` words the message."""


@dataclass(frozen=True, eq=False)
class AttentionInputs:
    """The tensors one attention computation reads, all on one device in one dtype.

    - ``x``: the embeddings, (n, d).
    - ``w_qkv``: W_q, W_k and W_v of every head side by side, (d, H·d_k + H·d_k + H·d_v);
      head h's query columns are h·d_k … h·d_k + d_k − 1, then the keys', then the values'
      (``join_projections`` builds it from per-head (H, d, ·) stacks, differentiably).
    - ``heads``, ``d_k``, ``d_v``: the layout of ``w_qkv``.
    - ``factor``: the scale multiplying the raw scores (1/√d_k, 1, 1/τ).
    - ``mask``: (n, n) bool, True = blocked, or None when nothing is blocked.
    - ``blocked_rows``: (n,) bool, queries with every key blocked, or None when there are none.
      Their weights are set to 0 (softmax of an all −inf row is NaN).
    - ``w_out``: (H·d_v, d_out) or None.
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


def split_projections(joined, heads: int, d_k: int, d_v: int):
    """Q, K and V as (H, n, ·) views of the joined (n, H·d_k + H·d_k + H·d_v) product.

    ``joined`` is the torch tensor or its host numpy array (one host copy serves all three).
    """
    n = joined.shape[0]
    host = isinstance(joined, np.ndarray)
    if d_k == d_v:  # the usual case, in as few operations as possible
        if host:
            qkv = joined.reshape(n, 3, heads, d_k).transpose(1, 2, 0, 3)
            return qkv[0], qkv[1], qkv[2]
        return joined.view(n, 3, heads, d_k).permute(1, 2, 0, 3).unbind(0)
    hk = heads * d_k
    parts = (joined[:, :hk], joined[:, hk:2 * hk], joined[:, 2 * hk:])
    return tuple(p.reshape(n, heads, -1).swapaxes(0, 1) for p in parts)


def _inplace_ok(keep_overwritten: bool) -> bool:
    """Whether a step may overwrite its input: only when nobody reads it later, without autograd."""
    return not keep_overwritten and not _torch().is_grad_enabled()


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
    # X·[W_q | W_k | W_v]: every projection of every head in one matrix product.
    joined = inputs.x @ inputs.w_qkv
    q, k, v = split_projections(joined, inputs.heads, inputs.d_k, inputs.d_v)
    scores = q @ k.mT
    scaled = scores.mul_(inputs.factor) if _inplace_ok("scores" in wanted) else scores * inputs.factor
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
    head_out = weights @ v
    output = None
    if inputs.w_out is not None:
        concat = head_out.transpose(0, 1).reshape(head_out.shape[1], -1)
        output = concat @ inputs.w_out
    return {"joined": joined, "Q": q, "K": k, "V": v, "scores": scores, "scaled_scores": scaled,
            "weights": weights, "head_outputs": head_out, "output": output}
