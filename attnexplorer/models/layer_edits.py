"""An edited layer session, read back into the model: what the forward must change, and what can
be folded into the weights of a saved model.

The tables hold one layer of a real model as a session (``LoadedModel.layer_parts``: the layer's
input as E, its norm, its heads' W_q/W_k/W_v with biases, W_o and b_o, the mask, the scale, the
positions). An edit there is an edit of the model: ``layer_edit`` compares the session with the
model's own one for that layer and turns each difference back into the model's terms, the
inverse of ``families``' read-out:

- W_q, W_k, W_v (and their biases) of every head → the layer's q/k/v projection (BERT's
  ``query``/``key``/``value``, GPT-2's fused ``c_attn``, Llama's ``q_proj``… with the shared K/V
  heads); W_o, b_o → the output projection; the norm → the block's ``ln_1`` / ``input_layernorm``;
- E (and at layer 0 the position table and BERT's embedding LayerNorm) → the residual stream
  entering the layer, which the recompute starts from; P and BERT's embedding LayerNorm can be
  folded into the position table and the LayerNorm of a saved model, E cannot (it is the text's
  activations, not a weight);
- a changed mask or scale → the layer's attention uses it (not foldable into weights).

What the model's forward cannot follow (other shapes, other tokens, a changed RoPE, a norm of
another kind) is a ``ModelError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .sources import ModelError


@dataclass(frozen=True)
class LayerEdit:
    """One edited layer: ``change`` for the forward, ``fold`` (tensors by the model's names that a
    saved model would carry), ``unfoldable`` (why it cannot be saved as weights; empty when it can),
    ``changed`` (what differs from the model, in the session's words)."""

    layer: int
    change: object                      # forward.LayerChange
    fold: dict = field(default_factory=dict)
    unfoldable: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()


def _f32(a):
    import torch

    return torch.from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.float32)))


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)))


def _bias_same(a, b) -> bool:
    """A missing bias is zero: the model's absent bias equals an all-zero one in the session."""
    if a is None and b is None:
        return True
    if a is None or b is None:
        return not np.any(a if a is not None else b)
    return _same(a, b)


def _columns(w: np.ndarray) -> np.ndarray:
    """(heads, d, size) stacked per head → (d, heads·size), the model's column order."""
    return np.ascontiguousarray(np.asarray(w).transpose(1, 0, 2).reshape(w.shape[1], -1))


def _flat(b, heads: int, size: int) -> np.ndarray:
    return np.zeros(heads * size) if b is None else np.asarray(b).reshape(-1)


def _check_shapes(session, model, label: str, layer: int) -> None:
    def refuse(what):
        raise ModelError(f"the session is not layer {layer} of {label}: {what}")

    if tuple(session.tokens) != tuple(model.tokens):
        refuse(f"its tokens are not the text's ({len(session.tokens)} tokens: "
               f"{' '.join(session.tokens[:6])}{' …' if len(session.tokens) > 6 else ''})")
    for name, a, b in (("heads", session.heads, model.heads), ("K/V heads", session.kv_heads, model.kv_heads),
                       ("d", session.d, model.d), ("d_k", session.d_k, model.d_k), ("d_v", session.d_v, model.d_v)):
        if a != b:
            refuse(f"it has {name} = {a}, the layer {b}")
    if session.w_out is None or session.w_out.shape != model.w_out.shape:
        refuse("its output projection W_o is missing or of another shape")
    if session.source is not None:
        refuse("it is cross-attention (it has a source)")
    if (session.norm is None) != (model.norm is None) or (session.norm is not None and session.norm.kind != model.norm.kind):
        kind = "no norm" if session.norm is None else f"a {session.norm.kind} norm"
        refuse(f"it has {kind}; the layer's is {'none' if model.norm is None else model.norm.kind}")
    if session.norm is not None and session.norm.eps != model.norm.eps:
        refuse(f"its norm's eps is {session.norm.eps:g}; the model's is {model.norm.eps:g} (a setting of the model, not a weight)")
    sp, mp = session.positions, model.positions
    if (sp is None) != (mp is None) or (sp is not None and sp.kind != mp.kind):
        refuse(f"its positions are {'none' if sp is None else sp.kind}; the layer's are {'none' if mp is None else mp.kind}")
    if mp is not None and mp.kind == "rope" and ((sp.theta, sp.dims, sp.layout, sp.offset, sp.scaling, sp.angles)
                                                != (mp.theta, mp.dims, mp.layout, mp.offset, mp.scaling, mp.angles)):
        refuse(f"its RoPE (θ = {sp.theta:g}, dims {sp.dims}, {sp.layout}, offset {sp.offset}) is not the model's "
               f"(θ = {mp.theta:g}, dims {mp.dims}, {mp.layout}, offset {mp.offset}), which its forward keeps")
    sq, mq = session.qk_norm, model.qk_norm
    if (sq is None) != (mq is None) or (sq is not None and (sq.kind, sq.over, sq.eps) != (mq.kind, mq.over, mq.eps)):
        refuse("its QK-norm is not the model's kind, reach or eps (only its weights can be edited: the rest is the "
               "model's setting, which its forward keeps)")
    if session.softcap != model.softcap:
        refuse(f"its soft-cap is {session.softcap}, the model's {model.softcap}: a setting of the model, which its "
               "forward keeps")


