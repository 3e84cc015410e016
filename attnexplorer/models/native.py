"""Read a Hugging Face model folder without transformers: config, weights and tokenizer.

Opening MiniLM through transformers cost about 3 s, most of it importing transformers' modeling
code (which pulls in torch.distributed, torch._dynamo and sympy) before a single weight is
read. Every supported family is small enough to run with attnexplorer's own forward
(``forward.py``; the Llama-shaped ones read under Llama's names, ``decoders.canonical``), so a folder that holds ``config.json``, ``*.safetensors`` and ``tokenizer.json``
is read here directly: the config as plain attributes with transformers' defaults, the weights
by transformers' own parameter names (memory-mapped, float32), the tokenizer with the
``tokenizers`` library set up the way transformers sets it up for that tokenizer class.

Whatever this module cannot vouch for (no safetensors, an activation or tokenizer class it does
not know) raises ``NotNative`` with the reason, and the caller opens the
model through transformers instead: slower, never different. A missing or unexpected tensor is
refused outright (``check_tensors``): transformers would fill it with random numbers. The tests check both routes
against transformers' own ``output_attentions`` on every supported family.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .decoders import canonical
from .errors import wrong_shape
from .families import FAMILIES, bert_names
from .sources import ModelError


class NotNative(Exception):
    """This folder needs transformers to be read faithfully; the message says why."""


# transformers' defaults for the keys the families and the forward read (checked against
# BertConfig(), GPT2Config(), LlamaConfig() of transformers 5.24).
DEFAULTS = {
    "bert": {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "is_decoder": False,
             "add_cross_attention": False, "type_vocab_size": 2, "tie_word_embeddings": True},
    "gpt2": {"activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
             "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "n_inner": None,
             "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "add_cross_attention": False,
             "tie_word_embeddings": True},
    "llama": {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 2048, "attention_bias": False,
              "mlp_bias": False, "rope_theta": 10000.0, "tie_word_embeddings": False},
    # RobertaConfig(), Qwen2Config(), MistralConfig() of transformers 5.24
    "roberta": {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "is_decoder": False,
                "add_cross_attention": False, "type_vocab_size": 2, "tie_word_embeddings": True, "pad_token_id": 1},
    "qwen2": {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
              "max_window_layers": 28},
    "distilbert": {"activation": "gelu", "max_position_embeddings": 512, "tie_word_embeddings": True,
                   "n_layers": 6, "n_heads": 12, "dim": 768, "hidden_dim": 3072, "pad_token_id": 0},
    "mistral": {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096 * 32, "rope_theta": 10000.0,
                "tie_word_embeddings": False, "sliding_window": 4096},
    # Phi3Config(), GPTNeoXConfig(), GemmaConfig(), SmolLM3Config() of transformers 5.24 (their RoPE
    # θ and rotated fraction: families.rope_theta / rotary_dims)
    "phi3": {"hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "rope_theta": 10000.0,
             "tie_word_embeddings": False},
    "gpt_neox": {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "max_position_embeddings": 2048,
                 "tie_word_embeddings": False, "use_parallel_residual": True, "attention_bias": True},
    "gemma": {"hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "max_position_embeddings": 8192,
              "rope_theta": 10000.0, "tie_word_embeddings": True, "head_dim": 256, "attention_bias": False},
    "smollm3": {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 2000000.0,
                "tie_word_embeddings": True, "use_sliding_window": False, "no_rope_layer_interval": 4,
                "attention_bias": False, "mlp_bias": False},
    # Qwen3Config(), Olmo2Config(), Gemma2Config(), Gemma3TextConfig() of transformers 5.24
    "qwen3": {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
              "max_window_layers": 28, "head_dim": 128, "attention_bias": False},
    "olmo2": {"hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "attention_bias": False},
    "gemma2": {"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "max_position_embeddings": 8192,
               "rope_theta": 10000.0, "tie_word_embeddings": True, "head_dim": 256, "attention_bias": False,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "final_logit_softcapping": 30.0,
               "attn_logit_softcapping": 50.0},
    "gemma3_text": {"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "max_position_embeddings": 131072,
                    "tie_word_embeddings": True, "head_dim": 256, "attention_bias": False, "query_pre_attn_scalar": 256,
                    "sliding_window": 4096},
}
# Keys whose null in config.json means "none" (no sliding window), not "transformers' default".
NULLABLE = ("sliding_window", "attn_logit_softcapping", "final_logit_softcapping")
# GPT-2's config names its sizes n_*; transformers reads them under the common names too.
ALIASES = {"gpt2": {"hidden_size": "n_embd", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
                    "max_position_embeddings": "n_positions"},
           "distilbert": {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}}
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")

# Where each family's base model starts in a checkpoint (a task model prefixes it: bert., model.…)
# (by the family's kind: its weights' layout)
MARKERS = {"bert": "embeddings.word_embeddings.weight", "gpt2": "wte.weight", "llama": "embed_tokens.weight",
           "gpt_neox": "embed_in.weight"}   # … and by model_type where it differs from its kind's
# A task model's head, kept under these names beside the base model: the prediction needs it.
HEADS = ("lm_head.", "cls.predictions.", "vocab_transform.", "vocab_layer_norm.", "vocab_projector.",   # … DistilBERT's
         "embed_out.")   # GPT-NeoX's


class ModelConfig:
    """config.json as attributes. A key the file leaves out (or sets to null) that transformers
    would default is given transformers' default; any other missing key is simply absent, so
    ``getattr(config, key, default)`` behaves as it does on a transformers config."""

    def __init__(self, data: dict):
        kind = data.get("model_type")
        values = dict(DEFAULTS.get(kind, {}))
        values.update({k: v for k, v in data.items() if v is not None or k in NULLABLE})
        for common, own in ALIASES.get(kind, {}).items():
            if own in values:
                values[common] = values[own]
        self.__dict__.update(values)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def read_config(folder: Path) -> ModelConfig:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"{folder.name}: cannot read config.json: {err}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{folder.name}: config.json is not a JSON object")
    return ModelConfig(data)


def activation_setting(config: Any) -> tuple[str, Any]:
    """(the config key that names the activation, the activation it names)."""
    from .decoders import activation

    if FAMILIES[config.model_type].kind == "llama":
        key = "hidden_activation" if config.model_type in ("gemma2", "gemma3_text") else "hidden_act"
        return key, activation(config)
    key = {"gpt2": "activation_function", "distilbert": "activation"}.get(config.model_type, "hidden_act")
    return key, getattr(config, key, None)


def check_activation(config: Any, label: str) -> None:
    """ModelError when the config names an activation neither attnexplorer's forward nor
    transformers has (transformers said only ``'bogus'``, a KeyError, as it built the model)."""
    key, act = activation_setting(config)
    if act in ACTIVATIONS:
        return
    from transformers.activations import ACT2FN

    if not isinstance(act, str) or act not in ACT2FN:
        others = sorted(set(ACT2FN) - set(ACTIVATIONS))
        raise ModelError(f"{label}: unknown activation {act!r} (the config's {key}); attnexplorer runs "
                         f"{', '.join(ACTIVATIONS)} (and, through transformers, {', '.join(others)})")


def check_config(config: ModelConfig) -> None:
    """NotNative when the forward here does not implement something this config asks for."""
    _, act = activation_setting(config)
    kind = FAMILIES[config.model_type].kind
    if act not in ACTIVATIONS:
        raise NotNative(f"activation {act!r}")
    if kind == "llama" and int(getattr(config, "pretraining_tp", 1) or 1) != 1:
        raise NotNative("pretraining_tp > 1")


# The config's numbers that the loader, the forward and the sessions count with. transformers'
# own configs refuse a non-int size; here a null hidden_size opened and then crashed the model
# window's title, 0 heads failed deep in torch, and a billion layers hung the open.
_SIZES = ("num_hidden_layers", "num_attention_heads", "hidden_size")
_EPS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")


def check_sizes(config: ModelConfig, label: str) -> None:
    """ModelError naming (as config.json names it) a size that is not a whole number ≥ 1, or a
    norm's eps that is not a finite number (a NaN eps made every prediction NaN)."""
    own = {common: name for common, name in ALIASES.get(config.model_type, {}).items()}
    sizes = _SIZES + (("num_key_value_heads",) if getattr(config, "num_key_value_heads", None) is not None else ())
    for key in sizes:
        value = getattr(config, key, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            said = f" gives no {own.get(key, key)}" if value is None else f"'s {own.get(key, key)} is {value!r}"
            raise ModelError(f"{label}: config.json{said}; it must be a whole number of at least 1")
    for key in _EPS:
        value = getattr(config, key, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):   # its bounds: the session's, at import
            raise ModelError(f"{label}: config.json's {key} is {value!r}; it must be a finite number")


def check_layer_count(config: ModelConfig, weights: dict, label: str) -> None:
    """ModelError when config.json counts more layers than the weights hold, said before the
    list of every missing tensor is made (num_hidden_layers 10⁹ would be billions of names)."""
    kind = FAMILIES[config.model_type].kind
    held = {int(name.split(".")[_LAYER_DEPTH[kind]]) for name in weights
            if _layer_part(kind, name) is not None}
    layers = int(config.num_hidden_layers)
    if layers > len(held):
        key = ALIASES.get(config.model_type, {}).get("num_hidden_layers", "num_hidden_layers")
        raise ModelError(f"{label}: config.json's {key} is {layers:,}, but the weights hold {len(held):,} layers")


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise NotNative("unreadable model.safetensors.index.json") from None
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))


