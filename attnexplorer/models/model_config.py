"""What a model's config says about its attention heads and its RoPE, read once for every
module of the models floor (the families' layer import, the decoder recipe, the forward): the
head counts and size, and each layer's RoPE (θ, rotated dimensions, scaling), refusing by name
any setting that would turn the angles in a way attnexplorer does not reproduce."""

from __future__ import annotations

import math
from typing import Any

from .errors import ModelError


def num_heads(config: Any) -> int:
    return int(config.num_attention_heads)


def head_dim(config: Any) -> int:
    explicit = getattr(config, "head_dim", None)
    return int(explicit) if explicit else int(config.hidden_size) // num_heads(config)


# What a config's RoPE table may hold: the type, θ, the rotated fraction and each scaling's
# own settings (core.inputs.stages.RopeScaling's fields). Anything else (an unknown key, a type the
# kernel does not have: dynamic, longrope) changes the angles in a way not reproduced, so it is
# refused by name rather than imported as something else (the numbers would be silently wrong).
_ROPE_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
_SCALING_KEYS = {"linear": {"factor"},
                 "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
                 "yarn": {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor",
                          "truncate"}}
# YaRN's DeepSeek-style settings: they only choose its attention factor, which the session holds
_YARN_MSCALE = {"mscale", "mscale_all_dim"}
# The families whose RoPE rotates only the first partial_rotary_factor of each head (the others'
# transformers code ignores the setting, so a config that sets it is refused there).
_PARTIAL_ROTARY = ("phi3", "gpt_neox")
# Gemma 3's local (sliding) and global layers turn by their own RoPE tables.
_LAYER_ROPES = ("gemma3_text",)


def _rope_dicts(config: Any) -> list[tuple[str, dict]]:
    found = []
    for name in ("rope_parameters", "rope_scaling"):
        value = getattr(config, name, None)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ModelError(f"the model's config has {name} = {value!r}, not a table of RoPE settings")
        found.append((name, value))
    return found


def layer_type(config: Any, layer: int) -> str:
    types = getattr(config, "layer_types", None)
    if types is not None:
        return types[layer]
    if config.model_type in ("gemma2", "gemma3_text"):   # their configs' default patterns
        every = 2 if config.model_type == "gemma2" else int(getattr(config, "sliding_window_pattern", 6) or 6)
        return "sliding_attention" if (layer + 1) % every else "full_attention"
    return "full_attention"


def _rope_table(config: Any, layer: int) -> tuple[str, dict]:
    """(where it was read, the RoPE table that applies to ``layer``): rope_scaling when the
    config has one (transformers lets it replace rope_parameters), else rope_parameters
    (Gemma 3's: its layer type's), else the config's own top-level keys."""
    found = dict(_rope_dicts(config))
    if config.model_type in _LAYER_ROPES:
        kind = layer_type(config, layer)
        params = found.get("rope_parameters") or {}
        if kind in params:   # nested by layer type (transformers 5 writes it so)
            table = params[kind]
            if not isinstance(table, dict):
                raise ModelError(f"the model's rope_parameters.{kind} is {table!r}, not a table of RoPE settings")
            return f"rope_parameters.{kind}", dict(table)
        if kind == "sliding_attention":   # a hub config: rope_local_base_freq, never scaled
            return "rope_local_base_freq", {"rope_type": "default",
                                            "rope_theta": getattr(config, "rope_local_base_freq", None) or 10000.0}
        table = dict(found.get("rope_scaling") or {})
        table.setdefault("rope_theta", getattr(config, "rope_theta", None) or 1_000_000.0)
        return "rope_scaling", table
    for name in ("rope_scaling", "rope_parameters"):
        if found.get(name):   # an empty rope_scaling replaces nothing
            # rope_scaling replaces rope_parameters whole, θ included (then the config's rope_theta
            # or its default), as transformers' convert_rope_params_to_dict does
            return name, dict(found[name])
    return "rope_parameters", {}


