"""The supported families (BERT, RoBERTa, DistilBERT, GPT-2, Llama, Qwen2, Mistral, Phi-3, GPT-NeoX,
Gemma, SmolLM3) and how each one's
layer becomes a version-2 session.

Each family says how to find its layers in a transformers model, which module's output is "the
attention before the residual add", and how to turn one layer's weights (read by transformers'
parameter names, from a ``state_dict()`` or straight from the safetensors file) into the
session's ``x @ W`` convention:

- ``nn.Linear`` (BERT, Llama) stores out × in, so ``W = weight.T``; GPT-2's ``Conv1D`` already
  stores in × out and fuses q|k|v in ``c_attn`` (columns 0:d, d:2d, 2d:3d).
- A head's block of columns is ``h·d_k … (h+1)·d_k``, as the models split their projections.
- Llama's K/V projections have ``num_key_value_heads`` heads that query heads share in order
  (query head h uses K/V head h // (H / H_kv)), which is the session's ``kv_heads``.

What the session takes as its embeddings, and why (the pipeline is E → + P → norm → X):

- **BERT, layer 0**: E = word embedding + token-type embedding 0 (the model adds these two
  first), P = the position table's first n rows, norm = the embedding LayerNorm. BERT is
  post-LN: the LayerNorm that produces layer 0's input is the embeddings' own, so E, P and the
  norm are the model's and X is exactly what layer 0's attention reads.
- **BERT, layer L > 0**: E = the hidden state entering layer L (already normalised by layer
  L−1's output LayerNorm), no positions, no norm: X = E.
- **GPT-2, layer 0**: E = token embeddings (wte), P = wpe's first n rows, norm = the block's
  ln_1 (pre-LN). **Layer L > 0**: E = the residual stream entering block L, norm = ln_1.
- **Llama**: E = the residual stream entering layer L, norm = its input RMSNorm, positions =
  RoPE (θ from the config, all head dimensions rotated, the rotate-half layout Hugging Face
  uses, offset 0). GGUF files store q/k rows permuted for llama.cpp's interleaved layout;
  transformers undoes that on load, so the weights here are already in the half layout.
- **Qwen2, Mistral**: as Llama (``Family.kind`` "llama": the same weight names and forward);
  Qwen2's q/k/v biases are always there, and a layer's sliding window (``window_of_layer``)
  is the session's ``{"window": w}`` mask.
- **Phi-3, GPT-NeoX / Pythia, Gemma, SmolLM3**: as Llama, their tensors read under Llama's
  names (``decoders.canonical``: fused projections split, Gemma's norm weights as 1 + w), with
  the norm GPT-NeoX has (a LayerNorm with bias), RoPE over the rotated part of each head only
  (``dims``: Phi-3's ``partial_rotary_factor``, GPT-NeoX's ``rotary_pct``), and no positions
  on SmolLM3's layers without RoPE. E is the stream entering the layer (Gemma's layer 0: the
  embeddings already × √hidden_size, as the model scales them).
- **RoBERTa**: as BERT (kind "bert"), but P = the position rows its ids read, from
  padding_idx + 1 on (``position_ids``).
- **DistilBERT**: as BERT without token types, its tensors renamed to BERT's (``bert_names``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.inputs.limits import MAX_TOKENS
from .errors import ModelError
from .model_config import (head_dim, layer_rope, layer_type, num_heads, rope_scaling,  # noqa: F401 - read from here too
                           rope_theta, rotary_dims)

SUPPORTED = ("BERT-like encoders (bert, roberta, distilbert), GPT-2 (gpt2) and Llama-like decoders (llama, qwen2, "
             "mistral, phi3, gpt_neox, gemma, smollm3, qwen3, olmo2, gemma2, gemma3_text)")


def _np(t: Any) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def _cols(w: np.ndarray, h: int, size: int) -> np.ndarray:
    return w[:, h * size:(h + 1) * size]


def _vec(b: Any, h: int, size: int) -> list | None:
    if b is None:
        return None
    return _np(b)[h * size:(h + 1) * size]


@dataclass(frozen=True)
class Family:
    name: str
    decoder: bool
    layers: Callable[[Any], Any]
    hook_module: Callable[[Any], Any]   # the module whose output is the attention before the residual
    check: Callable[[Any], None]
    parts: Callable[[Any, Any, "object", int], dict]   # (weights by name, config, run, layer) → session parts
    # the layout of its weights and its forward ("bert", "gpt2", "llama"): Qwen2 and Mistral are
    # Llama's with biases or a sliding window, RoBERTa is BERT's with its own position ids
    kind: str = ""

    def __post_init__(self):
        if not self.kind:
            object.__setattr__(self, "kind", self.name)

    @property
    def wordpiece(self) -> bool:
        """Whether its tokenizer is BERT's WordPiece (## continuations, [MASK]) rather than byte-level BPE."""
        return self.name in ("bert", "distilbert")