def read_weights(folder: Path, kind: str, model_type: str | None = None) -> dict[str, Any]:
    # ``kind``: the family's kind (``Family.kind``), the layout of its weights
    """The base model's tensors by transformers' names, float32; memory-mapped where they are float32
    already. A task model's LM head (``lm_head.weight``, BERT's ``cls.predictions.*``) is kept under
    its own name; any other task head (a pooler of another prefix, a classifier) is left out."""
    from safetensors import SafetensorError, safe_open

    files = _weight_files(folder)
    if not files:
        raise NotNative("no *.safetensors weights")
    tensors: dict[str, Any] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as fh:
                for key in fh.keys():
                    tensors[key] = fh.get_tensor(key)
        except (OSError, SafetensorError) as err:   # named: a sharded model has several files
            raise ModelError(f"{folder.name}: cannot read the weights in {path.name} (empty, cut short or not "
                             f"safetensors): {err}") from None
    marker = MARKERS.get(model_type, MARKERS[kind])
    prefixes = [k[:-len(marker)] for k in tensors if k.endswith(marker)]
    if not prefixes:
        raise NotNative(f"no {marker} in the weights")
    prefix = min(prefixes, key=len)
    out = {}
    for key, value in tensors.items():
        if key.startswith(HEADS):
            name = key
        elif not key.startswith(prefix):
            continue   # another task head (a classifier, a pooler of another prefix): not the base model
        else:
            name = key[len(prefix):]
        if kind == "bert" and "LayerNorm." in name:   # old BERT checkpoints say gamma/beta
            name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[name] = value if not value.is_floating_point() else value.float()
    return out


