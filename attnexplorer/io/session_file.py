"""Session files: JSON, version 2 (version 1 still read), checked to the last number before
anything is built.

The format (README, "Session files")::

    {"format": "attnexplorer-session", "version": 2,
     "tokens": ["Life", "is", ...],
     "embeddings": [[0.33, -0.17, -0.30], ...],                 # n rows of d numbers
     "heads": [{"W_q": [[...]], "W_k": [[...]], "W_v": [[...]]}, ...],   # x @ W: d rows each
     "W_o": null,                                               # or (H·d_v) rows of d_out
     "mask": "none" | "causal" | {"window": w} | {"padding": [j, ...]} | {"blocked": [[0, 1, ...], ...]},
     "scale": "inv_sqrt_dk" | "none" | {"temperature": t},
     "preset": null | {"name": "sine", "params": {"tau": 0.02}},
     # version 2 adds the stages of a real head (core/stages.py), each optional:
     "positions": null | {"kind": "sinusoidal", "base": 10000} | {"kind": "learned", "table": [[...]]}
                | {"kind": "rope", "theta": 10000, "dims": r, "layout": "half" | "interleaved", "offset": 0}
                | {"kind": "alibi", "slopes": null | [s_0, ...]},
     "norm": null | {"kind": "layer", "weight": [...], "bias": [...], "eps": 1e-5} | {"kind": "rms", "weight": [...], "eps": 1e-6},
     # heads[h] may also carry "b_q", "b_k", "b_v" (null or a list); with "kv_heads" given,
     # heads carry only W_q and b_q and kv_heads[g] carries W_k, b_k, W_v, b_v
     "kv_heads": null | [{"W_k": ..., "b_k": ..., "W_v": ..., "b_v": ...}, ...],
     "source": null | {"tokens": [...], "embeddings": [[...]]},
     "b_o": null | [...]}

``tokens``, ``embeddings`` and ``heads`` are required; ``W_o``, ``mask``, ``scale`` and
``preset`` default to null, "none", "inv_sqrt_dk" and null, and the version-2 keys to null.
Any other top-level key is kept in ``Session.extra`` and written back unchanged (the window
keeps its view state there); in a version-1 file that includes the version-2 names, which
version 1 did not know, so a version-1 file means what it always meant.

Loading never executes anything (plain ``json``, no pickle, no eval) and raises nothing but
``SessionError``, whose message starts with the file name and names the exact place:
``session.json: heads[1].W_k has 3 rows, expected 4 (the embedding width)``.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..core.errors import SessionError
from ..core.session import (MAX_DIM, MAX_HEADS, MAX_TOKEN_CHARS, MAX_TOKENS, Mask, PresetRef, Scale, Session,
                             control_character)
from ..core.stages import MAX_OFFSET, Norm, Positions, Source
from .atomic import atomic_write_text

FORMAT = "attnexplorer-session"
VERSION = 2
# Refused before parsing: enough for 4,096 tokens × 1,024 dimensions written out in full,
# small enough that a hostile file cannot make the loader allocate gigabytes.
MAX_FILE_BYTES = 256 * 1024 * 1024
# The deepest nesting allowed inside extra keys and preset parameters (view state is shallow).
MAX_NESTING = 64

KNOWN_KEYS_V1 = ("format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset")
KNOWN_KEYS = KNOWN_KEYS_V1 + ("positions", "norm", "kv_heads", "source", "b_o")


class _NonFinite:
    """What the parser puts where a file says NaN, Infinity or -Infinity (JSON forbids them)."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token


def _fail(source: str, where: str | None, message: str):
    text = f"{where} {message}" if where else message
    err = SessionError(f"{source}: {text}")
    err.where = where
    raise err


def _describe(value: Any) -> str:
    if isinstance(value, _NonFinite):
        return value.token
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value[:40] + ("…" if len(value) > 40 else ""))
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    return repr(value)


def _number(value: Any, source: str, where: str) -> float:
    if type(value) is float:
        if not math.isfinite(value):  # 1e999 parses to inf
            _fail(source, where, f"is {value!r}; every number must be finite")
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            _fail(source, where, "is too large; every number must be finite")
    if isinstance(value, _NonFinite):
        _fail(source, where, f"is {value.token}; every number must be finite")
    _fail(source, where, f"is {_describe(value)}, expected a number")