def max_positions(config: Any) -> int:
    """How many tokens the model reads (RoBERTa's first padding_idx + 1 rows are not text positions)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if value:
            return int(value) - (_padding_idx(config) + 1 if config.model_type == "roberta" else 0)
    raise ModelError("the model's config gives no maximum number of positions")


def _padding_idx(config: Any) -> int:
    return int(getattr(config, "pad_token_id", None) or 0)


def position_ids(config: Any, ids: Any) -> Any:
    """The rows of the position table a text's tokens read (a long tensor): BERT's 0…n−1;
    RoBERTa's count non-padding tokens from padding_idx + 1 and give a padding token
    padding_idx itself (``create_position_ids_from_input_ids``)."""
    import torch

    if config.model_type != "roberta":
        return torch.arange(len(ids))
    pad = _padding_idx(config)
    real = ids.ne(pad).long()
    return torch.cumsum(real, 0) * real + pad


def window_of_layer(config: Any, layer: int) -> int | None:
    """The sliding window of a decoder's layer (a query sees itself and the window − 1 tokens
    before it, transformers' ``sliding_window_overlay``), or None for full causal attention.
    Mistral and Phi-3 window every layer by ``sliding_window`` (null: none); Qwen2 and SmolLM3
    only when ``use_sliding_window`` is on, on the layers ``layer_types`` names (by default
    Qwen2's from ``max_window_layers`` on, SmolLM3's layers without RoPE)."""
    kind = config.model_type
    if kind in ("mistral", "phi3"):
        window = getattr(config, "sliding_window", None)
    elif kind in ("gemma2", "gemma3_text"):   # their sliding layers alternate with global ones
        if layer_type(config, layer) != "sliding_attention":
            return None
        window = getattr(config, "sliding_window", None)
    elif kind in ("qwen2", "qwen3", "smollm3"):
        window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", False) else None
        types = getattr(config, "layer_types", None)
        if types is not None:
            sliding = types[layer] == "sliding_attention"
        elif kind in ("qwen2", "qwen3"):
            sliding = window is not None and layer >= int(getattr(config, "max_window_layers", 28))
        else:
            sliding = window is not None and layer_rope(config, layer) is None
        if not sliding:
            return None
        if window is None:
            raise ModelError(f"layer {layer} is a sliding-window layer (layer_types) but the config sets no window "
                             "(use_sliding_window off or sliding_window null)")
    else:
        return None
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ModelError(f"the model's sliding_window is {window!r}; it must be a whole number of at least 1")
    return window


def _window_check(config: Any) -> None:
    types = getattr(config, "layer_types", None)
    if config.model_type in ("qwen2", "qwen3", "smollm3", "gemma2", "gemma3_text") and types is not None:
        layers = int(config.num_hidden_layers)
        if not isinstance(types, (list, tuple)) or len(types) != layers or \
                any(t not in ("full_attention", "sliding_attention") for t in types):
            raise ModelError(f"the model's layer_types must list 'full_attention' or 'sliding_attention' for each "
                             f"of its {layers} layers")
    for layer in range(int(config.num_hidden_layers)):
        window_of_layer(config, layer)


# ---- BERT ----------------------------------------------------------------------------------

# DistilBERT is BERT without token types under other names: its tensors are renamed to BERT's
# as they are read (``bert_names``) and back when a model is saved (``distilbert_names``), so the
# forward, the sessions, the edits and the saving have one encoder to know.
_DISTIL_LAYER = (("attention.q_lin.", "attention.self.query."), ("attention.k_lin.", "attention.self.key."),
                 ("attention.v_lin.", "attention.self.value."), ("attention.out_lin.", "attention.output.dense."),
                 ("sa_layer_norm.", "attention.output.LayerNorm."), ("ffn.lin1.", "intermediate.dense."),
                 ("ffn.lin2.", "output.dense."), ("output_layer_norm.", "output.LayerNorm."))
_DISTIL_HEAD = (("vocab_transform.", "cls.predictions.transform.dense."),
                ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
                ("vocab_projector.weight", "cls.predictions.decoder.weight"), ("vocab_projector.bias", "cls.predictions.bias"))


def _renamed(name: str, layer_from: str, layer_to: str, pairs, head) -> str:
    for old, new in head:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith(layer_from):
        number, _, rest = name[len(layer_from):].partition(".")
        for old, new in pairs:
            if rest.startswith(old):
                return f"{layer_to}{number}.{new}{rest[len(old):]}"
    return name


def bert_names(state: dict) -> dict:
    """A DistilBERT's tensors (base model names, its masked-LM head at the top) under BERT's names."""
    return {_renamed(k, "transformer.layer.", "encoder.layer.", _DISTIL_LAYER, _DISTIL_HEAD): v for k, v in state.items()}


def distilbert_names(state: dict) -> dict:
    """``bert_names`` undone: what a DistilBERT checkpoint calls each tensor."""
    back = tuple((new, old) for old, new in _DISTIL_LAYER)
    head = tuple((new, old) for old, new in _DISTIL_HEAD)
    return {_renamed(k, "encoder.layer.", "transformer.layer.", back, head): v for k, v in state.items()}


def encoder_eps(config: Any) -> float:
    """The LayerNorms' eps: DistilBERT's are 1e-12, fixed in its code."""
    return 1e-12 if config.model_type == "distilbert" else float(config.layer_norm_eps)


def encoder_act(config: Any) -> str:
    return config.activation if config.model_type == "distilbert" else config.hidden_act


def token_type(w: Any) -> Any:
    """What the token type adds to each embedding: type 0's row, or 0 for DistilBERT (no types)."""
    table = w.get("embeddings.token_type_embeddings.weight")
    return 0.0 if table is None else table[0]

