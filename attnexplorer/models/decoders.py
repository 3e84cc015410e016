"""The Llama-shaped decoders beside Llama: Phi-3, GPT-NeoX / Pythia, Gemma 1–3, SmolLM3, Qwen3
and OLMo 2 (and Llama, Llama 3, Qwen2 and Mistral themselves), as one forward with a few switches.

Each of these families is a Llama block with something changed, so each is read into Llama's
tensor names (``canonical``, the way DistilBERT is read under BERT's) and its differences
are a ``Recipe`` that ``forward._Llama``, the sessions (``families._llama_parts``), the edits
and the saving read:

- **Phi-3** fuses q|k|v into ``qkv_proj`` (rows H·d, then H_kv·d twice) and gate|up into
  ``gate_up_proj`` (two halves): split into Llama's projections on reading, fused back on
  saving; it may rotate only part of each head (``partial_rotary_factor``) and window every
  layer (``sliding_window``, as Mistral).
- **GPT-NeoX / Pythia** fuses q|k|v per head (``query_key_value``: rows h·3·d_k + 0/1/2·d_k),
  has LayerNorms with biases, biases on every projection, a plain MLP (``dense_h_to_4h``,
  activation, ``dense_4h_to_h``), rotates the first ``rotary_pct`` of each head, and with
  ``use_parallel_residual`` adds the attention and the MLP (its own LayerNorm) of the same
  input: x + attn(ln₁ x) + mlp(ln₂ x).
- **Gemma** multiplies the embeddings by √hidden_size (the LM head reads them unscaled), its
  RMSNorms multiply by 1 + w (read here as the weight 1 + w, computed in float32 as Gemma does,
  so the session's RMSNorm weight is the one the model applies; saved back as w), and gates
  its MLP with the tanh GELU (a config's legacy ``gelu`` means that too).
- **SmolLM3** skips RoPE on the layers ``no_rope_layers`` marks 0 (every fourth): their
  sessions have no positions.
- **Gemma 2** is Gemma with four norms a layer (input; on the attention's output; before and
  on the MLP's output), scores soft-capped (``attn_logit_softcapping``) and scaled by
  ``query_pre_attn_scalar``^−½, local (sliding) layers alternating with global ones, and the
  logits soft-capped (``final_logit_softcapping``); **Gemma 3** adds QK-norm per head (1 + w)
  and turns its local and global layers by RoPEs of their own.
- **Qwen3** normalises each query and key head (``q_norm``/``k_norm``) before RoPE; **OLMo 2**
  normalises the whole q and k projections, has no norm before the attention or the MLP and
  one on each one's output.
- **Llama 3** (and any of them) may scale RoPE (``llama3``, ``linear``, ``yarn``): the
  session's ``positions.scaling``, made by the kernel's ``rope_cos_sin``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ModelError


@dataclass(frozen=True)
class Recipe:
    """What a Llama-shaped family's forward does differently from Llama's. The norms are named
    by the tensors that hold them (None: that norm is absent)."""

    norm: str                        # "rms" or "layer" (GPT-NeoX: LayerNorm with a bias)
    eps: float
    act: str                         # the MLP's activation (forward.ACT's name)
    gated: bool                      # act(gate)·up (Llama) or act(up) (GPT-NeoX)
    parallel: bool                   # GPT-NeoX's parallel residual
    embed_scale: float | None        # Gemma: the embeddings × √hidden_size
    ropes: tuple                     # per layer: the session's RoPE positions, or None (no RoPE there)
    input_norm: str | None = "input_layernorm"            # before the attention (OLMo 2: none)
    attention_out_norm: str | None = None                 # on the attention's output (Gemma 2/3, OLMo 2)
    mlp_in_norm: str | None = "post_attention_layernorm"  # before the MLP (Gemma 2/3: pre_feedforward_layernorm)
    mlp_out_norm: str | None = None                       # on the MLP's output (Gemma 2/3, OLMo 2)
    qk_norm: str | None = None       # "head" (Qwen3, Gemma 3) or "all" (OLMo 2): q_norm/k_norm
    scaling: float | None = None     # the scores' factor; None: head_dim^−½ (Gemma 2/3: query_pre_attn_scalar^−½)
    softcap: float | None = None     # Gemma 2's attn_logit_softcapping
    final_softcap: float | None = None   # Gemma 2's final_logit_softcapping, on the logits


GEMMAS = ("gemma", "gemma2", "gemma3_text")   # RMSNorm × (1 + w), embeddings × √hidden_size


def _gemma(config: Any) -> bool:
    return config.model_type in GEMMAS


def activation(config: Any) -> str:
    if config.model_type in ("gemma2", "gemma3_text"):
        return getattr(config, "hidden_activation", None) or "gelu_pytorch_tanh"
    act = getattr(config, "hidden_act", None)
    if _gemma(config) and act in (None, "gelu"):   # GemmaConfig: a legacy "gelu" means the tanh one
        return "gelu_pytorch_tanh"
    return act


def _cap(config: Any, name: str) -> float | None:
    value = getattr(config, name, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise ModelError(f"the model's {name} is {value!r}; it must be a finite number above 0 or null")
    return float(value)


def recipe(config: Any) -> Recipe:
    from .model_config import head_dim, layer_rope

    kind = config.model_type
    neox = kind == "gpt_neox"
    eps = float(config.layer_norm_eps if neox else config.rms_norm_eps)
    layers = int(config.num_hidden_layers)
    scale = float(config.hidden_size) ** 0.5 if _gemma(config) else None
    ropes = tuple(layer_rope(config, layer) for layer in range(layers))
    base = dict(norm="layer" if neox else "rms", eps=eps, act=activation(config), gated=not neox,
                parallel=neox and bool(getattr(config, "use_parallel_residual", True)), embed_scale=scale, ropes=ropes)
    if kind in ("gemma2", "gemma3_text"):
        scalar = getattr(config, "query_pre_attn_scalar", None)
        if isinstance(scalar, bool) or not isinstance(scalar, (int, float)) or not scalar > 0:
            raise ModelError(f"the model's query_pre_attn_scalar is {scalar!r}; it must be a number above 0")
        factor = None if float(scalar) == float(head_dim(config)) else float(scalar) ** -0.5
        base.update(attention_out_norm="post_attention_layernorm", mlp_in_norm="pre_feedforward_layernorm",
                    mlp_out_norm="post_feedforward_layernorm", scaling=factor,
                    softcap=_cap(config, "attn_logit_softcapping"), final_softcap=_cap(config, "final_logit_softcapping"),
                    qk_norm="head" if kind == "gemma3_text" else None)
    elif kind == "olmo2":
        base.update(input_norm=None, attention_out_norm="post_attention_layernorm", mlp_in_norm=None,
                    mlp_out_norm="post_feedforward_layernorm", qk_norm="all")
    elif kind == "qwen3":
        base.update(qk_norm="head")
    return Recipe(**base)


def layer_tensors(config: Any) -> list[str]:
    """Every tensor of one layer (Llama's names, after ``canonical``) the forward reads."""
    kind = config.model_type
    r = recipe(config)
    attention = ("q_proj", "k_proj", "v_proj", "o_proj")
    neox = kind == "gpt_neox"
    mlp = ("up_proj", "down_proj") if neox else ("gate_proj", "up_proj", "down_proj")
    norms = [n for n in (r.input_norm, r.attention_out_norm, r.mlp_in_norm, r.mlp_out_norm) if n]
    per = [f"{n}.weight" for n in norms]
    per += [f"self_attn.{m}.weight" for m in attention] + [f"mlp.{m}.weight" for m in mlp]
    if r.qk_norm:
        per += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    if neox:
        per += [f"{n}.bias" for n in norms] + [f"mlp.{m}.bias" for m in mlp]
    # Qwen2's q/k/v projections always have biases and its o_proj none, Mistral's and Phi-3's
    # none at all: attention_bias and mlp_bias are the settings of the families that read them
    if kind == "qwen2":
        per += [f"self_attn.{m}.bias" for m in attention[:3]]
    elif kind not in ("mistral", "phi3") and getattr(config, "attention_bias", False):
        per += [f"self_attn.{m}.bias" for m in attention]
    if kind in ("llama", "smollm3") and getattr(config, "mlp_bias", False):
        per += [f"mlp.{m}.bias" for m in mlp]
    return per


# GPT-NeoX's names → Llama's, per layer and at the top (its LM head is embed_out)
_NEOX_LAYER = (("attention.dense.", "self_attn.o_proj."), ("mlp.dense_h_to_4h.", "mlp.up_proj."),
               ("mlp.dense_4h_to_h.", "mlp.down_proj."))
_NEOX_TOP = (("embed_in.", "embed_tokens."), ("final_layer_norm.", "norm."), ("embed_out.", "lm_head."))
# buffers old GPT-NeoX checkpoints saved beside the weights (the causal mask, RoPE's frequencies)
_NEOX_BUFFERS = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq")


def _layer_of(name: str) -> tuple[str, str] | None:
    if not name.startswith("layers."):
        return None
    number, _, rest = name[len("layers."):].partition(".")
    return (number, rest) if number.isdigit() else None


def _sizes(config: Any) -> tuple[int, int, int]:
    from .model_config import head_dim, num_heads

    H = num_heads(config)
    return H, int(getattr(config, "num_key_value_heads", None) or H), head_dim(config)


def canonical(config: Any, state: dict) -> dict:
    """A checkpoint's base-model tensors (and LM head) under Llama's names, with Gemma's norm
    weights as the 1 + w its RMSNorm multiplies by. A tensor the split needs that is missing
    is left missing: ``native.check_tensors`` names it."""
    kind = config.model_type
    if kind not in ("phi3", "gpt_neox") + GEMMAS:
        return state
    H, Hkv, hd = _sizes(config)
    out = {}
    for name, value in state.items():
        where = _layer_of(name)
        if kind in GEMMAS and name.endswith("norm.weight"):
            out[name] = 1.0 + value.float()
        elif kind == "phi3" and where and where[1] in ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"):
            p = f"layers.{where[0]}."
            if where[1].startswith("self_attn"):
                q, k, v = value.split([H * hd, Hkv * hd, Hkv * hd], dim=0)
                out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                            p + "self_attn.v_proj.weight": v})
            else:
                gate, up = value.chunk(2, dim=0)
                out.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up})
        elif kind == "gpt_neox":
            _neox_read(name, value, where, H, hd, out)
        else:
            out[name] = value
    return out


