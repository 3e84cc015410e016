"""Version 2's stages of a real head in a session file, read (checked) and written: the
biases of Q, K, V, grouped K/V heads (``kv_heads``), a cross-attention ``source``, the input
``norm`` and the ``positions`` (sinusoidal, learned, RoPE, ALiBi); and version 3's: ``qk_norm``,
``softcap``, ``sinks`` and RoPE's ``scaling`` and ``angles`` (the scale's ``{"factor": f}`` is
read with the scale, in ``session_file``). The format is described in ``session_file``; what
each stage means in ``core/inputs/stages.py``.

A new stage is read here (``read_<stage>``, called from ``session_file.session_from_dict``
for version ≥ 2) and written here (``<stage>_out``, called from ``session_to_dict``; the
numbers stay numpy arrays there, which ``session_to_dict`` turns into lists or leaves for a
writer that writes them in pieces).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import SessionError
from ..core.inputs.session import MAX_DIM, MAX_HEADS, MAX_TOKENS, Session
from ..core.inputs.stages import MAX_OFFSET, SCALING_FIELDS, Norm, Positions, QKNorm, RopeScaling, Source
from .session_checks import (above_zero, checked_matrix, checked_object, checked_tokens, within_bounds,
                             checked_vector, checked_whole, describe, fail)


def read_source(value: Any, source: str) -> Source | None:
    if value is None:
        return None
    obj = checked_object(value, source, "source", ("tokens", "embeddings"),
                         "null or {\"tokens\": [...], \"embeddings\": [[...]]}")
    for key in ("tokens", "embeddings"):
        if key not in obj:
            fail(source, "source", f"has no \"{key}\"")
    tokens = checked_tokens(obj["tokens"], source, "source.tokens")
    x = checked_matrix(obj["embeddings"], source, "source.embeddings", len(tokens), "one per source token", None, "",
                       MAX_TOKENS)
    return Source(tuple(tokens), x)


def read_heads(heads: Any, kv: Any, d: int, src: Source | None, source: str, v2: bool):
    """Per-head W_q, b_q, and per-K/V-head W_k, b_k, W_v, b_v, each checked where it stands."""
    if not isinstance(heads, list):
        fail(source, "heads", f"is {describe(heads)}, expected a list of {{\"W_q\", \"W_k\", \"W_v\"}} objects")
    if not 1 <= len(heads) <= MAX_HEADS:
        fail(source, "heads", f"has {len(heads)} heads, expected 1..{MAX_HEADS}")
    if kv is not None:
        if not isinstance(kv, list):
            fail(source, "kv_heads", f"is {describe(kv)}, expected null or a list of {{\"W_k\", \"W_v\"}} objects")
        if not kv or len(heads) % len(kv):
            # Written "kv_heads: 3 …" as Session says it: "kv_heads 3" would read as a count.
            err = SessionError(f"{source}: kv_heads: {len(kv)} does not divide {len(heads)} query heads")
            err.where = "kv_heads"
            raise err
    own = ("W_q", "b_q") if kv is not None else ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v")
    if not v2:
        own = ("W_q", "W_k", "W_v")
    required = [k for k in own if k.startswith("W")]
    d_in, d_in_why = (d, "the embedding width") if src is None else (src.d, "the source embedding width")
    wq, bq, wk, bk, wv, bv = [], [], [], [], [], []
    d_k = d_v = None
    for h, head in enumerate(heads):
        where = f"heads[{h}]"
        if not isinstance(head, dict):
            fail(source, where, f"is {describe(head)}, expected an object with {_names(required)}")
        for key in required:
            if key not in head:
                fail(source, where, f"has no \"{key}\"")
        unknown = sorted(set(head) - set(own))
        if unknown:
            if kv is not None and unknown[0] in ("W_k", "b_k", "W_v", "b_v"):
                fail(source, where, f"has {unknown[0]!r}, but kv_heads gives the keys and values")
            biases = [k for k in own if k.startswith("b")]
            also = f", and optionally {_names(biases)}" if biases else ""
            fail(source, where, f"has an unknown key {unknown[0]!r} (expected {_names(required)}{also})")
        q = checked_matrix(head["W_q"], source, f"{where}.W_q", d, "the embedding width", d_k,
                           "d_k, as in heads[0].W_q", MAX_DIM)
        d_k = q.shape[1]
        wq.append(q)
        bq.append(_bias(head.get("b_q"), source, f"{where}.b_q", d_k, "d_k"))
        if kv is None:
            k, kb, v, vb = _key_value(head, source, where, d_in, d_in_why, d_k, d_v)
            d_v = v.shape[1]
            wk.append(k), bk.append(kb), wv.append(v), bv.append(vb)
    for g, group in enumerate(kv or ()):
        where = f"kv_heads[{g}]"
        checked_object(group, source, where, ("W_k", "b_k", "W_v", "b_v"), 'an object with "W_k" and "W_v"')
        for key in ("W_k", "W_v"):
            if key not in group:
                fail(source, where, f"has no \"{key}\"")
        k, kb, v, vb = _key_value(group, source, where, d_in, d_in_why, d_k, d_v)
        d_v = v.shape[1]
        wk.append(k), bk.append(kb), wv.append(v), bv.append(vb)
    return wq, bq, wk, bk, wv, bv


def _names(keys: list[str]) -> str:
    """'"W_q", "W_k" and "W_v"' for messages."""
    quoted = [f'"{k}"' for k in keys]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _key_value(obj: dict, source: str, where: str, d_in: int, d_in_why: str, d_k: int, d_v: int | None):
    k = checked_matrix(obj["W_k"], source, f"{where}.W_k", d_in, d_in_why, d_k, "W_q and W_k share d_k", MAX_DIM)
    first = where.split("[")[0] + "[0].W_v"
    v = checked_matrix(obj["W_v"], source, f"{where}.W_v", d_in, d_in_why, d_v, f"d_v, as in {first}", MAX_DIM)
    return (k, _bias(obj.get("b_k"), source, f"{where}.b_k", d_k, "d_k"), v,
            _bias(obj.get("b_v"), source, f"{where}.b_v", v.shape[1], "d_v"))


def _bias(value: Any, source: str, where: str, size: int, size_name: str) -> np.ndarray | None:
    return None if value is None else checked_vector(value, source, where, size, size_name)


def read_norm(value: Any, d: int, source: str) -> Norm | None:
    if value is None:
        return None
    expected = 'null, {"kind": "layer", "weight": [...], "bias": [...], "eps": e} or {"kind": "rms", "weight": [...], "eps": e}'
    obj = checked_object(value, source, "norm", ("kind", "weight", "bias", "eps"), expected)
    kind = obj.get("kind")
    if kind not in ("layer", "rms") or not isinstance(kind, str):
        fail(source, "norm.kind", f"is {describe(kind)}, expected \"layer\" or \"rms\"")
    if kind == "rms" and obj.get("bias") is not None:
        fail(source, "norm.bias", "is given, but RMSNorm has no bias")
    weight = obj.get("weight")
    weight = None if weight is None else checked_vector(weight, source, "norm.weight", d, "d")
    bias = obj.get("bias")
    bias = None if bias is None else checked_vector(bias, source, "norm.bias", d, "d")
    eps = within_bounds(obj.get("eps", 1e-5 if kind == "layer" else 1e-6), source, "norm.eps")
    return Norm(kind, weight, bias, eps)


def read_positions(value: Any, source: str, d_k: int, v3: bool = False) -> Positions | None:
    if value is None:
        return None
    rope_keys = ("theta", "dims", "layout", "offset") + (("scaling", "angles") if v3 else ())
    keys = {"sinusoidal": ("base",), "learned": ("table",), "rope": rope_keys, "alibi": ("slopes",)}
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str) or value.get("kind") not in keys:
        got = describe(value.get("kind")) if isinstance(value, dict) else describe(value)
        where = "positions.kind" if isinstance(value, dict) else "positions"
        fail(source, where, f"is {got}, expected null or an object with \"kind\": \"sinusoidal\", \"learned\", "
             "\"rope\" or \"alibi\"")
    kind = value["kind"]
    obj = checked_object(value, source, "positions", ("kind",) + keys[kind], f"a {kind} positions object")
    if kind == "sinusoidal":
        return Positions(kind, base=within_bounds(obj.get("base", 10000), source, "positions.base"))
    if kind == "learned":
        if "table" not in obj:
            fail(source, "positions", "has no \"table\" (one row of d numbers per position)")
        return Positions(kind, table=checked_matrix(obj["table"], source, "positions.table", None, "", None, "", MAX_TOKENS))
    if kind == "rope":
        dims = obj.get("dims")
        if dims is not None:
            dims = checked_whole(dims, source, "positions.dims", 2, MAX_DIM)
            if dims % 2 or dims > d_k:  # RoPE turns pairs of the query/key dimensions
                fail(source, "positions.dims", f"{dims} must be even and at most d_k = {d_k}")
        layout = obj.get("layout", "half")
        if layout not in ("half", "interleaved") or not isinstance(layout, str):
            fail(source, "positions.layout", f"is {describe(layout)}, expected \"half\" or \"interleaved\"")
        angles = obj.get("angles", "float64")
        if angles not in ("float64", "float32") or not isinstance(angles, str):
            fail(source, "positions.angles", f"is {describe(angles)}, expected \"float64\" or \"float32\"")
        return Positions(kind, theta=within_bounds(obj.get("theta", 10000), source, "positions.theta"), dims=dims,
                         layout=layout, offset=checked_whole(obj.get("offset", 0), source, "positions.offset", 0, MAX_OFFSET),
                         scaling=_read_scaling(obj.get("scaling"), source), angles=angles)
    slopes = obj.get("slopes")
    return Positions(kind, slopes=None if slopes is None else checked_vector(slopes, source, "positions.slopes", None, ""))


def _read_scaling(value: Any, source: str) -> RopeScaling | None:
    if value is None:
        return None
    where = "positions.scaling"
    kind = value.get("kind") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in SCALING_FIELDS:
        got = describe(kind) if isinstance(value, dict) else describe(value)
        fail(source, f"{where}.kind" if isinstance(value, dict) else where,
             f"is {got}, expected null or an object with \"kind\": \"linear\", \"llama3\" or \"yarn\"")
    fields = SCALING_FIELDS[kind]
    obj = checked_object(value, source, where, ("kind",) + fields, f"a {kind} scaling object")
    required = [f for f in fields if f not in ("attention_factor", "truncate", "beta_fast", "beta_slow")]
    for key in required:
        if key not in obj:
            fail(source, where, f"has no \"{key}\" ({kind} scaling needs {', '.join(required)})")
    args = {}
    for key in fields:
        if key not in obj or (key == "attention_factor" and obj[key] is None):
            continue
        if key == "truncate":
            if not isinstance(obj[key], bool):
                fail(source, f"{where}.truncate", f"is {describe(obj[key])}, expected true or false")
            args[key] = obj[key]
        elif key == "original_max_position_embeddings":
            args[key] = checked_whole(obj[key], source, f"{where}.{key}", 1, 100_000_000)
        else:
            args[key] = above_zero(obj[key], source, f"{where}.{key}")
    try:
        return RopeScaling(kind, **args)
    except SessionError as err:
        fail(source, err.where, str(err).removeprefix(f"{err.where}: "))


def read_qk_norm(value: Any, source: str) -> QKNorm | None:
    if value is None:
        return None
    keys = ("kind", "over", "eps", "query_weight", "key_weight", "query_bias", "key_bias")
    expected = ('null or {"kind": "rms" | "layer", "over": "head" | "all", "eps": e, "query_weight": [...], '
                '"key_weight": [...]}')
    obj = checked_object(value, source, "qk_norm", keys, expected)
    kind = obj.get("kind")
    if kind not in ("layer", "rms") or not isinstance(kind, str):
        fail(source, "qk_norm.kind", f"is {describe(kind)}, expected \"layer\" or \"rms\"")
    over = obj.get("over", "head")
    if over not in ("head", "all") or not isinstance(over, str):
        fail(source, "qk_norm.over", f"is {describe(over)}, expected \"head\" (each head) or \"all\" (the whole projection)")
    vectors = {}
    for key in ("query_weight", "key_weight", "query_bias", "key_bias"):
        if obj.get(key) is None:
            continue
        if kind == "rms" and key.endswith("bias"):
            fail(source, f"qk_norm.{key}", "is given, but RMSNorm has no bias")
        vectors[key] = checked_vector(obj[key], source, f"qk_norm.{key}", None, "", MAX_HEADS * MAX_DIM)
    eps = above_zero(obj.get("eps", 1e-6), source, "qk_norm.eps")   # its bounds: QKNorm's, the norm's
    try:
        return QKNorm(kind, over, eps, **vectors)
    except SessionError as err:
        fail(source, err.where, str(err).removeprefix(f"{err.where}: "))


def read_softcap(value: Any, source: str) -> float | None:
    return None if value is None else above_zero(value, source, "softcap")


def read_sinks(value: Any, source: str, heads: int) -> np.ndarray | None:
    return None if value is None else checked_vector(value, source, "sinks", heads, "one per head, heads")


def qk_norm_out(qk: QKNorm | None) -> dict | None:
    if qk is None:
        return None
    out: dict = {"kind": qk.kind, "over": qk.over, "eps": qk.eps, "query_weight": qk.query_weight,
                 "key_weight": qk.key_weight}
    if qk.kind == "layer":
        out["query_bias"], out["key_bias"] = qk.query_bias, qk.key_bias
    return out


def scaling_out(scaling: RopeScaling | None) -> dict | None:
    if scaling is None:
        return None
    return {"kind": scaling.kind, **{f: getattr(scaling, f) for f in SCALING_FIELDS[scaling.kind]}}


def _key_value_out(session: Session, g: int) -> dict:
    out: dict = {"W_k": session.w_key[g]}
    if session.b_key is not None:
        out["b_k"] = session.b_key[g]
    out["W_v"] = session.w_value[g]
    if session.b_value is not None:
        out["b_v"] = session.b_value[g]
    return out


def heads_out(session: Session) -> list[dict]:
    grouped = session.kv_heads != session.heads
    heads = []
    for h in range(session.heads):
        head: dict = {"W_q": session.w_query[h]}
        if session.b_query is not None:
            head["b_q"] = session.b_query[h]
        if not grouped:
            head.update(_key_value_out(session, h))
        heads.append(head)
    return heads


def kv_heads_out(session: Session) -> list[dict]:
    return [_key_value_out(session, g) for g in range(session.kv_heads)]


def norm_out(norm: Norm | None) -> dict | None:
    if norm is None:
        return None
    out: dict = {"kind": norm.kind, "weight": None if norm.weight is None else norm.weight}
    if norm.kind == "layer":
        out["bias"] = None if norm.bias is None else norm.bias
    out["eps"] = norm.eps
    return out


def positions_out(p: Positions | None) -> dict | None:
    if p is None:
        return None
    if p.kind == "sinusoidal":
        return {"kind": p.kind, "base": p.base}
    if p.kind == "learned":
        return {"kind": p.kind, "table": p.table}
    if p.kind == "rope":
        out = {"kind": p.kind, "theta": p.theta, "dims": p.dims, "layout": p.layout, "offset": p.offset}
        if p.scaling is not None or p.angles != "float64":  # version 3's; a version-2 reader refuses them
            out.update(scaling=scaling_out(p.scaling), angles=p.angles)
        return out
    return {"kind": p.kind, "slopes": None if p.slopes is None else p.slopes}