def _bert_check(config: Any) -> None:
    name = "RoBERTa" if config.model_type == "roberta" else "BERT"
    kind = getattr(config, "position_embedding_type", "absolute")
    if kind not in (None, "absolute"):
        raise ModelError(f"this {name} uses {kind} position embeddings; only absolute ones can be expressed")
    if getattr(config, "is_decoder", False):
        raise ModelError(f"this {name} is configured as a decoder; only {name} encoders are supported")


def _bert_parts(w: Any, config: Any, run: Any, layer: int) -> dict:
    p = f"encoder.layer.{layer}."
    H, dk = num_heads(config), head_dim(config)
    n = len(run.ids)
    if layer == 0:
        ids = run.ids_tensor()
        e = w["embeddings.word_embeddings.weight"][ids] + token_type(w)
        embeddings = _np(e)
        rows = position_ids(config, ids)
        positions = {"kind": "learned", "table": _np(w["embeddings.position_embeddings.weight"][rows])}
        norm = {"kind": "layer", "weight": _np(w["embeddings.LayerNorm.weight"]),
                "bias": _np(w["embeddings.LayerNorm.bias"]), "eps": encoder_eps(config)}
    else:
        embeddings, positions, norm = run.layer_inputs[layer], None, None
    sa = p + "attention.self."
    wq, wk, wv = (_np(w[f"{sa}{m}.weight"]).T for m in ("query", "key", "value"))
    bq, bk, bv = (w.get(f"{sa}{m}.bias") for m in ("query", "key", "value"))
    heads = [{"W_q": _cols(wq, h, dk), "b_q": _vec(bq, h, dk),
              "W_k": _cols(wk, h, dk), "b_k": _vec(bk, h, dk),
              "W_v": _cols(wv, h, dk), "b_v": _vec(bv, h, dk)} for h in range(H)]
    b_o = w.get(p + "attention.output.dense.bias")
    return {"embeddings": embeddings, "positions": positions, "norm": norm, "heads": heads,
            "kv_heads": None, "W_o": _np(w[p + "attention.output.dense.weight"]).T,
            "b_o": _np(b_o) if b_o is not None else None, "mask": "none", "scale": "inv_sqrt_dk"}