def required_weights(config: ModelConfig) -> list[str]:
    """Every tensor the forward reads, so a missing one is found before running (a bias too:
    transformers would fill a missing one with random numbers, different on every open)."""
    kind, layers = FAMILIES[config.model_type].kind, int(config.num_hidden_layers)
    if kind == "bert":
        names = ["embeddings.word_embeddings.weight"]
        if config.model_type != "distilbert":   # DistilBERT has no token types
            names.append("embeddings.token_type_embeddings.weight")
        names += ["embeddings.position_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
        per = [f"{m}.{t}" for m in ("attention.self.query", "attention.self.key", "attention.self.value",
                                    "attention.output.dense", "intermediate.dense", "output.dense")
               for t in ("weight", "bias")]
        per += ["attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
                "output.LayerNorm.weight", "output.LayerNorm.bias"]
        return names + [f"encoder.layer.{i}.{p}" for i in range(layers) for p in per]
    if kind == "gpt2":
        per = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
               "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
               "mlp.c_proj.weight", "mlp.c_proj.bias"]
        return ["wte.weight", "wpe.weight"] + [f"h.{i}.{p}" for i in range(layers) for p in per]
    from .decoders import layer_tensors

    per = layer_tensors(config)
    return ["embed_tokens.weight"] + [f"layers.{i}.{p}" for i in range(layers) for p in per]


