"""The session: everything a user can edit, as one immutable value.

A ``Session`` holds the tokens, the embeddings and the per-head weights in the ``x @ W``
convention (row vectors: ``Q = X @ W_q``), plus the mask, the scale and the preset it came
from. It is frozen: an edit makes a new session (``session.replace(...)``), which is what
makes undo, autosave and "compute on another thread" safe and simple.

Arrays are stored as read-only float64 numpy arrays, stacked over heads:
``w_query``/``w_key`` are ``(H, d, d_k)``, ``w_value`` is ``(H, d, d_v)``.
Constructing a session validates it; a bad one raises ``SessionError``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np

from .errors import SessionError
from .stages import Norm, Positions, Source

# Documented bounds (README, "Session files"). They keep a hostile or mistaken file from
# asking for gigabytes, while leaving room for the 16,384-token sessions that the streamed
# path for long inputs (core/long) computes without holding n × n per head.
MAX_TOKENS = 16384
MAX_DIM = 1024  # d, d_k, d_v and d_out
MAX_HEADS = 64
MAX_TOKEN_CHARS = 200

MaskKind = Literal["none", "causal", "window", "padding", "custom"]
ScaleKind = Literal["inv_sqrt_dk", "none", "temperature"]


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
            if not _is_whole(self.window) or not 1 <= self.window <= MAX_TOKENS:
                raise SessionError(f"window must be a whole number in 1..{MAX_TOKENS}, got {self.window!r}", "mask.window")
            object.__setattr__(self, "window", int(self.window))
        try:
            padding = list(self.padding)
        except TypeError:
            raise SessionError(f"padding must be a list of key positions, got {self.padding!r}", "mask.padding") from None
        for j in padding:
            if not _is_whole(j):
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
        if not _is_whole(n) or n < 1:
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


@dataclass(frozen=True, eq=False)
class Scale:
    """How scores are scaled before the softmax.

    ``inv_sqrt_dk`` multiplies by 1/√d_k, ``none`` by 1, and ``temperature`` τ > 0 means
    softmax(scores / τ), as in the sine walkthrough.
    """

    kind: ScaleKind = "inv_sqrt_dk"
    temperature: float = 1.0

    def __post_init__(self):
        if self.kind not in ("inv_sqrt_dk", "none", "temperature"):
            raise SessionError(f"unknown scale {self.kind!r}", "scale")
        t = self.temperature
        try:  # an int beyond float64 (10**400) is not a temperature either
            finite = math.isfinite(t)
        except (TypeError, OverflowError):
            finite = False
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) or not finite or t <= 0:
            raise SessionError(f"temperature must be a finite number > 0, got {t!r}", "scale.temperature")
        if not math.isfinite(1.0 / t):  # a subnormal τ would make the factor inf
            raise SessionError(f"temperature {t!r} is too small", "scale.temperature")
        object.__setattr__(self, "temperature", float(t))

    def __eq__(self, other):
        # The temperature only matters for the temperature scale.
        if not isinstance(other, Scale):
            return NotImplemented
        return self.kind == other.kind and (self.kind != "temperature" or self.temperature == other.temperature)

    def __hash__(self):
        return hash((self.kind, self.temperature if self.kind == "temperature" else None))

    def factor(self, d_k: int) -> float:
        """The number the raw scores are multiplied by."""
        if self.kind == "inv_sqrt_dk":
            return 1.0 / math.sqrt(d_k)
        if self.kind == "none":
            return 1.0
        return 1.0 / self.temperature

    def describe(self, d_k: int) -> str:
        if self.kind == "inv_sqrt_dk":
            return f"÷√{d_k}"
        if self.kind == "none":
            return "unscaled"
        return f"÷τ (τ = {self.temperature:g})"


@dataclass(frozen=True)
class PresetRef:
    """Where a session came from: a preset's name and the parameters it was built with.

    For a preset this attnexplorer knows, every parameter must be one of its own and within
    its bounds (the window shows them in its sliders; ``presets.check_params``), and is
    stored as the checked number. Another name is kept as a label, with its parameters as
    given (a session file still requires them to be plain JSON).
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SessionError(f"must be a preset's name, got {self.name!r}", "preset.name")
        if not isinstance(self.params, collections.abc.Mapping):
            raise SessionError(f"must be a mapping of parameter names to values, got {type(self.params).__name__}",
                               "preset.params")
        for key in self.params:
            if not isinstance(key, str):
                raise SessionError(f"has a key {key!r} that is not a string", "preset.params")
        from .presets import check_params  # presets import this module

        object.__setattr__(self, "params", check_params(self.name, self.params))


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _checked_tokens(value, where: str) -> tuple[str, ...]:
    """``value`` as a tuple of token strings, or SessionError naming ``where`` (``tokens`` or
    ``source.tokens``): one rule for every sequence of tokens a session holds."""
    if isinstance(value, (str, bytes)):
        raise SessionError("must be a list of strings, not one string", where)
    try:
        tokens = tuple(value)
    except TypeError:
        raise SessionError(f"must be a list of strings, got {type(value).__name__}", where) from None
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise SessionError(f"must be a string, got {type(t).__name__}", f"{where}[{i}]")
        if len(t) > MAX_TOKEN_CHARS:
            raise SessionError(f"is longer than {MAX_TOKEN_CHARS} characters", f"{where}[{i}]")
    if _CONTROL.search("".join(tokens)):  # one search per sequence, not one per token
        i, bad = next((i, control_character(t)) for i, t in enumerate(tokens) if control_character(t))
        raise SessionError(f"holds the control character U+{ord(bad):04X}; tokens may not hold "
                           "control characters (tabs, line breaks, NUL, escapes)", f"{where}[{i}]")
    return tokens