def _neox_read(name, value, where, H, hd, out) -> None:
    if where is None:
        for old, new in _NEOX_TOP:
            if name.startswith(old):
                name = new + name[len(old):]
        out[name] = value
        return
    number, rest = where
    p = f"layers.{number}."
    if rest in _NEOX_BUFFERS:
        return
    if rest.startswith("attention.query_key_value."):
        end = rest.rsplit(".", 1)[1]
        # rows h·3·d_k + (0, 1, 2)·d_k … + d_k: head h's query, key and value
        per_head = value.reshape(H, 3, hd, *value.shape[1:])
        for i, m in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{p}self_attn.{m}.{end}"] = per_head[:, i].reshape(H * hd, *value.shape[1:]).contiguous()
        return
    for old, new in _NEOX_LAYER:
        if rest.startswith(old):
            rest = new + rest[len(old):]
    out[p + rest] = value


def checkpoint(config: Any, state: dict) -> dict:
    """``canonical`` undone: the tensors under the names (and fusions) the family's own
    checkpoint has, so transformers reads a saved model as that family."""
    kind = config.model_type
    if kind not in ("phi3", "gpt_neox") + GEMMAS:
        return state
    import torch

    H, Hkv, hd = _sizes(config)
    out = dict(state)
    if kind in GEMMAS:
        return {k: (v - 1.0 if k.endswith("norm.weight") else v) for k, v in state.items()}
    for layer in range(int(config.num_hidden_layers)):
        p = f"layers.{layer}."
        if kind == "phi3":
            q, k, v = (out.pop(f"{p}self_attn.{m}_proj.weight") for m in "qkv")
            out[p + "self_attn.qkv_proj.weight"] = torch.cat([q, k, v], dim=0)
            gate, up = out.pop(p + "mlp.gate_proj.weight"), out.pop(p + "mlp.up_proj.weight")
            out[p + "mlp.gate_up_proj.weight"] = torch.cat([gate, up], dim=0)
            continue
        for end in ("weight", "bias"):
            parts = [out.pop(f"{p}self_attn.{m}_proj.{end}", None) for m in "qkv"]
            if parts[0] is None:
                continue
            stacked = torch.stack([t.reshape(H, hd, *t.shape[1:]) for t in parts], dim=1)
            out[f"{p}attention.query_key_value.{end}"] = stacked.reshape(3 * H * hd, *parts[0].shape[1:])
    if kind == "gpt_neox":
        renamed = {}
        for name, value in out.items():
            where = _layer_of(name)
            pairs = _NEOX_TOP if where is None else _NEOX_LAYER
            for old, new in pairs:
                target = name if where is None else where[1]
                if target.startswith(new):
                    name = (old + target[len(new):]) if where is None else f"layers.{where[0]}.{old}{target[len(new):]}"
                    break
            renamed[name] = value
        out = renamed
    return out


