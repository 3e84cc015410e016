"""Token edits shared by the two sequences a session can have: its own tokens, and a
cross-attention source's.

Renaming, inserting, deleting, moving and re-tokenizing are the same rules for both (a token
needs text, the only token cannot go, a new row has the sequence's width, tokens that stay
keep their rows). What differs is where the rows live and what follows a token when it moves:
the session's mask rows and a learned position table, or a source's key-padding positions and
custom-mask columns. A ``TokenSequence`` names those differences; ``core.editing.edits`` and
``core.editing.stage_edits`` each build one and call the functions below.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import SessionError
from ..inputs.session import Session

# new tokens, mapping[new position] = old position or None, their rows -> the new session
Rebuild = Callable[[tuple, list, np.ndarray], Session]


@dataclass(frozen=True)
class TokenSequence:
    tokens: tuple[str, ...]
    rows: np.ndarray        # one embedding row per token
    where: str              # "tokens" or "source.tokens", for messages
    rows_name: str          # "embeddings" or "source.embeddings"
    width: str              # "d" or "d_s"
    last_one: str           # why the only token cannot be deleted
    empty: str              # why an empty token list is refused
    rebuild: Rebuild

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def d(self) -> int:
        return self.rows.shape[1]

    def index(self, i, allow_end: bool = False) -> int:
        top = self.n if allow_end else self.n - 1
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i <= top:
            raise SessionError(f"position {i!r} is outside 0..{top}", self.where)
        return int(i)

    def reordered(self, tokens: Sequence[str], mapping: Sequence[int | None], new_rows=None) -> Session:
        """The session with ``tokens``, each row taken from ``mapping[new] = old`` (a new
        token, None, gets its row from ``new_rows`` or zeros)."""
        x = np.zeros((len(tokens), self.d))
        fill = None if new_rows is None else np.asarray(new_rows, dtype=np.float64)
        for k, old in enumerate(mapping):
            if old is not None:
                x[k] = self.rows[old]
            elif fill is not None:
                x[k] = fill[k]
        return self.rebuild(tuple(tokens), list(mapping), x)


def _text(seq: TokenSequence, i: int, text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SessionError("a token needs some text", f"{seq.where}[{i}]")
    return text.strip()


def rename(seq: TokenSequence, i: int, text: str) -> Session:
    """Token ``i`` renamed; its row stays."""
    i = seq.index(i)
    tokens = list(seq.tokens)
    tokens[i] = _text(seq, i, text)
    return seq.reordered(tokens, list(range(seq.n)))


def insert(seq: TokenSequence, i: int, text: str, embedding=None) -> Session:
    """``text`` inserted before position ``i`` (``i == n`` appends), with ``embedding`` as its
    row (zeros when omitted)."""
    i = seq.index(i, allow_end=True)
    text = _text(seq, i, text)
    row = np.zeros(seq.d) if embedding is None else np.asarray(embedding, dtype=np.float64).reshape(-1)
    if row.shape != (seq.d,):
        raise SessionError(f"the new embedding has {row.size} values, expected {seq.width} = {seq.d}", seq.rows_name)
    tokens = list(seq.tokens)
    tokens.insert(i, text)
    mapping: list[int | None] = list(range(seq.n))
    mapping.insert(i, None)
    rows = np.zeros((seq.n + 1, seq.d))
    rows[i] = row
    return seq.reordered(tokens, mapping, rows)


def delete(seq: TokenSequence, i: int) -> Session:
    """Token ``i`` and its row removed (the only token cannot go)."""
    i = seq.index(i)
    if seq.n == 1:
        raise SessionError(seq.last_one, seq.where)
    mapping = [k for k in range(seq.n) if k != i]
    return seq.reordered([seq.tokens[k] for k in mapping], mapping)


def move(seq: TokenSequence, i: int, j: int) -> Session:
    """Token ``i`` (and its row) moved to position ``j``."""
    i = seq.index(i)
    j = seq.index(j)
    mapping = [k for k in range(seq.n) if k != i]
    mapping.insert(j, i)
    return seq.reordered([seq.tokens[k] for k in mapping], mapping)


def align_tokens(old: Sequence[str], new: Sequence[str]) -> list[int | None]:
    """``mapping[k]`` = the position in ``old`` whose token the ``k``-th of ``new`` is, or
    None for a new token: the longest matching runs, as ``diff`` aligns lines."""
    mapping: list[int | None] = [None] * len(new)
    matcher = difflib.SequenceMatcher(a=tuple(old), b=tuple(new), autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            mapping[block.b + k] = block.a + k
    return mapping


def retokenize(seq: TokenSequence, tokens: Sequence[str],
               embed: Callable[[tuple[str, ...]], np.ndarray] | None = None) -> Session:
    """A new token list; tokens that stay keep their rows.

    "Stay" is decided by aligning the old and new lists (longest matching runs, as ``diff``
    does), so a repeated word keeps the row of the occurrence at the same place. New tokens
    get rows from ``embed(tokens) -> (len(tokens), d)`` (only their rows are used), or zeros
    when ``embed`` is None.
    """
    tokens = tuple(tokens)
    if not tokens:
        raise SessionError(seq.empty, seq.where)
    mapping = align_tokens(seq.tokens, tokens)
    rows = None
    if embed is not None and any(m is None for m in mapping):
        rows = np.asarray(embed(tokens), dtype=np.float64)
        if rows.shape != (len(tokens), seq.d):
            raise SessionError(f"the embedding source gave shape {rows.shape}, expected ({len(tokens)}, {seq.d})",
                               seq.rows_name)
    return seq.reordered(tokens, mapping, rows)
