"""The mask: which (query, key) cells of the attention are blocked, as one frozen value.

This is the session's definition of the mask (its kind, window, padding or custom matrix);
``core.compute.blocked_cells`` turns it into the blocked cells the engines read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import SessionError
from .limits import MAX_TOKENS, is_whole

MaskKind = Literal["none", "causal", "window", "padding", "custom"]


@dataclass(frozen=True, eq=False)
class Mask:
    """Which (query, key) cells are blocked. True in ``matrix(n)`` means blocked.

    - ``none``: nothing blocked.
    - ``causal``: a query sees itself and earlier tokens.
    - ``window``: a query sees itself and the ``window - 1`` tokens before it.
    - ``padding``: the key positions in ``padding`` are blocked for every query.
    - ``custom``: ``blocked`` is an explicit n×n boolean matrix.
    """

    kind: MaskKind = "none"
    window: int = 1
    padding: tuple[int, ...] = ()
    blocked: np.ndarray | None = None

    def __post_init__(self):
        if self.kind not in ("none", "causal", "window", "padding", "custom"):
            raise SessionError(f"unknown mask kind {self.kind!r}", "mask")
        if self.kind == "window":
            # Bounded like a file's: a window wider than the text is the causal mask, and a
            # larger number than numpy's integers would overflow where the mask is made.
            if not is_whole(self.window) or not 1 <= self.window <= MAX_TOKENS:
                raise SessionError(f"window must be a whole number in 1..{MAX_TOKENS}, got {self.window!r}", "mask.window")
            object.__setattr__(self, "window", int(self.window))
        try:
            padding = list(self.padding)
        except TypeError:
            raise SessionError(f"padding must be a list of key positions, got {self.padding!r}", "mask.padding") from None
        for j in padding:
            if not is_whole(j):
                raise SessionError(f"padding positions must be whole numbers, got {j!r}", "mask.padding")
            if not 0 <= j < MAX_TOKENS:
                raise SessionError(f"padding position {j} is outside 0..{MAX_TOKENS - 1}", "mask.padding")
        object.__setattr__(self, "padding", tuple(sorted({int(j) for j in padding})))
        if self.kind == "custom":
            if self.blocked is None:
                raise SessionError("a custom mask needs a 'blocked' matrix", "mask.blocked")
            try:
                raw = np.asarray(self.blocked)
            except (TypeError, ValueError):
                raw = np.asarray([], dtype=object)
            # Only booleans or 0/1: a 2 or 0.5 is a typo, not "blocked".
            if raw.dtype.kind not in "biuf" or (raw.dtype.kind != "b" and not np.isin(raw, (0, 1)).all()):
                raise SessionError("blocked must hold only 0/1 or true/false", "mask.blocked")
            b = raw.astype(bool)  # astype copies: later changes to the caller's array do not leak in
            if b.ndim != 2:
                raise SessionError(f"blocked must be a matrix, got shape {b.shape}", "mask.blocked")
            b.flags.writeable = False
            object.__setattr__(self, "blocked", b)

    def matrix(self, n: int, n_k: int | None = None) -> np.ndarray:
        """A new, writable n×n_k boolean mask, True = blocked (n_k = n for self-attention).

        Raises SessionError when the mask does not fit ``n`` tokens (see ``check``).
        """
        return self.block(n, n_k)

    def block(self, n: int, n_k: int | None = None, rows: slice = slice(None), cols: slice = slice(None)) -> np.ndarray:
        """The rectangle ``[rows, cols]`` of ``matrix(n, n_k)``, made without the rest (a new,
        writable array): the streamed path for long inputs reads the mask a block at a time.
        """
        self.check(n, n_k)
        keys = n if n_k is None else n_k
        r0, r1, _ = rows.indices(n)
        c0, c1, _ = cols.indices(keys)
        r1, c1 = max(r0, r1), max(c0, c1)
        i = np.arange(r0, r1)[:, None]
        j = np.arange(c0, c1)[None, :]
        if self.kind == "causal":
            return j > i
        if self.kind == "window":
            return (j > i) | (j <= i - self.window)
        m = np.zeros((r1 - r0, c1 - c0), dtype=bool)
        if self.kind == "padding":
            m[:, [p - c0 for p in self.padding if c0 <= p < c1]] = True
        elif self.kind == "custom":
            m[:] = self.blocked[r0:r1, c0:c1]
        return m

    def check(self, n: int, n_k: int | None = None) -> None:
        """Raise SessionError when this mask does not fit ``n`` tokens (queries) and ``n_k``
        keys: a source sequence's length in cross-attention, None for self-attention."""
        if not is_whole(n) or n < 1:
            raise SessionError(f"needs a whole number of tokens >= 1, got {n!r}", "mask")
        if n_k is not None and self.kind in ("causal", "window"):
            raise SessionError(f"{self.kind} needs one sequence (query i sees keys up to i), but with a source "
                               "the keys are another sequence; use none, padding or a custom mask", "mask")
        keys = n if n_k is None else n_k
        if self.kind == "padding":
            bad = [j for j in self.padding if j < 0 or j >= keys]
            if bad:
                raise SessionError(f"padding position {bad[0]} is outside 0..{keys - 1}", "mask.padding")
        if self.kind == "custom" and self.blocked.shape != (n, keys):
            what = "one row and column per token" if n_k is None else "a row per token, a column per source token"
            raise SessionError(f"blocked is {self.blocked.shape[0]}×{self.blocked.shape[1]}, expected {n}×{keys} ({what})", "mask.blocked")

    def __eq__(self, other):
        if not isinstance(other, Mask):
            return NotImplemented
        if (self.kind, self.window if self.kind == "window" else 0, self.padding if self.kind == "padding" else ()) != (
            other.kind, other.window if other.kind == "window" else 0, other.padding if other.kind == "padding" else ()):
            return False
        if self.kind == "custom":
            return self.blocked.shape == other.blocked.shape and bool(np.array_equal(self.blocked, other.blocked))
        return True

    __hash__ = None


def custom_mask_owning(blocked: np.ndarray) -> Mask:
    """A custom mask over ``blocked``, a new n × n_k boolean array the caller gives away and
    no longer writes: the mask keeps it, read-only, with no copy. ``Mask("custom", blocked=…)``
    copies, which is right for an array someone else holds, but an edit that has just made the
    array would then hold two (268 MB each at 16,384 tokens)."""
    if not isinstance(blocked, np.ndarray) or blocked.dtype != bool or blocked.ndim != 2:
        raise SessionError("blocked must be a boolean matrix", "mask.blocked")
    blocked.flags.writeable = False
    mask = object.__new__(Mask)
    for name, value in (("kind", "custom"), ("window", 1), ("padding", ()), ("blocked", blocked)):
        object.__setattr__(mask, name, value)
    return mask