# ---- GPT-2 ---------------------------------------------------------------------------------

def _gpt2_check(config: Any) -> None:
    if getattr(config, "add_cross_attention", False):
        raise ModelError("this GPT-2 has cross-attention layers; only self-attention models are supported")


def _gpt2_scale(config: Any, layer: int, dk: int):
    scale = math.sqrt(dk) if getattr(config, "scale_attn_weights", True) else 1.0
    if getattr(config, "scale_attn_by_inverse_layer_idx", False):
        scale *= layer + 1
    if scale == math.sqrt(dk):
        return "inv_sqrt_dk"
    return "none" if scale == 1.0 else {"temperature": scale}


def _gpt2_parts(w: Any, config: Any, run: Any, layer: int) -> dict:
    p = f"h.{layer}."
    H, dk = num_heads(config), head_dim(config)
    d = int(config.hidden_size)
    n = len(run.ids)
    if layer == 0:
        embeddings = _np(w["wte.weight"][run.ids_tensor()])
        positions = {"kind": "learned", "table": _np(w["wpe.weight"][:n])}
    else:
        embeddings, positions = run.layer_inputs[layer], None
    norm = {"kind": "layer", "weight": _np(w[p + "ln_1.weight"]), "bias": _np(w[p + "ln_1.bias"]),
            "eps": float(config.layer_norm_epsilon)}
    cw, cb = _np(w[p + "attn.c_attn.weight"]), _np(w[p + "attn.c_attn.bias"])   # Conv1D: in × out, q|k|v fused
    wq, wk, wv = cw[:, :d], cw[:, d:2 * d], cw[:, 2 * d:]
    bq, bk, bv = cb[:d], cb[d:2 * d], cb[2 * d:]
    heads = [{"W_q": _cols(wq, h, dk), "b_q": bq[h * dk:(h + 1) * dk],
              "W_k": _cols(wk, h, dk), "b_k": bk[h * dk:(h + 1) * dk],
              "W_v": _cols(wv, h, dk), "b_v": bv[h * dk:(h + 1) * dk]} for h in range(H)]
    return {"embeddings": embeddings, "positions": positions, "norm": norm, "heads": heads,
            "kv_heads": None, "W_o": _np(w[p + "attn.c_proj.weight"]), "b_o": _np(w[p + "attn.c_proj.bias"]),
            "mask": "causal", "scale": _gpt2_scale(config, layer, dk)}


# ---- Llama ---------------------------------------------------------------------------------

def _llama_check(config: Any) -> None:
    from .decoders import check_recipe

    check_recipe(config)
    for layer in range(int(config.num_hidden_layers)):
        layer_rope(config, layer)
    if num_heads(config) % int(getattr(config, "num_key_value_heads", None) or num_heads(config)):
        raise ModelError("its key/value heads do not divide its query heads")
    _window_check(config)