# Tensors a base model may hold that the attention never reads, which may be absent: the pooler,
# the final norm (the prediction says when it lacks one),
# buffers older checkpoints saved (position ids, GPT-2's causal mask, Llama's RoPE frequencies).
_UNUSED = {
    "bert": ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"),
    "gpt2": ("ln_f.weight", "ln_f.bias"),
    "llama": ("norm.weight", "norm.bias", "rotary_emb.inv_freq"),
}
_UNUSED_PER_LAYER = {"bert": (), "gpt2": ("attn.bias", "attn.masked_bias"), "llama": ("self_attn.rotary_emb.inv_freq",)}


# where a layer's number sits in its tensors' names: encoder.layer.N…, h.N…, layers.N…
_LAYER_DEPTH = {"bert": 2, "gpt2": 1, "llama": 1}


def _layer_part(kind: str, name: str) -> str | None:
    head = {"bert": "encoder.layer.", "gpt2": "h.", "llama": "layers."}[kind]
    if not name.startswith(head):
        return None
    number, _, rest = name[len(head):].partition(".")
    return rest if number.isdigit() else None


def check_tensors(config: ModelConfig, weights: dict, label: str) -> None:
    """ModelError naming a tensor the model needs that the files lack, or one they hold that
    this config does not have: either way the model would run with numbers nobody chose
    (transformers fills a missing tensor at random; a stray bias would be added here and
    ignored there)."""
    kind = FAMILIES[config.model_type].kind
    required = required_weights(config)
    from .decoders import own_name

    not_numbers = [name for name in required if name in weights and not weights[name].is_floating_point()]
    if not_numbers:   # an integer weight failed deep in torch ("mean(): could not infer output dtype")
        raise ModelError(f"{label}: the weight {own_name(config, not_numbers[0])} holds "
                         f"{str(weights[not_numbers[0]].dtype).replace('torch.', '')} numbers; a model's weights are "
                         "floating point")
    missing = [own_name(config, name) for name in required if name not in weights]
    missing = list(dict.fromkeys(missing))   # Phi-3's q, k and v all come from its one qkv_proj
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelError(f"{label}: the weights lack {missing[0]}{more}; without it the model would run "
                         "with random numbers")
    known = set(required) | set(_UNUSED[kind])
    unexpected = [name for name, value in weights.items() if name not in known and value.is_floating_point()
                  and not name.startswith(HEADS) and _layer_part(kind, name) not in _UNUSED_PER_LAYER[kind]]
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise ModelError(f"{label}: the weights hold {own_name(config, sorted(unexpected)[0])}{more}, which this {config.model_type} model's "
                         "config does not have (a layer or bias it does not use); refusing rather than guessing")