def layer_edit(kind: str, config, weights, run, layer: int, session, model, label: str) -> LayerEdit:
    """The edit that ``session`` (the tables' layer) makes to ``layer`` of the model, against
    ``model``, the model's own session of that layer on ``run`` (``LoadedModel.layer_parts``)."""
    import torch

    _check_shapes(session, model, label, layer)
    d, dk = model.d, model.d_k
    changed = [name for name, a, b in (
        ("W_q", session.w_query, model.w_query), ("W_k", session.w_key, model.w_key),
        ("W_v", session.w_value, model.w_value), ("W_o", session.w_out, model.w_out)) if not _same(a, b)]
    changed += [name for name, a, b in (
        ("b_q", session.b_query, model.b_query), ("b_k", session.b_key, model.b_key),
        ("b_v", session.b_value, model.b_value), ("b_o", session.b_out, model.b_out)) if not _bias_same(a, b)]
    qk_changed = session.qk_norm is not None and not (
        _same(session.qk_norm.query_weight, model.qk_norm.query_weight)
        and _same(session.qk_norm.key_weight, model.qk_norm.key_weight))
    norm_changed = session.norm is not None and not (
        _same(session.norm.weight, model.norm.weight) and _bias_same(session.norm.bias, model.norm.bias))
    table_changed = (session.positions is not None and session.positions.kind == "learned"
                     and not _same(session.positions.table[:model.n], model.positions.table[:model.n]))
    input_changed = not _same(session.embeddings, model.embeddings)
    if {"W_q", "W_k", "W_v", "W_o"} <= set(changed) and input_changed:
        raise ModelError(f"the session is not layer {layer} of {label}: its input and all its weights differ from the layer's")

    projections = {}
    edited = {c[2] for c in changed if c[2] in "qkv"}
    if edited:
        projections.update(_qkv(kind, layer, edited, session, weights))
    if "W_o" in changed or "b_o" in changed:
        projections.update(_out(kind, layer, session, d))
    local = dict(projections)
    fold = dict(projections)
    if norm_changed and not (kind == "bert" and layer == 0):
        name = {"gpt2": f"h.{layer}.ln_1", "llama": f"layers.{layer}.input_layernorm"}[kind]
        local[name + ".weight"] = _f32(session.norm.weight if session.norm.weight is not None else np.ones(d))
        if session.norm.kind == "layer":   # GPT-2's ln_1, GPT-NeoX's input LayerNorm
            local[name + ".bias"] = _f32(session.norm.bias if session.norm.bias is not None else np.zeros(d))
        fold.update({k: v for k, v in local.items() if k.startswith(name)})
    if qk_changed:   # the q_norm/k_norm weights of Qwen3, OLMo 2, Gemma 3 (its 1 + w, as read)
        for side, weight, own in (("q", session.qk_norm.query_weight, model.qk_norm.query_weight),
                                  ("k", session.qk_norm.key_weight, model.qk_norm.key_weight)):
            local[f"layers.{layer}.self_attn.{side}_norm.weight"] = _f32(np.ones_like(own) if weight is None else weight)
        fold.update({k: v for k, v in local.items() if "_norm." in k})
        changed.append("QK-norm")
    unfoldable, what = [], list(changed)
    residual = None
    if input_changed or table_changed or (norm_changed and kind == "bert" and layer == 0):
        residual = _residual(kind, layer, session, model, config)
        if np.array_equal(residual.numpy(), np.asarray(run.layer_inputs[layer], np.float32)):
            residual = None
    if input_changed:
        what.append("E")
        unfoldable.append(f"layer {layer}'s input E was edited: that is the text's activations, not a weight")
    if table_changed:
        what.append("P")
        name = "embeddings.position_embeddings.weight" if kind == "bert" else "wpe.weight"
        table = weights[name].detach().clone()
        from .families import position_ids

        # the rows the text's tokens read (RoBERTa's start at padding_idx + 1)
        table[position_ids(config, run.ids_tensor())] = _f32(session.positions.table[:model.n])
        fold[name] = table
    if norm_changed:
        what.append("norm")
        if kind == "bert" and layer == 0:
            fold["embeddings.LayerNorm.weight"] = _f32(session.norm.weight if session.norm.weight is not None else np.ones(d))
            fold["embeddings.LayerNorm.bias"] = _f32(session.norm.bias if session.norm.bias is not None else np.zeros(d))
    if any(name.endswith(".bias") and name not in weights for name in fold):
        unfoldable.append("the edit gives a bias the model's layer has no place for")
    blocked = scaling = None
    if session.mask != model.mask:
        what.append("mask")
        blocked = torch.from_numpy(np.ascontiguousarray(session.mask.matrix(model.n)))
        unfoldable.append(f"layer {layer}'s mask was changed: a model's mask is not a weight")
    if session.scale != model.scale:
        what.append("scale")
        scaling = float(session.scale.factor(dk))
        unfoldable.append(f"layer {layer}'s scale was changed: a model's scale is not a weight")
    from .forward import LayerChange

    return LayerEdit(layer, LayerChange(weights=local, residual=residual, blocked=blocked, scaling=scaling),
                     fold, tuple(unfoldable), tuple(what))