def rope_scaling(config: Any, layer: int = 0) -> dict | None:
    """The session's RoPE ``scaling`` of ``layer`` (None: plain RoPE), from the config's
    table; ModelError naming a type or key that is not reproduced."""
    name, values = _rope_table(config, layer)
    kind = values.get("rope_type") or values.get("type") or "default"
    if kind != "default" and kind not in _SCALING_KEYS:
        extra = ", ".join(f"{k} {v}" for k, v in values.items() if k not in _ROPE_KEYS)
        raise ModelError(f"this model scales RoPE ({name}: {kind}{', ' + extra if extra else ''}); attnexplorer "
                         "reproduces plain RoPE and the linear, llama3 and yarn scalings")
    allowed = _ROPE_KEYS | _SCALING_KEYS.get(kind, set()) | (_YARN_MSCALE if kind == "yarn" else set())
    extra = sorted(set(values) - allowed)
    if extra:
        raise ModelError(f"the model's RoPE sets {', '.join(f'{name}.{k}' for k in extra)}, which attnexplorer "
                         f"does not reproduce with {kind} RoPE")
    if kind == "default":
        return None
    needed = ("factor", "low_freq_factor", "high_freq_factor") if kind == "llama3" else ("factor",)
    missing = [k for k in needed if k not in values]
    if missing:   # transformers refuses such a table too
        raise ModelError(f"the model's {kind} RoPE scaling ({name}) gives no {' or '.join(missing)}")
    out = {"kind": kind, **{k: values[k] for k in sorted(_SCALING_KEYS[kind]) if k in values}}
    if "original_max_position_embeddings" in _SCALING_KEYS[kind] and "original_max_position_embeddings" not in out:
        # transformers' default: the config's (Phi-3 style) or the model's length
        out["original_max_position_embeddings"] = int(getattr(config, "original_max_position_embeddings", None)
                                                      or config.max_position_embeddings)
    from ..core.errors import SessionError
    from ..core.inputs.stages import RopeScaling

    try:
        if kind == "yarn" and out.get("attention_factor") is None and _YARN_MSCALE & set(values):
            # the factor transformers works out from mscale / mscale_all_dim, written out
            worked_out = RopeScaling.from_rope_parameters({**values, **out, "rope_type": "yarn"})
            out["attention_factor"] = worked_out.attention_factor
        RopeScaling(**out)
    except (SessionError, TypeError) as err:
        raise ModelError(f"the model's {kind} RoPE scaling ({name}) cannot be reproduced: {err}") from None
    return out


def rope_theta(config: Any, layer: int = 0) -> float:
    """θ of ``layer``'s RoPE; ModelError naming any setting that is not reproduced."""
    rope_scaling(config, layer)
    _name, values = _rope_table(config, layer)
    neox = config.model_type == "gpt_neox"
    theta = values.get("rope_theta")
    if theta is None:
        theta = getattr(config, "rope_theta", None)
    if theta is None and neox:
        theta = getattr(config, "rotary_emb_base", None) or 10000.0
    if theta is None:
        raise ModelError("the model's config gives no RoPE θ (rope_theta)")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 1.0:
        raise ModelError(f"the model's RoPE θ (rope_theta) is {theta!r}; it must be a finite number above 1")
    return float(theta)


def rotary_dims(config: Any) -> int:
    """How many dimensions of each head RoPE turns: all of them, or (Phi-3, GPT-NeoX's
    ``rotary_pct``, 0.25 by default) int(head_dim · partial_rotary_factor), as their code counts."""
    neox = config.model_type == "gpt_neox"
    _name, values = _rope_table(config, 0)
    factor = values.get("partial_rotary_factor")
    for source in ("partial_rotary_factor", "rotary_pct" if neox else None):
        if factor is None and source:
            factor = getattr(config, source, None)
    factor = (0.25 if neox else 1.0) if factor is None else factor
    hd = head_dim(config)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0.0 < factor <= 1.0:
        raise ModelError(f"the model's partial_rotary_factor is {factor!r}; it must be a number in (0, 1]")
    if factor != 1.0 and config.model_type not in _PARTIAL_ROTARY:
        raise ModelError(f"this model rotates only part of each head (partial_rotary_factor {factor}), which its "
                         f"family's code ignores; only full RoPE is supported for {config.model_type}")
    dims = int(hd * factor)
    if dims < 2 or dims % 2:
        raise ModelError(f"RoPE would turn {dims} of each head's {hd} dimensions; it must be an even number")
    return dims


def layer_rope(config: Any, layer: int) -> dict | None:
    """The session's RoPE ``positions`` of ``layer`` (θ, rotated dimensions, scaling, the
    float32 angles transformers makes), or None where the layer has none (SmolLM3's
    ``no_rope_layers`` 0: every fourth layer by default)."""
    if config.model_type == "smollm3":
        flags = getattr(config, "no_rope_layers", None)
        if flags is None:
            interval = int(getattr(config, "no_rope_layer_interval", 4) or 4)
            flags = [int((i + 1) % interval != 0) for i in range(int(config.num_hidden_layers))]
        if not flags[layer]:
            return None
    return {"kind": "rope", "theta": rope_theta(config, layer), "dims": rotary_dims(config), "layout": "half",
            "offset": 0, "scaling": rope_scaling(config, layer), "angles": "float32"}
