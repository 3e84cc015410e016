"""JSON written a piece at a time, numpy arrays included, so that other threads keep running.

One call that encodes a whole 16,384 × 64 embedding table holds Python's interpreter lock
throughout (``json.dumps``: about a second), and every other Python thread, the window's
included, waits for it. ``write_json`` writes the same JSON a few thousand numbers at a time
(``json_text``, orjson: about a millisecond a piece): between two pieces the lock can pass to
a thread that wants it, so the autosave's write of a big session costs the window at most a
millisecond or two at a time.

Values: what ``json`` takes, plus numpy arrays (written as nested lists; each number the
shortest text that reads back as the same float, as ``json`` writes a Python float) and numpy
scalars.
"""

from __future__ import annotations

import json
import time
from typing import Any, BinaryIO

import numpy as np

from .json_text import write_array

# Numbers encoded per piece: about 1 ms of orjson on this project's machine, so a thread
# waiting for the lock waits about that long, far under the 50 ms a window may stall.
PIECE_NUMBERS = 16384


def write_json(f: BinaryIO, value: Any, piece_numbers: int = PIECE_NUMBERS) -> None:
    """Write ``value`` as compact-spaced JSON (``json.dumps``'s separators) to the binary file
    ``f``, UTF-8, arrays a piece at a time. Raises ``TypeError``/``ValueError`` as
    ``json.dumps`` does for what JSON cannot hold."""
    _write(f, value, max(1, int(piece_numbers)))


def _write(f: BinaryIO, value: Any, piece: int) -> None:
    if isinstance(value, np.ndarray):
        _write_array(f, value, piece)
    elif isinstance(value, dict):
        f.write(b"{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                f.write(b", ")
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            f.write(json.dumps(key).encode("utf-8") + b": ")
            _write(f, item, piece)
        f.write(b"}")
    elif isinstance(value, (list, tuple)) and any(isinstance(v, (np.ndarray, dict, list, tuple)) for v in value):
        f.write(b"[")
        for i, item in enumerate(value):
            if i:
                f.write(b", ")
            _write(f, item, piece)
        f.write(b"]")
    elif isinstance(value, (list, tuple)) and len(value) > piece:
        # A long flat list (16,384 tokens): in pieces too.
        f.write(b"[")
        for start in range(0, len(value), piece):
            if start:
                f.write(b", ")
            f.write(json.dumps(list(value[start:start + piece]))[1:-1].encode("utf-8"))
            time.sleep(0)
        f.write(b"]")
    else:
        if isinstance(value, np.generic):
            value = value.item()
        f.write(json.dumps(value).encode("utf-8"))


def _write_array(f: BinaryIO, a: np.ndarray, piece: int) -> None:
    if a.dtype.kind not in "biuf":
        raise TypeError(f"cannot write a numpy array of {a.dtype} as JSON")
    # Each piece is one call of orjson over at most ``piece`` numbers; sleep(0) then hands the
    # lock to a thread waiting for it at once, rather than after the interpreter's 5 ms switch
    # interval (which a busy machine stretches further).
    write_array(a, lambda text: (f.write(text.encode("ascii")), time.sleep(0)), piece)