def _matrix(value: Any, source: str, where: str, rows: int | None, rows_why: str,
            cols: int | None, cols_why: str, max_rows: int, bits: bool = False) -> np.ndarray:
    """A checked 2-D float64 array from a list of equal-length lists of finite numbers.

    ``rows``/``cols`` are the expected sizes (None: any, within 1..max_rows / 1..MAX_DIM);
    the ``*_why`` strings explain where the expectation comes from. With ``bits`` every
    entry must be 0, 1, true or false.
    """
    if not isinstance(value, list):
        _fail(source, where, f"is {_describe(value)}, expected a list of rows")
    if rows is not None and len(value) != rows:
        _fail(source, where, f"has {len(value)} rows, expected {rows} ({rows_why})")
    if not 1 <= len(value) <= max_rows:
        _fail(source, where, f"has {len(value)} rows, expected 1..{max_rows}")
    check = _bit if bits else _number
    allowed = {int, bool} if bits else {int, float}
    width = None
    for i, row in enumerate(value):
        if not isinstance(row, list):
            _fail(source, f"{where}[{i}]", f"is {_describe(row)}, expected a list of numbers")
        if width is None:
            width = len(row)
            if cols is not None and width != cols:
                _fail(source, where, f"has {width} columns, expected {cols} ({cols_why})")
            if not 1 <= width <= (max_rows if bits else MAX_DIM):
                _fail(source, where, f"has {width} columns, expected 1..{MAX_DIM}")
        elif len(row) != width:
            _fail(source, f"{where}[{i}]", f"has {len(row)} numbers, expected {width} (like row 0)")
        # Fast path: a row of the right Python types is checked by numpy below; anything
        # else is looked at one entry at a time so that the message names the entry.
        if not set(map(type, row)) <= allowed:
            for j, v in enumerate(row):
                check(v, source, f"{where}[{i}][{j}]")
    try:
        a = np.array(value, dtype=np.float64)
        good = np.isin(a, (0.0, 1.0)) if bits else np.isfinite(a)
    except OverflowError:  # an integer literal beyond float64
        a, good = None, None
    if a is None or not good.all():
        for i, row in enumerate(value):
            for j, v in enumerate(row):
                check(v, source, f"{where}[{i}][{j}]")
    return a


def _bit(value: Any, source: str, where: str) -> float:
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return float(value)
    _fail(source, where, f"is {_describe(value)}, expected 0 or 1")


