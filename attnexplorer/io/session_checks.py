"""The checks a session file's values go through: each returns the checked value or raises
``SessionError`` naming the file and the exact place (``heads[1].W_k[2][0] is "x", expected a
number``), so every reader of the format (``session_file``, ``session_stages``) says it alike.

``source`` is the file name as given; ``where`` the place inside the file, or None for the
file as a whole.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import SessionError
from ..core.inputs.limits import bound_problem
from ..core.inputs.session import MAX_DIM, MAX_TOKEN_CHARS, MAX_TOKENS, control_character
from ..core.numbers.display import counted

# The deepest nesting allowed inside extra keys and preset parameters (view state is shallow).
MAX_NESTING = 64


class NonFinite:
    """What the parser puts where a file says NaN, Infinity or -Infinity (JSON forbids them)."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token


def fail(source: str, where: str | None, message: str):
    text = f"{where} {message}" if where else message
    err = SessionError(f"{source}: {text}")
    err.where = where
    raise err


def describe(value: Any) -> str:
    if isinstance(value, NonFinite):
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


def checked_number(value: Any, source: str, where: str) -> float:
    if type(value) is float:
        if not math.isfinite(value):  # 1e999 parses to inf
            fail(source, where, f"is {value!r}; every number must be finite")
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            fail(source, where, "is too large; every number must be finite")
    if isinstance(value, NonFinite):
        fail(source, where, f"is {value.token}; every number must be finite")
    fail(source, where, f"is {describe(value)}, expected a number")


def checked_matrix(value: Any, source: str, where: str, rows: int | None, rows_why: str,
                   cols: int | None, cols_why: str, max_rows: int, bits: bool = False) -> np.ndarray:
    """A checked 2-D float64 array from a list of equal-length lists of finite numbers.

    ``rows``/``cols`` are the expected sizes (None: any, within 1..max_rows / 1..MAX_DIM);
    the ``*_why`` strings explain where the expectation comes from. With ``bits`` every
    entry must be 0, 1, true or false. A float numpy array is taken too, by the same rules.
    """
    if isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind == "f" and not bits:
        return _float_array(value, source, where, rows, rows_why, cols, cols_why, max_rows)
    if not isinstance(value, list):
        fail(source, where, f"is {describe(value)}, expected a list of rows")
    if rows is not None and len(value) != rows:
        fail(source, where, f"has {counted(len(value), 'row')}, expected {rows} ({rows_why})")
    if not 1 <= len(value) <= max_rows:
        fail(source, where, f"has {counted(len(value), 'row')}, expected 1..{max_rows}")
    check = _bit if bits else checked_number
    allowed = {int, bool} if bits else {int, float}
    width = None
    for i, row in enumerate(value):
        if not isinstance(row, list):
            fail(source, f"{where}[{i}]", f"is {describe(row)}, expected a list of numbers")
        if width is None:
            width = len(row)
            if cols is not None and width != cols:
                fail(source, where, f"has {counted(width, 'column')}, expected {cols} ({cols_why})")
            if not 1 <= width <= (max_rows if bits else MAX_DIM):
                fail(source, where, f"has {counted(width, 'column')}, expected 1..{MAX_DIM}")
        elif len(row) != width:
            fail(source, f"{where}[{i}]", f"has {counted(len(row), 'number')}, expected {width} (like row 0)")
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


def _float_array(value: np.ndarray, source: str, where: str, rows: int | None, rows_why: str,
                 cols: int | None, cols_why: str, max_rows: int) -> np.ndarray:
    """``checked_matrix`` for a float numpy array, checked by the same rules without a detour
    through lists: a session built in memory (a real model's layer, about 10⁶ numbers) skips
    a ``tolist()`` and a re-parse that took most of a second."""
    n_rows, width = value.shape
    if rows is not None and n_rows != rows:
        fail(source, where, f"has {counted(n_rows, 'row')}, expected {rows} ({rows_why})")
    if not 1 <= n_rows <= max_rows:
        fail(source, where, f"has {counted(n_rows, 'row')}, expected 1..{max_rows}")
    if cols is not None and width != cols:
        fail(source, where, f"has {counted(width, 'column')}, expected {cols} ({cols_why})")
    if not 1 <= width <= MAX_DIM:
        fail(source, where, f"has {counted(width, 'column')}, expected 1..{MAX_DIM}")
    return _finite_copy(value, source, where)


def _finite_copy(value: np.ndarray, source: str, where: str) -> np.ndarray:
    a = value.astype(np.float64)   # a copy: the session owns its numbers
    bad = np.argwhere(~np.isfinite(a))
    if len(bad):
        place = tuple(int(i) for i in bad[0])
        fail(source, where + "".join(f"[{i}]" for i in place), f"is {a[place]}; every number must be finite")
    return a


def _bit(value: Any, source: str, where: str) -> float:
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return float(value)
    fail(source, where, f"is {describe(value)}, expected 0 or 1")