def own_name(config: Any, name: str) -> str:
    """What the family's own checkpoint calls the tensor that ``canonical`` names ``name``
    (a missing tensor is named as the files would hold it)."""
    kind = config.model_type
    where = _layer_of(name)
    if kind == "phi3" and where:
        rest = where[1]
        for fused, parts in (("self_attn.qkv_proj.", ("self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.")),
                             ("mlp.gate_up_proj.", ("mlp.gate_proj.", "mlp.up_proj."))):
            for part in parts:
                if rest.startswith(part):
                    return f"layers.{where[0]}.{fused}{rest[len(part):]}"
    if kind == "gpt_neox":
        if where is None:
            for old, new in _NEOX_TOP:
                if name.startswith(new):
                    return old + name[len(new):]
            return name
        rest = where[1]
        for m in ("q_proj.", "k_proj.", "v_proj."):
            if rest.startswith("self_attn." + m):
                return f"layers.{where[0]}.attention.query_key_value.{rest[len('self_attn.' + m):]}"
        for old, new in _NEOX_LAYER:
            if rest.startswith(new):
                return f"layers.{where[0]}.{old}{rest[len(new):]}"
    return name


def check_recipe(config: Any) -> None:
    """ModelError for what these families' configs may ask that the forward does not do."""
    kind = config.model_type
    if kind in GEMMAS and getattr(config, "use_bidirectional_attention", False):
        raise ModelError("this Gemma attends both ways (use_bidirectional_attention); only causal decoders are supported")
    recipe(config)   # its caps and query scale, checked
    if kind == "smollm3":
        flags = getattr(config, "no_rope_layers", None)
        layers = int(config.num_hidden_layers)
        if flags is not None and (not isinstance(flags, (list, tuple)) or len(flags) != layers
                                  or any(f not in (0, 1) for f in flags)):
            raise ModelError(f"the model's no_rope_layers must give 1 (RoPE) or 0 (none) for each of its {layers} layers")
    if kind == "gpt_neox" and int(config.hidden_size) % int(config.num_attention_heads):
        raise ModelError("its heads do not divide its hidden size")