def _qkv(kind, layer, edited: set, session, weights) -> dict:
    """The model's projections of the ``edited`` ones of "q", "k", "v" (their weights or
    biases changed): GPT-2's fused ``c_attn`` whole; BERT's and Llama's own modules only those
    (an edited W_q of SmolLM2 rebuilt its K and V projections too: copies the model already has)."""
    H, Hkv, dk = session.heads, session.kv_heads, session.d_k
    sides = {"q": (session.w_query, session.b_query, H), "k": (session.w_key, session.b_key, Hkv),
             "v": (session.w_value, session.b_value, Hkv)}
    if kind == "gpt2":
        p = f"h.{layer}.attn.c_attn"
        return {p + ".weight": _f32(np.concatenate([_columns(w) for w, _b, _h in sides.values()], axis=1)),
                p + ".bias": _f32(np.concatenate([_flat(b, h, dk) for _w, b, h in sides.values()]))}
    out = {}
    names = dict(zip("qkv", ("query", "key", "value") if kind == "bert" else ("q_proj", "k_proj", "v_proj")))
    prefix = f"encoder.layer.{layer}.attention.self." if kind == "bert" else f"layers.{layer}.self_attn."
    for side in sorted(edited):
        w, b, heads = sides[side]
        name = prefix + names[side]
        out[f"{name}.weight"] = _f32(_columns(w).T)
        if f"{name}.bias" in weights or (b is not None and np.any(b)):
            out[f"{name}.bias"] = _f32(_flat(b, heads, dk))
    return out


def _out(kind, layer, session, d) -> dict:
    b = np.zeros(d) if session.b_out is None else session.b_out
    if kind == "gpt2":
        return {f"h.{layer}.attn.c_proj.weight": _f32(session.w_out), f"h.{layer}.attn.c_proj.bias": _f32(b)}
    name = f"encoder.layer.{layer}.attention.output.dense" if kind == "bert" else f"layers.{layer}.self_attn.o_proj"
    out = {name + ".weight": _f32(session.w_out.T)}
    if kind == "bert" or session.b_out is not None:
        out[name + ".bias"] = _f32(b)
    return out


def _residual(kind, layer, session, model, config):
    """The residual stream entering the layer, from the session's E (+ P, and at BERT's layer 0
    the embedding LayerNorm), with the model's own float32 operations."""
    import torch.nn.functional as F

    from .families import encoder_eps

    x = _f32(session.embeddings)
    if session.positions is not None and session.positions.kind == "learned":
        x = x + _f32(session.positions.table[:model.n])
    if kind == "bert" and layer == 0:
        norm = session.norm
        d = x.shape[-1]
        x = F.layer_norm(x, (d,), _f32(norm.weight if norm.weight is not None else np.ones(d)),
                         _f32(norm.bias if norm.bias is not None else np.zeros(d)), encoder_eps(config))
    return x
