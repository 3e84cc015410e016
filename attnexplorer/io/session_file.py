"""Session files: JSON, version 3 (versions 1 and 2 still read, and written as version 2 when
the session uses no version-3 stage), checked to the last number before anything is built.

The format (README, "Session files")::

    {"format": "attnexplorer-session", "version": 3,
     "tokens": ["Life", "is", ...],
     "embeddings": [[0.33, -0.17, -0.30], ...],                 # n rows of d numbers
     "heads": [{"W_q": [[...]], "W_k": [[...]], "W_v": [[...]]}, ...],   # x @ W: d rows each
     "W_o": null,                                               # or (H·d_v) rows of d_out
     "mask": "none" | "causal" | {"window": w} | {"padding": [j, ...]} | {"blocked": [[0, 1, ...], ...]},
     "scale": "inv_sqrt_dk" | "none" | {"temperature": t},
     "preset": null | {"name": "sine", "params": {"tau": 0.02}},
     # version 2 adds the stages of a real head (core/inputs/stages.py), each optional:
     "positions": null | {"kind": "sinusoidal", "base": 10000} | {"kind": "learned", "table": [[...]]}
                | {"kind": "rope", "theta": 10000, "dims": r, "layout": "half" | "interleaved", "offset": 0}
                | {"kind": "alibi", "slopes": null | [s_0, ...]},
     "norm": null | {"kind": "layer", "weight": [...], "bias": [...], "eps": 1e-5} | {"kind": "rms", "weight": [...], "eps": 1e-6},
     # heads[h] may also carry "b_q", "b_k", "b_v" (null or a list); with "kv_heads" given,
     # heads carry only W_q and b_q and kv_heads[g] carries W_k, b_k, W_v, b_v
     "kv_heads": null | [{"W_k": ..., "b_k": ..., "W_v": ..., "b_v": ...}, ...],
     "source": null | {"tokens": [...], "embeddings": [[...]]},
     "b_o": null | [...],
     # version 3 adds the stages of newer models, each optional:
     #   "scale": {"factor": f} (any multiplier: Gemma's query_pre_attn_scalar^-1/2),
     #   positions rope: "scaling": null | {"kind": "linear", "factor": f}
     #       | {"kind": "llama3", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
     #       | {"kind": "yarn", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
     #          "attention_factor": null | a, "truncate": true},
     #     and "angles": "float64" | "float32" (a model's float32 RoPE angles),
     "qk_norm": null | {"kind": "rms" | "layer", "over": "head" | "all", "eps": 1e-6,
                        "query_weight": [...], "key_weight": [...], "query_bias": ..., "key_bias": ...},
     "softcap": null | c,                                       # scaled scores -> c·tanh(s / c)
     "sinks": null | [s_0, ...]}                                # one logit per head

``tokens``, ``embeddings`` and ``heads`` are required; ``W_o``, ``mask``, ``scale`` and
``preset`` default to null, "none", "inv_sqrt_dk" and null, and the version-2 and -3 keys to
null. Any other top-level key is kept in ``Session.extra`` and written back unchanged (the
window keeps its view state there); in a version-1 file that includes the version-2 names, and
in a version-1 or -2 file the version-3 names, which those versions did not know, so an older
file means what it always meant.

Loading never executes anything (plain ``json``, no pickle, no eval) and raises nothing but
``SessionError``, whose message starts with the file name and names the exact place:
``session.json: heads[1].W_k has 3 rows, expected 4 (the embedding width)``.

This module reads and writes the whole file and the version-1 fields; version 2's stages
(biases, ``kv_heads``, ``source``, ``norm``, ``positions``) are read and written in
``session_stages``, and every value goes through the checks in ``session_checks``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..core.errors import SessionError
from ..core.inputs.presets import preset_ref
from ..core.inputs.session import MAX_TOKENS, Mask, PresetRef, Scale, Session
from .atomic import atomic_write_text
from .json_text import array_json, parse_strict, rows_json
from .session_checks import (NonFinite, above_zero, check_plain, checked_matrix, checked_number, checked_text, checked_tokens,
                             checked_vector, checked_whole, describe, fail)
from .session_checks import MAX_NESTING  # noqa: F401 (part of this module's surface: the limit a file may nest)
from .session_stages import (heads_out, kv_heads_out, norm_out, positions_out, qk_norm_out, read_heads, read_norm,
                             read_positions, read_qk_norm, read_sinks, read_softcap, read_source)

FORMAT = "attnexplorer-session"
VERSION = 3
# Refused before parsing: enough for 4,096 tokens × 1,024 dimensions written out in full,
# small enough that a hostile file cannot make the loader allocate gigabytes.
MAX_FILE_BYTES = 256 * 1024 * 1024

KNOWN_KEYS_V1 = ("format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset")
KNOWN_KEYS_V2 = KNOWN_KEYS_V1 + ("positions", "norm", "kv_heads", "source", "b_o")
KNOWN_KEYS = KNOWN_KEYS_V2 + ("qk_norm", "softcap", "sinks")


def _mask(value: Any, n: int, source: str, n_k: int | None = None) -> Mask:
    """The mask, checked against n queries and n_k keys (a source's length; None: n)."""
    keys, key_why = (n, "token") if n_k is None else (n_k, "source token")
    if isinstance(value, str):
        if value in ("none", "causal"):
            return Mask(value)
        fail(source, "mask", f"is {describe(value)}, expected \"none\", \"causal\" or an object "
             "with \"window\", \"padding\" or \"blocked\"")
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("window", "padding", "blocked"):
        got = f"an object with keys {sorted(value)}" if isinstance(value, dict) else describe(value)
        fail(source, "mask", f"is {got}, expected \"none\", \"causal\", {{\"window\": w}}, "
             "{\"padding\": [j, ...]} or {\"blocked\": [[0 or 1, ...], ...]}")
    kind, arg = next(iter(value.items()))
    if kind == "window":
        return Mask("window", window=checked_whole(arg, source, "mask.window", 1, MAX_TOKENS))
    if kind == "padding":
        if not isinstance(arg, list):
            fail(source, "mask.padding", f"is {describe(arg)}, expected a list of token positions")
        return Mask("padding", padding=tuple(checked_whole(j, source, f"mask.padding[{i}]", 0, keys - 1) for i, j in enumerate(arg)))
    blocked = checked_matrix(arg, source, "mask.blocked", n, "one row per token", keys, f"one column per {key_why}",
                             MAX_TOKENS, bits=True)
    return Mask("custom", blocked=blocked.astype(bool))


def _scale(value: Any, source: str, v3: bool) -> Scale:
    if value in ("inv_sqrt_dk", "none") and isinstance(value, str):
        return Scale(value)
    if isinstance(value, dict) and list(value) == ["temperature"]:
        t = checked_number(value["temperature"], source, "scale.temperature")
        if t <= 0:
            fail(source, "scale.temperature", f"is {t!r}, expected a number > 0")
        return Scale("temperature", t)
    if v3 and isinstance(value, dict) and list(value) == ["factor"]:
        return Scale("factor", multiplier=above_zero(value["factor"], source, "scale.factor"))
    kinds = '"inv_sqrt_dk", "none", {"temperature": t} or {"factor": f}' if v3 else \
        '"inv_sqrt_dk", "none" or {"temperature": t}'
    if not v3 and isinstance(value, dict) and "factor" in value:
        kinds += " (a scale factor needs a version-3 file)"
    fail(source, "scale", f"is {describe(value)}, expected {kinds}")


def _preset(value: Any, source: str) -> PresetRef | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        fail(source, "preset", f"is {describe(value)}, expected null or {{\"name\": ..., \"params\": {{...}}}}")
    unknown = sorted(set(value) - {"name", "params"})
    if unknown:
        fail(source, "preset", f"has an unknown key {unknown[0]!r} (expected \"name\" and \"params\")")
    name = checked_text(value.get("name"), source, "preset.name", "the preset's name")
    if not name:
        fail(source, "preset.name", "is empty, expected the preset's name")
    params = value.get("params", {})
    if not isinstance(params, dict):
        fail(source, "preset.params", f"is {describe(params)}, expected an object")
    check_plain(params, source, "preset.params")
    try:  # a known preset's parameters are checked against its sliders' bounds
        return preset_ref(name, dict(params))
    except SessionError as err:
        fail(source, err.where, str(err).removeprefix(f"{err.where}: "))


def session_from_dict(obj: Any, source: str = "session") -> Session:
    """Build a Session from a parsed session file, checking everything first.

    Where the file has a list of numbers (a matrix or a vector), a float numpy array is taken
    too, checked by the same rules: a caller that builds a session in memory need not write
    it out as lists first.

    Raises ``SessionError`` (message ``"{source}: {where} {what is wrong}"``, ``err.where`` the
    path such as ``heads[1].W_k``) for anything malformed, out of bounds or of a newer version.
    """
    if not isinstance(obj, dict):
        fail(source, None, f"the top level is {describe(obj)}, expected an object (a session file)")
    if obj.get("format") != FORMAT:
        if "format" not in obj:
            fail(source, None, f"is not an attnexplorer session file (no \"format\": \"{FORMAT}\")")
        fail(source, "format", f"is {describe(obj['format'])}, expected \"{FORMAT}\"")
    version = obj.get("version")
    if type(version) is not int:
        fail(source, "version", f"is {describe(version)}, expected a whole number (this attnexplorer reads version {VERSION})")
    if version > VERSION:
        fail(source, None, f"written by a newer attnexplorer (version {version}); this one reads version {VERSION}")
    if version < 1:
        fail(source, "version", f"is {version}, which no attnexplorer wrote; this one reads version {VERSION}")
    for key in ("tokens", "embeddings", "heads"):
        if key not in obj:
            fail(source, None, f"has no \"{key}\"")

    tokens = checked_tokens(obj["tokens"], source, "tokens")
    n = len(tokens)
    x = checked_matrix(obj["embeddings"], source, "embeddings", n, "one per token", None, "", MAX_TOKENS)
    d = x.shape[1]
    v2 = version >= 2
    src = read_source(obj.get("source"), source) if v2 else None
    kv = obj.get("kv_heads") if v2 else None
    wq, bq, wk, bk, wv, bv = read_heads(obj["heads"], kv, d, src, source, v2)

    h, d_v = len(wq), wv[0].shape[1]
    w_out = obj.get("W_o")
    if w_out is not None:
        w_out = checked_matrix(w_out, source, "W_o", h * d_v, "heads × d_v", None, "", h * d_v)
    b_out = None
    if v2 and obj.get("b_o") is not None:
        if w_out is None:
            fail(source, "b_o", "is given, but there is no W_o for it to follow")
        b_out = checked_vector(obj["b_o"], source, "b_o", w_out.shape[1], "d_out")

    mask = _mask(obj.get("mask", "none"), n, source, None if src is None else src.n)
    v3 = version >= 3
    scale = _scale(obj.get("scale", "inv_sqrt_dk"), source, v3)
    preset = _preset(obj.get("preset"), source)
    norm = read_norm(obj.get("norm"), d, source) if v2 else None
    positions = read_positions(obj.get("positions"), source, wq[0].shape[1], v3) if v2 else None
    qk_norm = read_qk_norm(obj.get("qk_norm"), source) if v3 else None
    softcap = read_softcap(obj.get("softcap"), source) if v3 else None
    sinks = read_sinks(obj.get("sinks"), source, h) if v3 else None

    known = KNOWN_KEYS if v3 else KNOWN_KEYS_V2 if v2 else KNOWN_KEYS_V1
    extra = {k: v for k, v in obj.items() if k not in known}
    for key, value in extra.items():
        check_plain(value, source, key)

    def stacked(parts):
        return None if all(b is None for b in parts) else np.stack(
            [np.zeros(parts_width(parts)) if b is None else b for b in parts])

    def parts_width(parts):
        return next(b.shape[0] for b in parts if b is not None)

    try:
        return Session(tokens=tuple(tokens), embeddings=x, w_query=np.stack(wq), w_key=np.stack(wk),
                       w_value=np.stack(wv), w_out=w_out, mask=mask, scale=scale, preset=preset, extra=extra,
                       b_query=stacked(bq), b_key=stacked(bk), b_value=stacked(bv), b_out=b_out,
                       norm=norm, positions=positions, source=src, qk_norm=qk_norm, softcap=softcap, sinks=sinks)
    except SessionError as err:
        # What depends on several fields (positions.dims against d_k, the ALiBi slopes against
        # the heads, a causal mask with a source) is checked by Session; say it the file's way.
        where = err.where
        message = str(err)
        if where and message.startswith(f"{where}: "):
            message = message[len(where) + 2:]
        fail(source, where, message)


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


def session_to_dict(session: Session, *, arrays: bool = False) -> dict:
    """The session as a version-2 or -3 JSON-ready dict (floats exact: repr round-trips float64).

    ``arrays``: every matrix and vector is left a numpy array (float, or 0/1 integers for a
    custom mask) instead of nested lists, for a writer that writes big arrays a piece at a
    time (``io.json_pieces``: a 16,384-token session's recovery file); the rest is the same.

    A head's biases are written only when the session has them (an absent bias is zero); the
    top-level version-2 keys are always written, null when the stage is absent; the version-3
    keys (``qk_norm``, ``softcap``, ``sinks``) only in a version-3 file, which is written only
    when the session uses a version-3 stage (``version_needed``). K/V weights go
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
        mask_obj = {"blocked": mask.blocked.astype(np.uint8)}
    scale = session.scale
    scale_obj: Any = ({"temperature": scale.temperature} if scale.kind == "temperature"
                      else {"factor": scale.multiplier} if scale.kind == "factor" else scale.kind)
    version = version_needed(session)
    out = {
        "format": FORMAT,
        "version": version,
        "tokens": list(session.tokens),
        "embeddings": session.embeddings,
        "heads": heads_out(session),
        "W_o": session.w_out,
        "mask": mask_obj,
        "scale": scale_obj,
        "preset": None if session.preset is None else {"name": session.preset.name,
                                                         "params": _plain(dict(session.preset.params))},
        "positions": positions_out(session.positions),
        "norm": norm_out(session.norm),
        "kv_heads": kv_heads_out(session) if session.kv_heads != session.heads else None,
        "source": None if session.source is None else {"tokens": list(session.source.tokens),
                                                         "embeddings": session.source.embeddings},
        "b_o": session.b_out,
    }
    if version >= 3:
        out.update(qk_norm=qk_norm_out(session.qk_norm), softcap=session.softcap, sinks=session.sinks)
    for key, value in session.extra.items():
        if key not in out:
            out[key] = _plain(value)
    return out if arrays else _plain(out)


def version_needed(session: Session) -> int:
    """The lowest version that holds ``session``: 3 when it uses a stage version 3 added
    (QK-norm, soft-capping, sinks, a scale factor, RoPE scaling or float32 angles), else 2, so
    that a file without them still opens in an attnexplorer that reads version 2."""
    p = session.positions
    new = (session.qk_norm is not None or session.softcap is not None or session.sinks is not None
           or session.scale.kind == "factor" or (p is not None and (p.scaling is not None or p.angles != "float64")))
    return 3 if new else 2


def _is_matrix(value: Any) -> bool:
    return (isinstance(value, list) and bool(value) and all(isinstance(r, list) for r in value)
            and all(not isinstance(v, (list, dict)) for r in value for v in r))


def _emit(value: Any, indent: str, parts: list[str]) -> None:
    """Readable JSON: one key per line, one matrix row per line, short lists inline.

    A numpy array is written by ``json_text`` (a compiled writer, each number exact), a
    matrix one row per line as the lists are."""
    if isinstance(value, np.ndarray):
        parts.append(rows_json(value, indent) if value.ndim == 2 else array_json(value))
    elif isinstance(value, dict) and value:
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
            check_plain(value, "session", where)
        except SessionError as err:
            refusal = SessionError(f"cannot save: {str(err).removeprefix('session: ')}")
            refusal.where = err.where
            raise refusal from None
    if session.preset is not None:
        # A record made by hand (the API) is checked here as on load, so that what is saved
        # opens again.
        try:
            preset_ref(session.preset.name, session.preset.params)
        except SessionError as err:
            refusal = SessionError(f"cannot save: {err}")
            refusal.where = err.where
            raise refusal from None
    obj = session_to_dict(session, arrays=True)
    for i, t in enumerate(session.tokens):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise SessionError("cannot save: holds an unpaired surrogate character, which is not text",
                               f"tokens[{i}]") from None
    parts: list[str] = []
    _emit(obj, "", parts)
    return "".join(parts) + "\n"


def _reject_constant(token: str) -> NonFinite:
    return NonFinite(token)


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


def parse_json(text: str | bytes, source: str, what: str = "session file") -> Any:
    """Parse a file's text as strict JSON (UTF-8, no NaN, each key once, bounded size);
    raises only ``SessionError`` naming ``source`` (lesson files share these rules)."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_FILE_BYTES:
            fail(source, None, f"is {len(text):,} bytes, more than the limit of {MAX_FILE_BYTES:,}")
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as err:
            fail(source, None, f"is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})")
    elif not isinstance(text, str):
        fail(source, None, f"expected text, got {type(text).__name__}")
    elif len(text) > MAX_FILE_BYTES:
        fail(source, None, f"is {len(text):,} characters, more than the limit of {MAX_FILE_BYTES:,}")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return parse_strict(text, lambda t: json.loads(t, parse_constant=_reject_constant,
                                                       object_pairs_hook=_unique_keys))
    except _DuplicateKey as err:
        fail(source, None, f"has the key {err.key[:40]!r} twice in one object; each key may appear once")
    except json.JSONDecodeError as err:
        truncated = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")
        hint = " (the file looks truncated)" if truncated else ""
        what_went = err.msg.removesuffix(" at")  # "Unterminated string starting at" reads twice otherwise
        fail(source, None, f"is not valid JSON: {what_went} at line {err.lineno}, column {err.colno}{hint}")
    except RecursionError:
        fail(source, None, f"nests too deeply to be a {what}")
    except (ValueError, MemoryError) as err:  # e.g. an integer literal too long to convert
        fail(source, None, f"is not a readable {what}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")


def loads_session(text: str | bytes, source: str = "session") -> Session:
    """Parse and check a session file's text; raises only ``SessionError``."""
    return session_from_dict(parse_json(text, source), source)


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


def read_file(path, what: str = "a session is a .json file") -> bytes:
    """A regular file's bytes, at most ``MAX_FILE_BYTES``; ``SessionError`` naming ``path``."""
    if isinstance(path, dict):
        fail("load_session", None, "takes a file path; for a session already read as a dict, use "
                                   "session_from_dict(d)")
    if not isinstance(path, (str, bytes, os.PathLike)):
        fail("load_session", None, f"takes a file path (a str or a Path), got {type(path).__name__}")
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    source = str(path)
    if "\0" in os.fspath(path):
        fail(source.replace("\0", "\\0"), None, "is not a file name: it holds a NUL character")
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a named pipe would block the read forever
            fail(source, None, f"is not a regular file ({_file_kind(info.st_mode)}); {what}")
        size = info.st_size
        if size > MAX_FILE_BYTES:
            fail(source, None, f"is {size:,} bytes, more than the limit of {MAX_FILE_BYTES:,}")
        with open(path, "rb") as f:
            # Read one byte past the limit: a special file's size may not be known up front.
            return f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        fail(source, None, f"cannot be read: {err.strerror or err}")


def load_session(path) -> Session:
    """Read and check a session file. Errors (``SessionError``) start with ``path`` as given."""
    return loads_session(read_file(path), str(path))


def save_session(session: Session, path) -> None:
    """Write ``session`` to ``path`` atomically (old file intact on failure; ``WriteError``)."""
    atomic_write_text(Path(path), dumps_session(session))