def _text(value: Any, source: str, where: str, what: str = "a string") -> str:
    if not isinstance(value, str):
        _fail(source, where, f"is {_describe(value)}, expected {what}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from an escape like \ud800
        _fail(source, where, "holds an unpaired surrogate character, which is not text")
    return value


def _whole(value: Any, source: str, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        _fail(source, where, f"is {_describe(value)}, expected a whole number")
    if not lo <= value <= hi:
        _fail(source, where, f"is {value}, expected {lo}..{hi}")
    return value


def _path_text(path) -> str:
    """A lazy path ``(parent, key)`` as text: ``view.rows[3].name``."""
    parts = []
    while isinstance(path, tuple):
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return path + "".join(reversed(parts))


def _check_leaf(v: Any, source: str, path) -> None:
    if isinstance(v, _NonFinite):
        _fail(source, _path_text(path), f"is {v.token}; every number must be finite")
    if type(v) is float and not math.isfinite(v):
        _fail(source, _path_text(path), f"is {v!r}; every number must be finite")
    if isinstance(v, str):
        if not v.isascii():
            _text(v, source, _path_text(path))
    elif v is not None and not isinstance(v, (bool, int, float)):
        _fail(source, _path_text(path), f"is a Python {type(v).__name__}, which a session file cannot hold")


_PLAIN_SCALARS = frozenset((int, bool, type(None)))


def _check_plain(value: Any, source: str, where: str) -> None:
    """Extra keys and preset params: JSON values, finite, at most MAX_NESTING deep.

    Iterative, and cheap per element: a file may hold millions of numbers under an extra key,
    so a path is made only for a container or for the element that fails (a string per
    element took gigabytes).
    """
    stack = [(value, where, 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, dict):
            for key in v:
                if not isinstance(key, str):
                    _fail(source, _path_text(path), f"has a key {key!r} that is not a string")
                if not key.isascii():
                    _text(key, source, _path_text(path))
            items = v.items()
        elif isinstance(v, (list, tuple)):
            items = enumerate(v)
        else:
            _check_leaf(v, source, path)
            continue
        if v and depth >= MAX_NESTING:
            first = next(iter(v)) if isinstance(v, dict) else 0
            _fail(source, _path_text((path, first)), f"nests deeper than {MAX_NESTING} levels")
        for key, item in items:
            kind = type(item)
            if kind in _PLAIN_SCALARS or (kind is float and math.isfinite(item)):
                continue
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, (path, key), depth + 1))
            else:
                _check_leaf(item, source, (path, key))


def _mask(value: Any, n: int, source: str, n_k: int | None = None) -> Mask:
    """The mask, checked against n queries and n_k keys (a source's length; None: n)."""
    keys, key_why = (n, "token") if n_k is None else (n_k, "source token")
    if isinstance(value, str):
        if value in ("none", "causal"):
            return Mask(value)
        _fail(source, "mask", f"is {_describe(value)}, expected \"none\", \"causal\" or an object "
              "with \"window\", \"padding\" or \"blocked\"")
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("window", "padding", "blocked"):
        got = f"an object with keys {sorted(value)}" if isinstance(value, dict) else _describe(value)
        _fail(source, "mask", f"is {got}, expected \"none\", \"causal\", {{\"window\": w}}, "
              "{\"padding\": [j, ...]} or {\"blocked\": [[0 or 1, ...], ...]}")
    kind, arg = next(iter(value.items()))
    if kind == "window":
        return Mask("window", window=_whole(arg, source, "mask.window", 1, MAX_TOKENS))
    if kind == "padding":
        if not isinstance(arg, list):
            _fail(source, "mask.padding", f"is {_describe(arg)}, expected a list of token positions")
        return Mask("padding", padding=tuple(_whole(j, source, f"mask.padding[{i}]", 0, keys - 1) for i, j in enumerate(arg)))
    blocked = _matrix(arg, source, "mask.blocked", n, "one row per token", keys, f"one column per {key_why}",
                      MAX_TOKENS, bits=True)
    return Mask("custom", blocked=blocked.astype(bool))


def _scale(value: Any, source: str) -> Scale:
    if value in ("inv_sqrt_dk", "none") and isinstance(value, str):
        return Scale(value)
    if isinstance(value, dict) and list(value) == ["temperature"]:
        t = _number(value["temperature"], source, "scale.temperature")
        if t <= 0:
            _fail(source, "scale.temperature", f"is {t!r}, expected a number > 0")
        return Scale("temperature", t)
    _fail(source, "scale", f"is {_describe(value)}, expected \"inv_sqrt_dk\", \"none\" or {{\"temperature\": t}}")


def _preset(value: Any, source: str) -> PresetRef | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        _fail(source, "preset", f"is {_describe(value)}, expected null or {{\"name\": ..., \"params\": {{...}}}}")
    unknown = sorted(set(value) - {"name", "params"})
    if unknown:
        _fail(source, "preset", f"has an unknown key {unknown[0]!r} (expected \"name\" and \"params\")")
    name = _text(value.get("name"), source, "preset.name", "the preset's name")
    if not name:
        _fail(source, "preset.name", "is empty, expected the preset's name")
    params = value.get("params", {})
    if not isinstance(params, dict):
        _fail(source, "preset.params", f"is {_describe(params)}, expected an object")
    _check_plain(params, source, "preset.params")
    try:  # a known preset's parameters are checked against its sliders' bounds
        return PresetRef(name, dict(params))
    except SessionError as err:
        _fail(source, err.where, str(err).removeprefix(f"{err.where}: "))


def session_from_dict(obj: Any, source: str = "session") -> Session:
    """Build a Session from a parsed session file, checking everything first.

    Raises ``SessionError`` (message ``"{source}: {where} {what is wrong}"``, ``err.where`` the
    path such as ``heads[1].W_k``) for anything malformed, out of bounds or of a newer version.
    """
    if not isinstance(obj, dict):
        _fail(source, None, f"the top level is {_describe(obj)}, expected an object (a session file)")
    if obj.get("format") != FORMAT:
        if "format" not in obj:
            _fail(source, None, f"is not an attnexplorer session file (no \"format\": \"{FORMAT}\")")
        _fail(source, "format", f"is {_describe(obj['format'])}, expected \"{FORMAT}\"")
    version = obj.get("version")
    if type(version) is not int:
        _fail(source, "version", f"is {_describe(version)}, expected a whole number (this attnexplorer reads version {VERSION})")
    if version > VERSION:
        _fail(source, None, f"written by a newer attnexplorer (version {version}); this one reads version {VERSION}")
    if version < 1:
        _fail(source, "version", f"is {version}, which no attnexplorer wrote; this one reads version {VERSION}")
    for key in ("tokens", "embeddings", "heads"):
        if key not in obj:
            _fail(source, None, f"has no \"{key}\"")

    tokens = _tokens(obj["tokens"], source, "tokens")
    n = len(tokens)
    x = _matrix(obj["embeddings"], source, "embeddings", n, "one per token", None, "", MAX_TOKENS)
    d = x.shape[1]
    v2 = version >= 2
    src = _source(obj.get("source"), source) if v2 else None
    kv = obj.get("kv_heads") if v2 else None
    wq, bq, wk, bk, wv, bv = _heads(obj["heads"], kv, d, src, source, v2)

    h, d_v = len(wq), wv[0].shape[1]
    w_out = obj.get("W_o")
    if w_out is not None:
        w_out = _matrix(w_out, source, "W_o", h * d_v, "heads × d_v", None, "", h * d_v)
    b_out = None
    if v2 and obj.get("b_o") is not None:
        if w_out is None:
            _fail(source, "b_o", "is given, but there is no W_o for it to follow")
        b_out = _vector(obj["b_o"], source, "b_o", w_out.shape[1], "d_out")

    mask = _mask(obj.get("mask", "none"), n, source, None if src is None else src.n)
    scale = _scale(obj.get("scale", "inv_sqrt_dk"), source)
    preset = _preset(obj.get("preset"), source)
    norm = _norm(obj.get("norm"), d, source) if v2 else None
    positions = _positions(obj.get("positions"), source, wq[0].shape[1]) if v2 else None

    known = KNOWN_KEYS if v2 else KNOWN_KEYS_V1
    extra = {k: v for k, v in obj.items() if k not in known}
    for key, value in extra.items():
        _check_plain(value, source, key)

    def stacked(parts):
        return None if all(b is None for b in parts) else np.stack(
            [np.zeros(parts_width(parts)) if b is None else b for b in parts])

    def parts_width(parts):
        return next(b.shape[0] for b in parts if b is not None)

    try:
        return Session(tokens=tuple(tokens), embeddings=x, w_query=np.stack(wq), w_key=np.stack(wk),
                       w_value=np.stack(wv), w_out=w_out, mask=mask, scale=scale, preset=preset, extra=extra,
                       b_query=stacked(bq), b_key=stacked(bk), b_value=stacked(bv), b_out=b_out,
                       norm=norm, positions=positions, source=src)
    except SessionError as err:
        # What depends on several fields (positions.dims against d_k, the ALiBi slopes against
        # the heads, a causal mask with a source) is checked by Session; say it the file's way.
        where = err.where
        message = str(err)
        if where and message.startswith(f"{where}: "):
            message = message[len(where) + 2:]
        _fail(source, where, message)


def _tokens(tokens: Any, source: str, where: str) -> list[str]:
    if not isinstance(tokens, list):
        _fail(source, where, f"is {_describe(tokens)}, expected a list of strings")
    if not 1 <= len(tokens) <= MAX_TOKENS:
        _fail(source, where, f"has {len(tokens)} tokens, expected 1..{MAX_TOKENS}")
    for i, t in enumerate(tokens):
        _text(t, source, f"{where}[{i}]")
        if len(t) > MAX_TOKEN_CHARS:
            _fail(source, f"{where}[{i}]", f"is longer than {MAX_TOKEN_CHARS} characters")
        bad = control_character(t)
        if bad is not None:
            _fail(source, f"{where}[{i}]", f"holds the control character U+{ord(bad):04X}; tokens may not hold "
                  "control characters (tabs, line breaks, NUL, escapes)")
    return tokens


def _vector(value: Any, source: str, where: str, size: int | None, size_why: str) -> np.ndarray:
    """A checked 1-D float64 array: a list of ``size`` finite numbers (any 1..MAX_DIM when None)."""
    if not isinstance(value, list):
        _fail(source, where, f"is {_describe(value)}, expected a list of numbers")
    if size is not None and len(value) != size:
        _fail(source, where, f"has {len(value)} numbers, expected {size_why} = {size}")
    if not 1 <= len(value) <= MAX_DIM:
        _fail(source, where, f"has {len(value)} numbers, expected 1..{MAX_DIM}")
    return np.array([_number(v, source, f"{where}[{i}]") for i, v in enumerate(value)], dtype=np.float64)


def _object(value: Any, source: str, where: str, allowed: tuple[str, ...], expected: str) -> dict:
    if not isinstance(value, dict):
        _fail(source, where, f"is {_describe(value)}, expected {expected}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        names = ", ".join(f'"{k}"' for k in allowed)
        _fail(source, where, f"has an unknown key {unknown[0]!r} (expected {names})")
    return value


def _source(value: Any, source: str) -> Source | None:
    if value is None:
        return None
    obj = _object(value, source, "source", ("tokens", "embeddings"),
                  "null or {\"tokens\": [...], \"embeddings\": [[...]]}")
    for key in ("tokens", "embeddings"):
        if key not in obj:
            _fail(source, "source", f"has no \"{key}\"")
    tokens = _tokens(obj["tokens"], source, "source.tokens")
    x = _matrix(obj["embeddings"], source, "source.embeddings", len(tokens), "one per source token", None, "",
                MAX_TOKENS)
    return Source(tuple(tokens), x)


def _heads(heads: Any, kv: Any, d: int, src: Source | None, source: str, v2: bool):
    """Per-head W_q, b_q, and per-K/V-head W_k, b_k, W_v, b_v, each checked where it stands."""
    if not isinstance(heads, list):
        _fail(source, "heads", f"is {_describe(heads)}, expected a list of {{\"W_q\", \"W_k\", \"W_v\"}} objects")
    if not 1 <= len(heads) <= MAX_HEADS:
        _fail(source, "heads", f"has {len(heads)} heads, expected 1..{MAX_HEADS}")
    if kv is not None:
        if not isinstance(kv, list):
            _fail(source, "kv_heads", f"is {_describe(kv)}, expected null or a list of {{\"W_k\", \"W_v\"}} objects")
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
            _fail(source, where, f"is {_describe(head)}, expected an object with {_names(required)}")
        for key in required:
            if key not in head:
                _fail(source, where, f"has no \"{key}\"")
        unknown = sorted(set(head) - set(own))
        if unknown:
            if kv is not None and unknown[0] in ("W_k", "b_k", "W_v", "b_v"):
                _fail(source, where, f"has {unknown[0]!r}, but kv_heads gives the keys and values")
            biases = [k for k in own if k.startswith("b")]
            also = f", and optionally {_names(biases)}" if biases else ""
            _fail(source, where, f"has an unknown key {unknown[0]!r} (expected {_names(required)}{also})")
        q = _matrix(head["W_q"], source, f"{where}.W_q", d, "the embedding width", d_k,
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
        _object(group, source, where, ("W_k", "b_k", "W_v", "b_v"), 'an object with "W_k" and "W_v"')
        for key in ("W_k", "W_v"):
            if key not in group:
                _fail(source, where, f"has no \"{key}\"")
        k, kb, v, vb = _key_value(group, source, where, d_in, d_in_why, d_k, d_v)
        d_v = v.shape[1]
        wk.append(k), bk.append(kb), wv.append(v), bv.append(vb)
    return wq, bq, wk, bk, wv, bv


def _names(keys: list[str]) -> str:
    """'"W_q", "W_k" and "W_v"' for messages."""
    quoted = [f'"{k}"' for k in keys]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _key_value(obj: dict, source: str, where: str, d_in: int, d_in_why: str, d_k: int, d_v: int | None):
    k = _matrix(obj["W_k"], source, f"{where}.W_k", d_in, d_in_why, d_k, "W_q and W_k share d_k", MAX_DIM)
    first = where.split("[")[0] + "[0].W_v"
    v = _matrix(obj["W_v"], source, f"{where}.W_v", d_in, d_in_why, d_v, f"d_v, as in {first}", MAX_DIM)
    return (k, _bias(obj.get("b_k"), source, f"{where}.b_k", d_k, "d_k"), v,
            _bias(obj.get("b_v"), source, f"{where}.b_v", v.shape[1], "d_v"))


def _bias(value: Any, source: str, where: str, size: int, size_name: str) -> np.ndarray | None:
    return None if value is None else _vector(value, source, where, size, size_name)


def _norm(value: Any, d: int, source: str) -> Norm | None:
    if value is None:
        return None
    expected = 'null, {"kind": "layer", "weight": [...], "bias": [...], "eps": e} or {"kind": "rms", "weight": [...], "eps": e}'
    obj = _object(value, source, "norm", ("kind", "weight", "bias", "eps"), expected)
    kind = obj.get("kind")
    if kind not in ("layer", "rms") or not isinstance(kind, str):
        _fail(source, "norm.kind", f"is {_describe(kind)}, expected \"layer\" or \"rms\"")
    if kind == "rms" and obj.get("bias") is not None:
        _fail(source, "norm.bias", "is given, but RMSNorm has no bias")
    weight = obj.get("weight")
    weight = None if weight is None else _vector(weight, source, "norm.weight", d, "d")
    bias = obj.get("bias")
    bias = None if bias is None else _vector(bias, source, "norm.bias", d, "d")
    eps = _number(obj.get("eps", 1e-5 if kind == "layer" else 1e-6), source, "norm.eps")
    if eps <= 0:
        _fail(source, "norm.eps", f"is {eps!r}, expected a number > 0")
    return Norm(kind, weight, bias, eps)


def _positions(value: Any, source: str, d_k: int) -> Positions | None:
    if value is None:
        return None
    keys = {"sinusoidal": ("base",), "learned": ("table",), "rope": ("theta", "dims", "layout", "offset"),
            "alibi": ("slopes",)}
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str) or value.get("kind") not in keys:
        got = _describe(value.get("kind")) if isinstance(value, dict) else _describe(value)
        where = "positions.kind" if isinstance(value, dict) else "positions"
        _fail(source, where, f"is {got}, expected null or an object with \"kind\": \"sinusoidal\", \"learned\", "
              "\"rope\" or \"alibi\"")
    kind = value["kind"]
    obj = _object(value, source, "positions", ("kind",) + keys[kind], f"a {kind} positions object")
    if kind == "sinusoidal":
        return Positions(kind, base=_above_zero(obj.get("base", 10000), source, "positions.base"))
    if kind == "learned":
        if "table" not in obj:
            _fail(source, "positions", "has no \"table\" (one row of d numbers per position)")
        return Positions(kind, table=_matrix(obj["table"], source, "positions.table", None, "", None, "", MAX_TOKENS))
    if kind == "rope":
        dims = obj.get("dims")
        if dims is not None:
            dims = _whole(dims, source, "positions.dims", 2, MAX_DIM)
            if dims % 2 or dims > d_k:  # RoPE turns pairs of the query/key dimensions
                _fail(source, "positions.dims", f"{dims} must be even and at most d_k = {d_k}")
        layout = obj.get("layout", "half")
        if layout not in ("half", "interleaved") or not isinstance(layout, str):
            _fail(source, "positions.layout", f"is {_describe(layout)}, expected \"half\" or \"interleaved\"")
        return Positions(kind, theta=_above_zero(obj.get("theta", 10000), source, "positions.theta"), dims=dims,
                         layout=layout, offset=_whole(obj.get("offset", 0), source, "positions.offset", 0, MAX_OFFSET))
    slopes = obj.get("slopes")
    return Positions(kind, slopes=None if slopes is None else _vector(slopes, source, "positions.slopes", None, ""))


def _above_zero(value: Any, source: str, where: str) -> float:
    v = _number(value, source, where)
    if v <= 0:
        _fail(source, where, f"is {v!r}, expected a number > 0")
    return v


def _plain(value: Any) -> Any:
    """numpy scalars and tuples as JSON-ready Python values (for preset params and extras)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def session_to_dict(session: Session) -> dict:
    """The session as a version-2 JSON-ready dict (floats exact: repr round-trips float64).

    A head's biases are written only when the session has them (an absent bias is zero); the
    top-level version-2 keys are always written, null when the stage is absent. K/V weights go
    under ``kv_heads`` only with grouped-query attention (fewer K/V heads than query heads).

    Keys of ``session.extra`` follow the known keys; an extra key that collides with a known
    one is not written (the session's own value wins).
    """
    mask = session.mask
    if mask.kind in ("none", "causal"):
        mask_obj: Any = mask.kind
    elif mask.kind == "window":
        mask_obj = {"window": int(mask.window)}
    elif mask.kind == "padding":
        mask_obj = {"padding": [int(j) for j in mask.padding]}
    else:
        mask_obj = {"blocked": mask.blocked.astype(int).tolist()}
    scale = session.scale
    scale_obj: Any = {"temperature": scale.temperature} if scale.kind == "temperature" else scale.kind
    out = {
        "format": FORMAT,
        "version": VERSION,
        "tokens": list(session.tokens),
        "embeddings": session.embeddings.tolist(),
        "heads": _heads_out(session),
        "W_o": None if session.w_out is None else session.w_out.tolist(),
        "mask": mask_obj,
        "scale": scale_obj,
        "preset": None if session.preset is None else {"name": session.preset.name,
                                                         "params": _plain(dict(session.preset.params))},
        "positions": _positions_out(session.positions),
        "norm": _norm_out(session.norm),
        "kv_heads": _kv_out(session) if session.kv_heads != session.heads else None,
        "source": None if session.source is None else {"tokens": list(session.source.tokens),
                                                         "embeddings": session.source.embeddings.tolist()},
        "b_o": None if session.b_out is None else session.b_out.tolist(),
    }
    for key, value in session.extra.items():
        if key not in out:
            out[key] = _plain(value)
    return out


def _key_value_out(session: Session, g: int) -> dict:
    out: dict = {"W_k": session.w_key[g].tolist()}
    if session.b_key is not None:
        out["b_k"] = session.b_key[g].tolist()
    out["W_v"] = session.w_value[g].tolist()
    if session.b_value is not None:
        out["b_v"] = session.b_value[g].tolist()
    return out


def _heads_out(session: Session) -> list[dict]:
    grouped = session.kv_heads != session.heads
    heads = []
    for h in range(session.heads):
        head: dict = {"W_q": session.w_query[h].tolist()}
        if session.b_query is not None:
            head["b_q"] = session.b_query[h].tolist()
        if not grouped:
            head.update(_key_value_out(session, h))
        heads.append(head)
    return heads


def _kv_out(session: Session) -> list[dict]:
    return [_key_value_out(session, g) for g in range(session.kv_heads)]


def _norm_out(norm: Norm | None) -> dict | None:
    if norm is None:
        return None
    out: dict = {"kind": norm.kind, "weight": None if norm.weight is None else norm.weight.tolist()}
    if norm.kind == "layer":
        out["bias"] = None if norm.bias is None else norm.bias.tolist()
    out["eps"] = norm.eps
    return out


def _positions_out(p: Positions | None) -> dict | None:
    if p is None:
        return None
    if p.kind == "sinusoidal":
        return {"kind": p.kind, "base": p.base}
    if p.kind == "learned":
        return {"kind": p.kind, "table": p.table.tolist()}
    if p.kind == "rope":
        return {"kind": p.kind, "theta": p.theta, "dims": p.dims, "layout": p.layout, "offset": p.offset}
    return {"kind": p.kind, "slopes": None if p.slopes is None else p.slopes.tolist()}


def _is_matrix(value: Any) -> bool:
    return (isinstance(value, list) and bool(value) and all(isinstance(r, list) for r in value)
            and all(not isinstance(v, (list, dict)) for r in value for v in r))


def _emit(value: Any, indent: str, parts: list[str]) -> None:
    """Readable JSON: one key per line, one matrix row per line, short lists inline."""
    if isinstance(value, dict) and value:
        inner = indent + "  "
        parts.append("{\n")
        for i, (k, v) in enumerate(value.items()):
            parts.append(f"{inner}{json.dumps(k, ensure_ascii=False)}: ")
            _emit(v, inner, parts)
            parts.append(",\n" if i < len(value) - 1 else "\n")
        parts.append(indent + "}")
    elif _is_matrix(value):
        inner = indent + "  "
        rows = [inner + json.dumps(r, ensure_ascii=False, allow_nan=False) for r in value]
        parts.append("[\n" + ",\n".join(rows) + "\n" + indent + "]")
    elif isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
        inner = indent + "  "
        parts.append("[\n")
        for i, v in enumerate(value):
            parts.append(inner)
            _emit(v, inner, parts)
            parts.append(",\n" if i < len(value) - 1 else "\n")
        parts.append(indent + "]")
    else:
        parts.append(json.dumps(value, ensure_ascii=False, allow_nan=False))


def dumps_session(session: Session) -> str:
    """The session file's text (UTF-8 JSON, ending in a newline).

    Raises ``SessionError`` when ``session.extra`` holds something JSON cannot represent.
    """
    # Checked before session_to_dict, whose conversion recurses: data nested 500 deep must be
    # refused here, not end in a RecursionError.
    checks = [(value, key) for key, value in session.extra.items() if key not in KNOWN_KEYS]
    if session.preset is not None:
        checks.append((dict(session.preset.params), "preset.params"))
    for value, where in checks:
        try:
            _check_plain(value, "session", where)
        except SessionError as err:
            refusal = SessionError(f"cannot save: {str(err).removeprefix('session: ')}")
            refusal.where = err.where
            raise refusal from None
    obj = session_to_dict(session)
    for i, t in enumerate(session.tokens):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise SessionError("cannot save: holds an unpaired surrogate character, which is not text",
                               f"tokens[{i}]") from None
    parts: list[str] = []
    _emit(obj, "", parts)
    return "".join(parts) + "\n"


def _reject_constant(token: str) -> _NonFinite:
    return _NonFinite(token)


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list) -> dict:
    """JSON objects with each key once: with a repeated key json keeps the last silently, so
    ``"format"`` written twice could pass for a session file."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def loads_session(text: str | bytes, source: str = "session") -> Session:
    """Parse and check a session file's text; raises only ``SessionError``."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_FILE_BYTES:
            _fail(source, None, f"is {len(text):,} bytes, more than the limit of {MAX_FILE_BYTES:,}")
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as err:
            _fail(source, None, f"is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})")
    elif not isinstance(text, str):
        _fail(source, None, f"expected text, got {type(text).__name__}")
    elif len(text) > MAX_FILE_BYTES:
        _fail(source, None, f"is {len(text):,} characters, more than the limit of {MAX_FILE_BYTES:,}")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as err:
        _fail(source, None, f"has the key {err.key[:40]!r} twice in one object; each key may appear once")
    except json.JSONDecodeError as err:
        truncated = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")
        hint = " (the file looks truncated)" if truncated else ""
        what = err.msg.removesuffix(" at")  # "Unterminated string starting at" reads twice otherwise
        _fail(source, None, f"is not valid JSON: {what} at line {err.lineno}, column {err.colno}{hint}")
    except RecursionError:
        _fail(source, None, "nests too deeply to be a session file")
    except (ValueError, MemoryError) as err:  # e.g. an integer literal too long to convert
        _fail(source, None, f"is not a readable session file: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
    return session_from_dict(obj, source)


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"


def load_session(path) -> Session:
    """Read and check a session file. Errors (``SessionError``) start with ``path`` as given."""
    source = str(path)
    if "\0" in os.fspath(path):
        _fail(source.replace("\0", "\\0"), None, "is not a file name: it holds a NUL character")
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a named pipe would block the read forever
            _fail(source, None, f"is not a regular file ({_file_kind(info.st_mode)}); a session is a .json file")
        size = info.st_size
        if size > MAX_FILE_BYTES:
            _fail(source, None, f"is {size:,} bytes, more than the limit of {MAX_FILE_BYTES:,}")
        with open(path, "rb") as f:
            # Read one byte past the limit: a special file's size may not be known up front.
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        _fail(source, None, f"cannot be read: {err.strerror or err}")
    return loads_session(data, source)


def save_session(session: Session, path) -> None:
    """Write ``session`` to ``path`` atomically (old file intact on failure; ``WriteError``)."""
    atomic_write_text(Path(path), dumps_session(session))