def expected_shapes(config: ModelConfig) -> dict[str, tuple]:
    """The shape the config gives each tensor the forward reads (by its name after ``canonical``);
    None for a size the config does not state. A tensor missing here is not checked."""
    from .model_config import head_dim, num_heads

    kind, d = FAMILIES[config.model_type].kind, int(config.hidden_size)
    vocab, positions = getattr(config, "vocab_size", None), getattr(config, "max_position_embeddings", None)
    if kind == "bert":
        inner = getattr(config, "hidden_dim" if config.model_type == "distilbert" else "intermediate_size", None)
        top = {"embeddings.word_embeddings.weight": (vocab, d), "embeddings.position_embeddings.weight": (positions, d),
               "embeddings.token_type_embeddings.weight": (getattr(config, "type_vocab_size", None), d)}
        per = {f"attention.self.{m}.{t}": shape for m in ("query", "key", "value")
               for t, shape in (("weight", (d, d)), ("bias", (d,)))}
        per.update({"attention.output.dense.weight": (d, d), "intermediate.dense.weight": (inner, d),
                    "intermediate.dense.bias": (inner,), "output.dense.weight": (d, inner)})
        for name in ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"):
            top[name] = (d,)
        for name in ("attention.output.dense.bias", "output.dense.bias", "attention.output.LayerNorm.weight",
                     "attention.output.LayerNorm.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"):
            per[name] = (d,)
        layer = "encoder.layer.{}."
    elif kind == "gpt2":
        inner = getattr(config, "n_inner", None) or 4 * d
        top = {"wte.weight": (vocab, d), "wpe.weight": (positions, d)}
        per = {"attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,), "attn.c_proj.weight": (d, d),
               "mlp.c_fc.weight": (d, inner), "mlp.c_fc.bias": (inner,), "mlp.c_proj.weight": (inner, d)}
        for name in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_proj.bias", "mlp.c_proj.bias"):
            per[name] = (d,)
        layer = "h.{}."
    else:
        heads, size = num_heads(config), head_dim(config)
        kv = int(getattr(config, "num_key_value_heads", None) or heads) * size
        inner = getattr(config, "intermediate_size", None)
        top = {"embed_tokens.weight": (vocab, d)}
        per = {"self_attn.q_proj.weight": (heads * size, d), "self_attn.k_proj.weight": (kv, d),
               "self_attn.v_proj.weight": (kv, d), "self_attn.o_proj.weight": (d, heads * size),
               "self_attn.q_proj.bias": (heads * size,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
               "self_attn.o_proj.bias": (d,), "mlp.down_proj.weight": (d, inner), "mlp.down_proj.bias": (d,)}
        for m in ("gate_proj", "up_proj"):
            per.update({f"mlp.{m}.weight": (inner, d), f"mlp.{m}.bias": (inner,)})
        from .decoders import recipe

        r = recipe(config)
        for norm in (r.input_norm, r.attention_out_norm, r.mlp_in_norm, r.mlp_out_norm):
            if norm:
                per.update({f"{norm}.weight": (d,), f"{norm}.bias": (d,)})
        layer = "layers.{}."
    shapes = dict(top)
    for i in range(int(config.num_hidden_layers)):
        shapes.update({layer.format(i) + name: shape for name, shape in per.items()})
    return shapes


def check_shapes(config: ModelConfig, weights: dict, label: str) -> None:
    """ModelError naming the first tensor whose shape is not the one the config gives it (with
    both shapes): the forward failed on it deep in torch ("the expanded size of the tensor (60)
    must match the existing size (72)"), naming neither the tensor nor the config."""
    from .decoders import own_name
    for name, shape in expected_shapes(config).items():
        tensor = weights.get(name)
        if tensor is None:
            continue
        found = tuple(tensor.shape)
        if len(found) != len(shape) or any(want is not None and int(want) != got for want, got in zip(shape, found)):
            own = own_name(config, name)
            part = f" (its {name.rsplit('.', 2)[-2]} part)" if own != name and own.rsplit(".", 1)[0] != name.rsplit(".", 1)[0] else ""
            raise wrong_shape(label, own + part, found, shape, f"this {config.model_type} model")


class NativeTokenizer:
    """The ``tokenizers`` pipeline transformers would build, without transformers."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self._tokenizer.encode(text, add_special_tokens=True).ids
        return list(ids), [self._tokenizer.id_to_token(i) for i in ids]

    def encode_plain(self, text: str) -> list[int]:
        """The ids of ``text`` alone, no [CLS]/BOS added: how a picked target token is read."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def piece(self, token_id: int) -> str:
        return self._tokenizer.id_to_token(int(token_id)) or ""

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens written out (a generated text as it reads)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def special_ids(self) -> set[int]:
        """The ids of special tokens (BOS, EOS, [CLS], padding…): a random probe leaves them out."""
        return {int(i) for i, token in self._tokenizer.get_added_tokens_decoder().items() if token.special}


def _tokenizer_config(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise NotNative("unreadable tokenizer_config.json") from None
    return data if isinstance(data, dict) else {}


def _token(value: Any, default: str) -> str:
    if isinstance(value, dict):   # an AddedToken written out as an object
        value = value.get("content")
    return str(value) if value else default


def read_tokenizer(folder: Path, kind: str) -> NativeTokenizer:
    """tokenizer.json, set up as transformers 5 sets it up for the tokenizer classes known here.

    transformers rebuilds a BERT tokenizer's normaliser, pre-tokeniser and [CLS]/[SEP] template
    from tokenizer_config.json (``BertTokenizer.__init__``), so that is done here too. A
    byte-level tokenizer saved as ``TokenizersBackend`` / ``PreTrainedTokenizerFast`` is used
    as the file has it, unless the config asks transformers to change its BOS/EOS template.
    Any other class (GPT2Tokenizer, LlamaTokenizer…, which transformers rebuilds its own way)
    is left to transformers.
    """
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise NotNative("no tokenizer.json")
    settings = _tokenizer_config(folder)
    cls = settings.get("tokenizer_class")
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:   # tokenizers raises a bare Exception for a malformed file
        # transformers reads the same file and fails with less to say ("'added_tokens'")
        raise ModelError(f"{folder.name}: tokenizer.json cannot be read: {str(err).strip() or type(err).__name__}") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if kind in ("bert", "distilbert"):
        if cls not in (None, "BertTokenizer", "BertTokenizerFast", "DistilBertTokenizer", "DistilBertTokenizerFast"):
            raise NotNative(f"tokenizer class {cls}")
        cls_token, sep_token = _token(settings.get("cls_token"), "[CLS]"), _token(settings.get("sep_token"), "[SEP]")
        cls_id, sep_id = tokenizer.token_to_id(cls_token), tokenizer.token_to_id(sep_token)
        if cls_id is None or sep_id is None:
            raise NotNative("no [CLS]/[SEP] in the vocabulary")
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
            strip_accents=settings.get("strip_accents"), lowercase=settings.get("do_lower_case", True))
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls_token}:0 $A:0 {sep_token}:0",
            pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
            special_tokens=[(cls_token, cls_id), (sep_token, sep_id)])
        return NativeTokenizer(tokenizer)
    if cls not in (None, "TokenizersBackend", "PreTrainedTokenizerFast"):
        raise NotNative(f"tokenizer class {cls}")
    if "add_bos_token" in settings or "add_eos_token" in settings:
        raise NotNative("tokenizer_config.json sets add_bos_token/add_eos_token")
    return NativeTokenizer(tokenizer)


def open_folder(folder: Path) -> tuple[ModelConfig, dict[str, Any], NativeTokenizer | None]:
    """(config, weights, tokenizer) read without transformers; tokenizer None when only transformers
    can build it faithfully. NotNative when the weights or the forward need transformers."""
    config = read_config(folder)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        raise NotNative(f"model type {kind!r}")   # transformers then names what it is, or refuses it
    check_sizes(config, folder.name)
    check_config(config)
    weights = read_weights(folder, FAMILIES[kind].kind, kind)
    if kind == "distilbert":
        weights = bert_names(weights)
    weights = canonical(config, weights)
    check_layer_count(config, weights, folder.name)
    check_tensors(config, weights, folder.name)
    check_shapes(config, weights, folder.name)
    try:
        tokenizer = read_tokenizer(folder, kind)
    except NotNative:
        tokenizer = None
    return config, weights, tokenizer
