"""JSON text of numpy arrays and JSON parsing at a compiled library's speed (orjson).

``json.dumps(a.tolist())`` makes a Python float per number and formats each in Python: a
12.6 MB session file (one MiniLM layer) took 2-3.7 s to write that way, and ``json.loads``
0.26 s of CPU to read. orjson formats a numpy array straight from its buffer and parses about
three times as fast.

What stays as it was, so every earlier version reads what this one writes:
- the same JSON values: each number is the shortest text that reads back as the very same
  float64 (as Python's ``repr``; the spelling of an exponent may differ, ``1e-05`` or
  ``0.00001``, which every JSON reader takes as the same number). float32 arrays are widened
  to float64 first, so their numbers read as ``json`` wrote them from ``tolist()``;
- ``json.dumps``'s separators (``", "``), so a row reads as before;
- NaN and infinities refused with ``ValueError``, as ``json.dumps(..., allow_nan=False)``
  does (orjson would write them as null).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import numpy as np
import orjson

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
# A string followed by a colon: an object's key (JSON has no quote outside strings).
_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"\s*:')
_KEY_TEXT = re.compile(_KEY.pattern.decode("ascii"))
# An integer orjson would read as a float (over 64 bits) starts with 19 digits after a sign,
# a separator or white space; a fraction's digits follow a point. With every digit made "9"
# and every such lead made "<", ``bytes.find`` spots one in a few milliseconds (a regex took
# 0.25 s over a 12 MB file). What else it finds (digits in a string, an exponent) is only
# parsed the slower way.
_LEADS = bytes.maketrans(b"0123456789[,: \t\r\n-+", b"9999999999<<<<<<<<<")
_LONG_INTEGER = b"<" + b"9" * 19


def _plain_array(a: np.ndarray) -> np.ndarray | None:
    """``a`` as an array orjson writes as ``json`` would write ``a.tolist()``; None when it
    cannot (strings, objects, 0-d)."""
    if a.ndim == 0:
        return None
    kind = a.dtype.kind
    if kind == "f":
        a = a.astype(np.float64, copy=False)  # float32's numbers as Python floats, exactly
    elif kind == "u" or kind == "i":
        a = a.astype(np.int64, copy=False)
    elif kind != "b":
        return None
    return np.ascontiguousarray(a)


def array_json(a: np.ndarray, allow_nan: bool = False) -> str:
    """``json.dumps(a.tolist())``'s value, in its layout (``[[1.0, 2.5], [3.0, 4.0]]``).

    ``allow_nan=False`` (the default): ``ValueError`` for NaN or an infinity, as ``json``.
    ``allow_nan=True``: NaN is written as ``null`` (a blocked overview cell) and an infinity
    refused all the same (JSON has no name for it)."""
    a = np.asarray(a)
    plain = _plain_array(a)
    if plain is None:
        return json.dumps(a.tolist(), ensure_ascii=False, allow_nan=allow_nan)
    if plain.dtype.kind == "f":
        finite = np.isfinite(plain)
        if not finite.all():
            if not allow_nan or np.isinf(plain[~finite]).any():
                raise ValueError("Out of range float values are not JSON compliant")
    return orjson.dumps(plain, option=_NUMPY).replace(b",", b", ").decode("ascii")


def rows_json(a: np.ndarray, indent: str) -> str:
    """A 2-D array one row per line: ``[`` then each row on its own line after ``indent`` + two
    spaces, then ``indent`` + ``]`` (a session file's matrices)."""
    a = np.asarray(a)
    if a.shape[0] == 0:
        return "[]"
    inner = "\n" + indent + "  "
    text = array_json(a)
    # text is "[[r0], [r1], ...]": a row ends where "], [" stands (numbers hold neither).
    return "[" + inner + text[1:-1].replace("], [", "]," + inner + "[") + "\n" + indent + "]"


def write_array(a: np.ndarray, write: Callable[[str], Any], piece_numbers: int = 1 << 14) -> None:
    """``array_json(a)`` handed to ``write`` a slice of at most ``piece_numbers`` numbers at a
    time (whole rows of the leading axes): the text of a 4,096-token result's weights is
    hundreds of megabytes, never held at once."""
    a = np.asarray(a)
    if a.ndim <= 1 or a.size <= piece_numbers:
        write(array_json(a))
        return
    write("[")
    row = a[0].size
    if row > piece_numbers:  # one row at a time, each itself in pieces
        for i in range(a.shape[0]):
            write(", " if i else "")
            write_array(a[i], write, piece_numbers)
    else:
        step = max(1, piece_numbers // max(row, 1))
        for start in range(0, a.shape[0], step):
            write(", " if start else "")
            write(array_json(a[start:start + step])[1:-1])
    write("]")


def parse_strict(text: str, strict_json: Callable[[str], Any]) -> Any:
    """What ``strict_json(text)`` returns (``json.loads`` with hooks that refuse NaN and a key
    given twice), by orjson when it gives the very same value.

    orjson refuses NaN and every malformed text, as the strict parse does, but it keeps the
    last of a key given twice, reads an integer of over 64 bits as a float, and its error
    messages are its own; so a text it refuses, one with more keys than its objects hold, or
    one holding a run of 19 digits, is parsed by ``strict_json``, which then answers (value,
    hook or error) exactly as before."""
    leads = text.encode("utf-8", "surrogatepass").translate(_LEADS)
    if leads.find(_LONG_INTEGER) < 0 and not leads.startswith(_LONG_INTEGER[1:]):
        try:
            value = orjson.loads(text)
            # Keys written in the text against keys the objects hold: equal unless one repeats.
            if len(_KEY_TEXT.findall(text)) == len(_KEY.findall(orjson.dumps(value))):
                return value
        except (ValueError, TypeError):  # malformed, not UTF-8, nested past orjson's limit
            pass
    return strict_json(text)