def checked_text(value: Any, source: str, where: str, what: str = "a string") -> str:
    if not isinstance(value, str):
        fail(source, where, f"is {describe(value)}, expected {what}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from an escape like \ud800
        fail(source, where, "holds an unpaired surrogate character, which is not text")
    return value


def checked_whole(value: Any, source: str, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        fail(source, where, f"is {describe(value)}, expected a whole number")
    if not lo <= value <= hi:
        fail(source, where, f"is {value}, expected {lo}..{hi}")
    return value


def _path_text(path) -> str:
    """A lazy path ``(parent, key)`` as text: ``view.rows[3].name``."""
    parts = []
    while isinstance(path, tuple):
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return path + "".join(reversed(parts))


def _check_leaf(v: Any, source: str, path) -> None:
    if isinstance(v, NonFinite):
        fail(source, _path_text(path), f"is {v.token}; every number must be finite")
    if type(v) is float and not math.isfinite(v):
        fail(source, _path_text(path), f"is {v!r}; every number must be finite")
    if isinstance(v, str):
        if not v.isascii():
            checked_text(v, source, _path_text(path))
    elif v is not None and not isinstance(v, (bool, int, float)):
        fail(source, _path_text(path), f"is a Python {type(v).__name__}, which a session file cannot hold")


_PLAIN_SCALARS = frozenset((int, bool, type(None)))


def check_plain(value: Any, source: str, where: str) -> None:
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
                    fail(source, _path_text(path), f"has a key {key!r} that is not a string")
                if not key.isascii():
                    checked_text(key, source, _path_text(path))
            items = v.items()
        elif isinstance(v, (list, tuple)):
            items = enumerate(v)
        else:
            _check_leaf(v, source, path)
            continue
        if v and depth >= MAX_NESTING:
            first = next(iter(v)) if isinstance(v, dict) else 0
            fail(source, _path_text((path, first)), f"nests deeper than {MAX_NESTING} levels")
        for key, item in items:
            kind = type(item)
            if kind in _PLAIN_SCALARS or (kind is float and math.isfinite(item)):
                continue
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, (path, key), depth + 1))
            else:
                _check_leaf(item, source, (path, key))


def checked_tokens(tokens: Any, source: str, where: str) -> list[str]:
    if not isinstance(tokens, list):
        fail(source, where, f"is {describe(tokens)}, expected a list of strings")
    if not 1 <= len(tokens) <= MAX_TOKENS:
        fail(source, where, f"has {len(tokens)} tokens, expected 1..{MAX_TOKENS}")
    for i, t in enumerate(tokens):
        checked_text(t, source, f"{where}[{i}]")
        if len(t) > MAX_TOKEN_CHARS:
            fail(source, f"{where}[{i}]", f"is longer than {MAX_TOKEN_CHARS} characters")
        bad = control_character(t)
        if bad is not None:
            fail(source, f"{where}[{i}]", f"holds the control character U+{ord(bad):04X}; tokens may not hold "
                 "control characters (tabs, line breaks, NUL, escapes)")
    return tokens


def checked_vector(value: Any, source: str, where: str, size: int | None, size_why: str,
                   longest: int = MAX_DIM) -> np.ndarray:
    """A checked 1-D float64 array: a list of ``size`` finite numbers (any 1..``longest`` when
    None), or a float numpy array, by the same rules."""
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind == "f":
        if size is not None and len(value) != size:
            fail(source, where, f"has {counted(len(value), 'number')}, expected {size_why} = {size}")
        if not 1 <= len(value) <= longest:
            fail(source, where, f"has {counted(len(value), 'number')}, expected 1..{longest}")
        return _finite_copy(value, source, where)
    if not isinstance(value, list):
        fail(source, where, f"is {describe(value)}, expected a list of numbers")
    if size is not None and len(value) != size:
        fail(source, where, f"has {counted(len(value), 'number')}, expected {size_why} = {size}")
    if not 1 <= len(value) <= longest:
        fail(source, where, f"has {counted(len(value), 'number')}, expected 1..{longest}")
    return np.array([checked_number(v, source, f"{where}[{i}]") for i, v in enumerate(value)], dtype=np.float64)


def checked_object(value: Any, source: str, where: str, allowed: tuple[str, ...], expected: str) -> dict:
    if not isinstance(value, dict):
        fail(source, where, f"is {describe(value)}, expected {expected}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        names = ", ".join(f'"{k}"' for k in allowed)
        fail(source, where, f"has an unknown key {unknown[0]!r} (expected {names})")
    return value


def above_zero(value: Any, source: str, where: str) -> float:
    v = checked_number(value, source, where)
    if v <= 0:
        fail(source, where, f"is {v!r}, expected a number > 0")
    return v


def within_bounds(value: Any, source: str, where: str) -> float:
    """A number within the session's documented bounds for ``where`` (``core.inputs.limits.BOUNDS``)."""
    v = above_zero(value, source, where)
    problem = bound_problem(where, v)
    if problem:
        fail(source, where, problem)
    return v