def control_character(text: str) -> str | None:
    """The first control character in ``text`` (C0, DEL or C1), or None.

    Tokens may not hold them: NUL is lost in npz files and breaks CSV on Python 3.10, and
    the others make invalid SVG and LaTeX or move a terminal's cursor. One rule, checked
    where every token passes (``Session``), covers files, the window, presets and the API.
    """
    found = _CONTROL.search(text)
    return None if found is None else found.group()


def _is_whole(v) -> bool:
    """An int (numpy ints too), but not a bool: True is not a window size or a position."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# Arrays this module has checked and frozen, by id. ``session.replace(w_query=...)`` hands the
# other fields back in unchanged; recognising them skips a copy and a finite check per array
# per edit, and keeps their identity, which lets the engine reuse their device copies.
_FROZEN: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def _frozen_matrix(value, where: str, ndim: int) -> np.ndarray:
    """A read-only float64 copy of ``value``, or SessionError naming ``where``.

    An array that is already the result of this function is returned as it is (after the
    shape check): it cannot have changed since.
    """
    if _FROZEN.get(id(value)) is value:
        if value.ndim != ndim:
            raise SessionError(f"must be {ndim}-dimensional, got shape {value.shape}", where)
        return value
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise SessionError(f"must be a {ndim}-dimensional array of numbers with rows of equal length", where) from None
    # Strings like "1.5" would convert silently and booleans are not weights; refuse both.
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    a = np.array(raw, dtype=np.float64)  # always a copy: the caller's array stays theirs
    if a.ndim != ndim:
        raise SessionError(f"must be {ndim}-dimensional, got shape {a.shape}", where)
    if not np.isfinite(a).all():
        idx = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise SessionError(f"holds a non-finite number at {list(idx)}", where)
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    return a


# For arrays made by ``with_values``: id → (weak reference to the array it was made from, the
# flat positions that differ, weak reference to the new array). The engine's device copies
# use it to patch only those positions instead of converting and uploading a whole array
# again. Only the newest few are kept: an edit is patched in right after it is made.
_DERIVED: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
_DERIVED_SIZE = 64


def _flat_positions(shape: tuple[int, ...], index: tuple) -> np.ndarray:
    """The flat positions ``index`` (ints and slices, one per axis) selects, in O(selected)."""
    index = index + (slice(None),) * (len(shape) - len(index))
    axes = [np.arange(*i.indices(n)) if isinstance(i, slice) else np.array([int(i) % n]) for i, n in zip(index, shape)]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.ravel_multi_index(tuple(g.ravel() for g in grids), shape)


def with_values(base: np.ndarray, index: tuple, values) -> np.ndarray:
    """A frozen copy of ``base`` (an array of a session) with ``base[index] = values``, ready
    for ``Session``/``replace`` without another copy or finite check.

    ``index`` is a tuple of ints and slices; ``values`` must be finite (the caller checked
    them). This is the one copy an edit makes; the copy remembers which positions differ from
    ``base`` (``derived_from``).
    """
    return with_flat_values(base, _flat_positions(base.shape, tuple(index)), np.broadcast_to(values, _shape_of(base, index)).ravel())


def _shape_of(base: np.ndarray, index: tuple) -> tuple[int, ...]:
    return base[tuple(index)].shape


def with_flat_values(base: np.ndarray, flat: np.ndarray, values) -> np.ndarray:
    """``with_values`` by flat positions: ``base.ravel()[flat] = values`` in a frozen copy."""
    if _FROZEN.get(id(base)) is not base:
        raise SessionError("with_values needs an array of a session", "array")
    a = np.array(base)
    a.reshape(-1)[flat] = values
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    _DERIVED[id(a)] = (weakref.ref(base), np.asarray(flat), weakref.ref(a))
    if len(_DERIVED) > _DERIVED_SIZE:
        _DERIVED.popitem(last=False)
    return a


def derived_from(a: np.ndarray):
    """``(base, flat positions)`` when ``a`` was made by ``with_values`` from ``base`` and
    both still live, else None: ``a`` equals ``base`` except at those positions."""
    hit = _DERIVED.get(id(a))
    if hit is None or hit[2]() is not a:
        return None
    base = hit[0]()
    return None if base is None else (base, hit[1])


@dataclass(frozen=True, eq=False)
class Session:
    """Everything the user edits. Immutable and always valid once constructed."""

    tokens: tuple[str, ...]
    embeddings: np.ndarray
    w_query: np.ndarray
    w_key: np.ndarray
    w_value: np.ndarray
    w_out: np.ndarray | None = None
    mask: Mask = field(default_factory=Mask)
    scale: Scale = field(default_factory=Scale)
    preset: PresetRef | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The stages of a real head (core/stages.py). None means absent: a zero bias, no
    # positions, no norm, self-attention. w_key/w_value (and b_key/b_value) may have fewer
    # heads than w_query (grouped-query attention).
    b_query: np.ndarray | None = None  # (H, d_k)
    b_key: np.ndarray | None = None  # (H_kv, d_k)
    b_value: np.ndarray | None = None  # (H_kv, d_v)
    b_out: np.ndarray | None = None  # (d_out,)
    norm: Norm | None = None
    positions: Positions | None = None
    source: Source | None = None

    def __post_init__(self):
        tokens = _checked_tokens(self.tokens, "tokens")
        object.__setattr__(self, "tokens", tokens)
        n = len(tokens)
        if n < 1:
            raise SessionError("a session needs at least one token", "tokens")
        if n > MAX_TOKENS:
            raise SessionError(f"{n} tokens is more than the limit of {MAX_TOKENS}", "tokens")
        x = _frozen_matrix(self.embeddings, "embeddings", 2)
        wq = _frozen_matrix(self.w_query, "W_q", 3)
        wk = _frozen_matrix(self.w_key, "W_k", 3)
        wv = _frozen_matrix(self.w_value, "W_v", 3)
        if x.shape[0] != n:
            raise SessionError(f"has {x.shape[0]} rows, expected {n} (one per token)", "embeddings")
        d = x.shape[1]
        if not 1 <= d <= MAX_DIM:
            raise SessionError(f"width {d} is outside 1..{MAX_DIM}", "embeddings")
        source = self.source
        if source is not None:
            source = _checked_source(source)
            object.__setattr__(self, "source", source)
        h = wq.shape[0]
        if not 1 <= h <= MAX_HEADS:
            raise SessionError(f"{h} heads is outside 1..{MAX_HEADS}", "heads")
        h_kv = wk.shape[0]
        if h_kv < 1 or h % h_kv:
            raise SessionError(f"{h_kv} does not divide {h} query heads", "kv_heads")
        # Keys and values are made from the source's rows in cross-attention.
        d_in, d_in_why = (d, "the embedding width") if source is None else (source.d, "the source embedding width")
        for name, w, heads, rows, rows_why in (("W_q", wq, h, d, "the embedding width"), ("W_k", wk, h_kv, d_in, d_in_why),
                                               ("W_v", wv, h_kv, d_in, d_in_why)):
            if w.shape[0] != heads:
                raise SessionError(f"has {w.shape[0]} heads, expected {heads}", name)
            if w.shape[1] != rows:
                raise SessionError(f"has {w.shape[1]} rows, expected {rows} ({rows_why})", name)
            if not 1 <= w.shape[2] <= MAX_DIM:
                raise SessionError(f"width {w.shape[2]} is outside 1..{MAX_DIM}", name)
        if wk.shape[2] != wq.shape[2]:
            raise SessionError(f"has {wk.shape[2]} columns, expected {wq.shape[2]} (W_q and W_k share d_k)", "W_k")
        object.__setattr__(self, "embeddings", x)
        object.__setattr__(self, "w_query", wq)
        object.__setattr__(self, "w_key", wk)
        object.__setattr__(self, "w_value", wv)
        if self.w_out is not None:
            wo = _frozen_matrix(self.w_out, "W_o", 2)
            if wo.shape[0] != h * wv.shape[2]:
                raise SessionError(f"has {wo.shape[0]} rows, expected {h * wv.shape[2]} (heads × d_v)", "W_o")
            if not 1 <= wo.shape[1] <= MAX_DIM:
                raise SessionError(f"width {wo.shape[1]} is outside 1..{MAX_DIM}", "W_o")
            object.__setattr__(self, "w_out", wo)
        self._check_stages(h, h_kv, d, wq.shape[2], wv.shape[2])
        if not isinstance(self.mask, Mask):
            raise SessionError("must be a Mask", "mask")
        if not isinstance(self.scale, Scale):
            raise SessionError("must be a Scale", "scale")
        self.mask.check(n, None if source is None else source.n)
        if self.preset is not None and not isinstance(self.preset, PresetRef):
            raise SessionError("must be a PresetRef or None", "preset")
        if not isinstance(self.extra, collections.abc.Mapping):
            raise SessionError(f"must be a mapping, got {type(self.extra).__name__}", "extra")
        for key in self.extra:
            if not isinstance(key, str):  # a session file's keys are strings; 1 would become "1"
                raise SessionError(f"has a key {key!r} that is not a string", "extra")
        object.__setattr__(self, "extra", dict(self.extra))

    def _check_stages(self, h: int, h_kv: int, d: int, d_k: int, d_v: int) -> None:
        """Biases, norm and positions against the sizes (see core/stages.py)."""
        for field_name, name, rows, width, width_name in (
                ("b_query", "b_q", h, d_k, "d_k"), ("b_key", "b_k", h_kv, d_k, "d_k"), ("b_value", "b_v", h_kv, d_v, "d_v")):
            b = getattr(self, field_name)
            if b is None:
                continue
            b = _frozen_matrix(b, name, 2)
            if b.shape[0] != rows:
                raise SessionError(f"has {b.shape[0]} heads, expected {rows}", name)
            if b.shape[1] != width:
                raise SessionError(f"has {b.shape[1]} numbers per head, expected {width_name} = {width}", name)
            object.__setattr__(self, field_name, b)
        if self.b_out is not None:
            b = _frozen_matrix(self.b_out, "b_o", 1)
            d_out = h * d_v if self.w_out is None else self.w_out.shape[1]
            if self.w_out is None:
                raise SessionError("an output bias needs W_o", "b_o")
            if b.shape[0] != d_out:
                raise SessionError(f"has {b.shape[0]} numbers, expected d_out = {d_out} (the columns of W_o)", "b_o")
            object.__setattr__(self, "b_out", b)
        if self.norm is not None:
            if not isinstance(self.norm, Norm):
                raise SessionError("must be a Norm or None", "norm")
            self.norm.check(d)
        p = self.positions
        if p is not None:
            if not isinstance(p, Positions):
                raise SessionError("must be a Positions or None", "positions")
            if self.source is not None and p.kind in ("rope", "alibi"):
                raise SessionError(f"{p.kind} encodes the distance between a query and a key in one sequence, but with "
                                   "a source the keys are another sequence; use sinusoidal or learned positions, or none",
                                   "positions")
            p.check(self.n, d, d_k, h)

    # -- sizes, in the walkthroughs' names ---------------------------------------------
    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def d(self) -> int:
        return self.embeddings.shape[1]

    @property
    def d_k(self) -> int:
        return self.w_query.shape[2]

    @property
    def d_v(self) -> int:
        return self.w_value.shape[2]

    @property
    def heads(self) -> int:
        return self.w_query.shape[0]

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads: ``heads`` unless grouped-query attention."""
        return self.w_key.shape[0]

    @property
    def kv_head_of(self) -> np.ndarray:
        """Query head h uses K/V head h // (H / H_kv): (H,) ints."""
        return np.arange(self.heads) // (self.heads // self.kv_heads)

    @property
    def n_keys(self) -> int:
        """How many keys each query sees: the source's length in cross-attention, else n."""
        return self.n if self.source is None else self.source.n

    @property
    def key_tokens(self) -> tuple[str, ...]:
        return self.tokens if self.source is None else self.source.tokens

    @property
    def d_out(self) -> int:
        return self.heads * self.d_v if self.w_out is None else self.w_out.shape[1]

    def replace(self, **changes) -> "Session":
        """A new, validated session with some fields changed."""
        return dataclasses.replace(self, **changes)

    def __eq__(self, other):
        if not isinstance(other, Session):
            return NotImplemented

        def same(a, b):
            # Edits share the arrays they do not touch, and an array made by ``with_values``
            # differs from its base only where it says: a cell edit of 16 heads of 512 × 512
            # weights compares one number, not 12 million.
            if a is b:
                return True
            if a is None or b is None or a.shape != b.shape:
                return False
            for x, y in ((a, b), (b, a)):
                known = derived_from(y)
                if known is not None and known[0] is x:
                    flat = known[1]
                    return bool(np.array_equal(x.reshape(-1)[flat], y.reshape(-1)[flat]))
            return bool(np.array_equal(a, b))

        return (
            self.tokens == other.tokens
            and same(self.embeddings, other.embeddings)
            and same(self.w_query, other.w_query)
            and same(self.w_key, other.w_key)
            and same(self.w_value, other.w_value)
            and same(self.w_out, other.w_out)
            and self.mask == other.mask
            and self.scale == other.scale
            and self.preset == other.preset
            and all(same(getattr(self, f), getattr(other, f)) for f in ("b_query", "b_key", "b_value", "b_out"))
            and self.norm == other.norm
            and self.positions == other.positions
            and self.source == other.source
        )

    __hash__ = None


def _checked_source(source) -> Source:
    """``source`` with its tokens and embeddings checked as the session's own are."""
    if not isinstance(source, Source):
        raise SessionError("must be a Source or None", "source")
    tokens = _checked_tokens(source.tokens, "source.tokens")  # the session's own rule
    if not 1 <= len(tokens) <= MAX_TOKENS:
        raise SessionError(f"has {len(tokens)} tokens, expected 1..{MAX_TOKENS}", "source.tokens")
    x = _frozen_matrix(source.embeddings, "source.embeddings", 2)
    if x.shape[0] != len(tokens):
        raise SessionError(f"has {x.shape[0]} rows, expected {len(tokens)} (one per source token)", "source.embeddings")
    if not 1 <= x.shape[1] <= MAX_DIM:
        raise SessionError(f"width {x.shape[1]} is outside 1..{MAX_DIM}", "source.embeddings")
    if tokens is source.tokens and x is source.embeddings:
        return source
    return Source(tokens, x)
