"""Session files: JSON, version 1, checked to the last number before anything is built.

The format (README, "Session files")::

    {"format": "attnexplorer-session", "version": 1,
     "tokens": ["Life", "is", ...],
     "embeddings": [[0.33, -0.17, -0.30], ...],                 # n rows of d numbers
     "heads": [{"W_q": [[...]], "W_k": [[...]], "W_v": [[...]]}, ...],   # x @ W: d rows each
     "W_o": null,                                               # or (H·d_v) rows of d_out
     "mask": "none" | "causal" | {"window": w} | {"padding": [j, ...]} | {"blocked": [[0, 1, ...], ...]},
     "scale": "inv_sqrt_dk" | "none" | {"temperature": t},
     "preset": null | {"name": "sine", "params": {"tau": 0.02}}}

``tokens``, ``embeddings`` and ``heads`` are required; ``W_o``, ``mask``, ``scale`` and
``preset`` default to null, "none", "inv_sqrt_dk" and null. Any other top-level key is kept
in ``Session.extra`` and written back unchanged (the window keeps its view state there).

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
from .atomic import atomic_write_text

FORMAT = "attnexplorer-session"
VERSION = 1
# Refused before parsing: enough for 4,096 tokens × 1,024 dimensions written out in full,
# small enough that a hostile file cannot make the loader allocate gigabytes.
MAX_FILE_BYTES = 256 * 1024 * 1024
# The deepest nesting allowed inside extra keys and preset parameters (view state is shallow).
MAX_NESTING = 64

KNOWN_KEYS = ("format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset")


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


def _mask(value: Any, n: int, source: str) -> Mask:
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
        return Mask("padding", padding=tuple(_whole(j, source, f"mask.padding[{i}]", 0, n - 1) for i, j in enumerate(arg)))
    blocked = _matrix(arg, source, "mask.blocked", n, "one row per token", n, "one column per token",
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

    tokens = obj["tokens"]
    if not isinstance(tokens, list):
        _fail(source, "tokens", f"is {_describe(tokens)}, expected a list of strings")
    if not 1 <= len(tokens) <= MAX_TOKENS:
        _fail(source, "tokens", f"has {len(tokens)} tokens, expected 1..{MAX_TOKENS}")
    for i, t in enumerate(tokens):
        _text(t, source, f"tokens[{i}]")
        if len(t) > MAX_TOKEN_CHARS:
            _fail(source, f"tokens[{i}]", f"is longer than {MAX_TOKEN_CHARS} characters")
        bad = control_character(t)
        if bad is not None:
            _fail(source, f"tokens[{i}]", f"holds the control character U+{ord(bad):04X}; tokens may not hold "
                  "control characters (tabs, line breaks, NUL, escapes)")
    n = len(tokens)

    x = _matrix(obj["embeddings"], source, "embeddings", n, "one per token", None, "", MAX_TOKENS)
    d = x.shape[1]

    heads = obj["heads"]
    if not isinstance(heads, list):
        _fail(source, "heads", f"is {_describe(heads)}, expected a list of {{\"W_q\", \"W_k\", \"W_v\"}} objects")
    if not 1 <= len(heads) <= MAX_HEADS:
        _fail(source, "heads", f"has {len(heads)} heads, expected 1..{MAX_HEADS}")
    wq, wk, wv = [], [], []
    d_k = d_v = None
    for h, head in enumerate(heads):
        where = f"heads[{h}]"
        if not isinstance(head, dict):
            _fail(source, where, f"is {_describe(head)}, expected an object with \"W_q\", \"W_k\" and \"W_v\"")
        for key in ("W_q", "W_k", "W_v"):
            if key not in head:
                _fail(source, where, f"has no \"{key}\"")
        unknown = sorted(set(head) - {"W_q", "W_k", "W_v"})
        if unknown:
            _fail(source, where, f"has an unknown key {unknown[0]!r} (expected \"W_q\", \"W_k\" and \"W_v\")")
        width = "the embedding width"
        q = _matrix(head["W_q"], source, f"{where}.W_q", d, width, d_k,
                    "d_k, as in heads[0].W_q", MAX_DIM)
        k = _matrix(head["W_k"], source, f"{where}.W_k", d, width, q.shape[1],
                    "W_q and W_k share d_k", MAX_DIM)
        v = _matrix(head["W_v"], source, f"{where}.W_v", d, width, d_v,
                    "d_v, as in heads[0].W_v", MAX_DIM)
        d_k, d_v = q.shape[1], v.shape[1]
        wq.append(q)
        wk.append(k)
        wv.append(v)

    w_out = obj.get("W_o")
    if w_out is not None:
        w_out = _matrix(w_out, source, "W_o", len(heads) * d_v, "heads × d_v", None, "", len(heads) * d_v)

    mask = _mask(obj.get("mask", "none"), n, source)
    scale = _scale(obj.get("scale", "inv_sqrt_dk"), source)
    preset = _preset(obj.get("preset"), source)

    extra = {k: v for k, v in obj.items() if k not in KNOWN_KEYS}
    for key, value in extra.items():
        _check_plain(value, source, key)

    try:
        return Session(tokens=tuple(tokens), embeddings=x, w_query=np.stack(wq), w_key=np.stack(wk),
                       w_value=np.stack(wv), w_out=w_out, mask=mask, scale=scale, preset=preset, extra=extra)
    except SessionError as err:  # the checks above should have caught it; say where anyway
        _fail(source, None, str(err))


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
    """The session as a version-1 JSON-ready dict (floats exact: repr round-trips float64).

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
        "heads": [
            {"W_q": session.w_query[h].tolist(), "W_k": session.w_key[h].tolist(), "W_v": session.w_value[h].tolist()}
            for h in range(session.heads)
        ],
        "W_o": None if session.w_out is None else session.w_out.tolist(),
        "mask": mask_obj,
        "scale": scale_obj,
        "preset": None if session.preset is None else {"name": session.preset.name,
                                                         "params": _plain(dict(session.preset.params))},
    }
    for key, value in session.extra.items():
        if key not in out:
            out[key] = _plain(value)
    return out


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