def _llama_parts(w: Any, config: Any, run: Any, layer: int) -> dict:
    from .decoders import recipe

    p = f"layers.{layer}."
    H, hd = num_heads(config), head_dim(config)
    Hkv = int(getattr(config, "num_key_value_heads", None) or H)
    r = recipe(config)
    norm = None   # OLMo 2's attention reads the stream itself (its norms come after)
    if r.input_norm:
        norm = {"kind": r.norm, "weight": _np(w[p + r.input_norm + ".weight"]), "eps": r.eps}
        if r.norm == "layer":
            norm["bias"] = _np(w[p + r.input_norm + ".bias"])
    positions = r.ropes[layer]
    at = p + "self_attn."
    wq, wk, wv = (_np(w[f"{at}{m}_proj.weight"]).T for m in ("q", "k", "v"))
    bq, bk, bv = (w.get(f"{at}{m}_proj.bias") for m in ("q", "k", "v"))
    heads = [{"W_q": _cols(wq, h, hd), "b_q": _vec(bq, h, hd)} for h in range(H)]
    kv = [{"W_k": _cols(wk, g, hd), "b_k": _vec(bk, g, hd),
           "W_v": _cols(wv, g, hd), "b_v": _vec(bv, g, hd)} for g in range(Hkv)]
    b_o = w.get(at + "o_proj.bias")
    window = window_of_layer(config, layer)
    if window is not None and window >= MAX_TOKENS:   # no text is that long: the window blocks nothing
        window = None
    # transformers' Llama scales by head_dim ** -0.5: the session's inv_sqrt_dk; GPT-NeoX's K/V
    # heads are its query heads (kv_heads then lists H of them, one each)
    parts = {"embeddings": run.layer_inputs[layer], "positions": positions, "norm": norm, "heads": heads,
             "kv_heads": kv, "W_o": _np(w[at + "o_proj.weight"]).T, "b_o": _np(b_o) if b_o is not None else None,
             "mask": "causal" if window is None else {"window": window},
             "scale": "inv_sqrt_dk" if r.scaling is None else {"factor": r.scaling}}
    if r.qk_norm:   # Qwen3's and Gemma 3's over each head (Gemma 3's weights as 1 + w), OLMo 2's over all
        parts["qk_norm"] = {"kind": "rms", "over": r.qk_norm, "eps": r.eps,
                            "query_weight": _np(w[at + "q_norm.weight"]), "key_weight": _np(w[at + "k_norm.weight"])}
    if r.softcap is not None:
        parts["softcap"] = r.softcap
    return parts


def _encoder(name: str) -> Family:
    return Family(name, False, lambda m: m.encoder.layer, lambda blk: blk.attention.output.dense, _bert_check,
                  _bert_parts, "bert")


_DISTILBERT = Family("distilbert", False, lambda m: m.transformer.layer, lambda blk: blk.attention.out_lin, _bert_check,
                     _bert_parts, "bert")


def _decoder(name: str) -> Family:
    # GPT-NeoX's block calls its attention module ``attention``, the others ``self_attn``
    attention = (lambda blk: blk.attention) if name == "gpt_neox" else (lambda blk: blk.self_attn)
    return Family(name, True, lambda m: m.layers, attention, _llama_check, _llama_parts, "llama")


# Keyed by config.model_type. Qwen2 is Llama with q/k/v biases (always on, none on o_proj) and
# an optional sliding window on some layers; Mistral is Llama with a sliding window on every
# layer; Phi-3, GPT-NeoX, Gemma and SmolLM3 are read under Llama's names with their
# differences in ``decoders.Recipe``; RoBERTa is BERT with position ids from padding_idx + 1 and one token type; DistilBERT
# is BERT without token types, its tensors renamed (``bert_names``).
FAMILIES = {
    "bert": _encoder("bert"),
    "roberta": _encoder("roberta"),
    "distilbert": _DISTILBERT,
    "gpt2": Family("gpt2", True, lambda m: m.h, lambda blk: blk.attn, _gpt2_check, _gpt2_parts),
    "llama": _decoder("llama"),
    "qwen2": _decoder("qwen2"),
    "mistral": _decoder("mistral"),
    "phi3": _decoder("phi3"),
    "gpt_neox": _decoder("gpt_neox"),
    "gemma": _decoder("gemma"),
    "smollm3": _decoder("smollm3"),
    "qwen3": _decoder("qwen3"),
    "olmo2": _decoder("olmo2"),
    "gemma2": _decoder("gemma2"),
    "gemma3_text": _decoder("gemma3_text"),
}


# Model types that are one of the families around something attnexplorer does not read.
_NEAR = {"gemma3": "Gemma 3 with its vision tower, as a Gemma 3 GGUF reads; a text-only Gemma 3 says gemma3_text",
         "qwen2_moe": "Qwen2 with mixture-of-experts layers", "qwen3_moe": "Qwen3 with mixture-of-experts layers"}


def unsupported(kind: Any) -> str:
    """Why ``model_type`` ``kind`` is refused, naming the families that open."""
    near = f" ({_NEAR[kind]})" if kind in _NEAR else ""
    return f"model type {kind!r} is not supported{near}: attnexplorer opens {SUPPORTED}"


def family_for(config: Any) -> Family:
    """The family of a transformers config, or ModelError naming the supported ones."""
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        raise ModelError(unsupported(kind))
    family = FAMILIES[kind]
    family.check(config)
    return family
