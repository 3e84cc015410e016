"""The session: everything a user can edit, as one immutable value.

A ``Session`` holds the tokens, the embeddings and the per-head weights in the ``x @ W``
convention (row vectors: ``Q = X @ W_q``), plus the mask, the scale and the preset it came
from. It is frozen: an edit makes a new session (``session.replace(...)``), which is what
makes undo, autosave and "compute on another thread" safe and simple.

Arrays are stored as read-only float64 numpy arrays, stacked over heads:
``w_query``/``w_key`` are ``(H, d, d_k)``, ``w_value`` is ``(H, d, d_v)``.
Constructing a session validates it; a bad one raises ``SessionError``. Its parts live
beside it: the mask in ``mask.py``, the bounds in ``limits.py``, the frozen arrays and the
copies an edit makes in ``session_arrays.py``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np

from ..kernel.attention import kv_head_map
from ..errors import SessionError
from .limits import MAX_DIM, MAX_HEADS, MAX_TOKEN_CHARS, MAX_TOKENS
from .mask import Mask
from .session_arrays import derived_from, frozen_matrix
from .stages import Norm, Positions, QKNorm, Source
from ..numbers.display import counted

ScaleKind = Literal["inv_sqrt_dk", "none", "temperature", "factor"]


@dataclass(frozen=True, eq=False)
class Scale:
    """How scores are scaled before the softmax.

    ``inv_sqrt_dk`` multiplies by 1/√d_k, ``none`` by 1, ``temperature`` τ > 0 means
    softmax(scores / τ), as in the sine walkthrough, and ``factor`` multiplies by the number
    ``multiplier`` as given (Gemma's query_pre_attn_scalar^−½ in place of d_k^−½).
    """

    kind: ScaleKind = "inv_sqrt_dk"
    temperature: float = 1.0
    multiplier: float = 1.0

    def __post_init__(self):
        if self.kind not in ("inv_sqrt_dk", "none", "temperature", "factor"):
            raise SessionError(f"unknown scale {self.kind!r}", "scale")
        m = self.multiplier
        if isinstance(m, bool) or not isinstance(m, (int, float, np.floating, np.integer)) or not _finite(m) or m <= 0:
            raise SessionError(f"must be a finite number > 0, got {m!r}", "scale.factor")
        object.__setattr__(self, "multiplier", float(m))
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
        # The temperature only matters for the temperature scale, the multiplier for the factor.
        if not isinstance(other, Scale):
            return NotImplemented
        return (self.kind == other.kind and (self.kind != "temperature" or self.temperature == other.temperature)
                and (self.kind != "factor" or self.multiplier == other.multiplier))

    def __hash__(self):
        return hash((self.kind, self.temperature if self.kind == "temperature" else None,
                     self.multiplier if self.kind == "factor" else None))

    def factor(self, d_k: int) -> float:
        """The number the raw scores are multiplied by."""
        if self.kind == "inv_sqrt_dk":
            return 1.0 / math.sqrt(d_k)
        if self.kind == "none":
            return 1.0
        if self.kind == "factor":
            return self.multiplier
        return 1.0 / self.temperature

    def describe(self, d_k: int) -> str:
        if self.kind == "inv_sqrt_dk":
            return f"÷√{d_k}"
        if self.kind == "none":
            return "unscaled"
        if self.kind == "factor":
            return f"× factor {self.multiplier:.6g}"
        return f"÷τ (τ = {self.temperature:g})"


def _finite(value) -> bool:
    try:  # an int beyond float64 (10**400) is not finite either
        return math.isfinite(value)
    except (TypeError, OverflowError):
        return False


@dataclass(frozen=True)
class PresetRef:
    """Where a session came from: a preset's name and the parameters it was built with.

    This checks the shape only (a name, string keys). Where a record comes in from outside,
    it is made with ``presets.preset_ref``, which checks a known preset's parameters against
    their bounds (the window shows them in its sliders): ``build_preset`` and the session
    file reader do so. Another name is kept as a label, with its parameters as given (a
    session file still requires them to be plain JSON). The presets import this module, so
    the check lives with them, not here.
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


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


# The newest token tuples that passed ``_checked_tokens``. An edit makes a new session that
# keeps its tokens (``Session.replace``), and checking 16,384 of them again, one Python step
# each, cost 2.5 ms of the GUI thread's processor time on every cell edit of a long session,
# in the stretch that starts its compute (bench/long_window.py). A tuple of strings cannot
# change, so the very same tuple checked once holds. Kept by reference (not ``id``), so a
# freed tuple's reused id cannot pass.
_CHECKED: collections.deque = collections.deque(maxlen=8)


def _checked_tokens(value, where: str) -> tuple[str, ...]:
    """``value`` as a tuple of token strings, or SessionError naming ``where`` (``tokens`` or
    ``source.tokens``): one rule for every sequence of tokens a session holds."""
    if type(value) is tuple and any(value is known for known in _CHECKED):
        return value
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
    if len(tokens) > 256:  # short ones cost less to check than to remember
        _CHECKED.append(tokens)
    return tokens


def control_character(text: str) -> str | None:
    """The first control character in ``text`` (C0, DEL or C1), or None.

    Tokens may not hold them: NUL is lost in npz files and breaks CSV on Python 3.10, and
    the others make invalid SVG and LaTeX or move a terminal's cursor. One rule, checked
    where every token passes (``Session``), covers files, the window, presets and the API.
    """
    found = _CONTROL.search(text)
    return None if found is None else found.group()



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
    # The stages of a real head (core/inputs/stages.py). None means absent: a zero bias, no
    # positions, no norm, self-attention. w_key/w_value (and b_key/b_value) may have fewer
    # heads than w_query (grouped-query attention).
    b_query: np.ndarray | None = None  # (H, d_k)
    b_key: np.ndarray | None = None  # (H_kv, d_k)
    b_value: np.ndarray | None = None  # (H_kv, d_v)
    b_out: np.ndarray | None = None  # (d_out,)
    norm: Norm | None = None
    positions: Positions | None = None
    source: Source | None = None
    # Version 3's stages: QK-norm before RoPE, soft-capping of the scaled scores (the cap c:
    # s → c·tanh(s/c)), and one learned sink logit per query head (H,) in every row's softmax.
    qk_norm: QKNorm | None = None
    softcap: float | None = None
    sinks: np.ndarray | None = None

    def __post_init__(self):
        tokens = _checked_tokens(self.tokens, "tokens")
        object.__setattr__(self, "tokens", tokens)
        n = len(tokens)
        if n < 1:
            raise SessionError("a session needs at least one token", "tokens")
        if n > MAX_TOKENS:
            raise SessionError(f"{n} tokens is more than the limit of {MAX_TOKENS}", "tokens")
        x = frozen_matrix(self.embeddings, "embeddings", 2)
        wq = frozen_matrix(self.w_query, "W_q", 3)
        wk = frozen_matrix(self.w_key, "W_k", 3)
        wv = frozen_matrix(self.w_value, "W_v", 3)
        if x.shape[0] != n:
            raise SessionError(f"has {counted(x.shape[0], 'row')}, expected {n} (one per token)", "embeddings")
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
                raise SessionError(f"has {counted(w.shape[1], 'row')}, expected {rows} ({rows_why})", name)
            if not 1 <= w.shape[2] <= MAX_DIM:
                raise SessionError(f"width {w.shape[2]} is outside 1..{MAX_DIM}", name)
        if wk.shape[2] != wq.shape[2]:
            raise SessionError(f"has {counted(wk.shape[2], 'column')}, expected {wq.shape[2]} (W_q and W_k share d_k)", "W_k")
        object.__setattr__(self, "embeddings", x)
        object.__setattr__(self, "w_query", wq)
        object.__setattr__(self, "w_key", wk)
        object.__setattr__(self, "w_value", wv)
        if self.w_out is not None:
            wo = frozen_matrix(self.w_out, "W_o", 2)
            if wo.shape[0] != h * wv.shape[2]:
                raise SessionError(f"has {counted(wo.shape[0], 'row')}, expected {h * wv.shape[2]} (heads × d_v)", "W_o")
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
        """Biases, norm and positions against the sizes (see core/inputs/stages.py)."""
        for field_name, name, rows, width, width_name in (
                ("b_query", "b_q", h, d_k, "d_k"), ("b_key", "b_k", h_kv, d_k, "d_k"), ("b_value", "b_v", h_kv, d_v, "d_v")):
            b = getattr(self, field_name)
            if b is None:
                continue
            b = frozen_matrix(b, name, 2)
            if b.shape[0] != rows:
                raise SessionError(f"has {b.shape[0]} heads, expected {rows}", name)
            if b.shape[1] != width:
                raise SessionError(f"has {counted(b.shape[1], 'number')} per head, expected {width_name} = {width}", name)
            object.__setattr__(self, field_name, b)
        if self.b_out is not None:
            b = frozen_matrix(self.b_out, "b_o", 1)
            d_out = h * d_v if self.w_out is None else self.w_out.shape[1]
            if self.w_out is None:
                raise SessionError("an output bias needs W_o", "b_o")
            if b.shape[0] != d_out:
                raise SessionError(f"has {counted(b.shape[0], 'number')}, expected d_out = {d_out} (the columns of W_o)", "b_o")
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
        if self.qk_norm is not None:
            if not isinstance(self.qk_norm, QKNorm):
                raise SessionError("must be a QKNorm or None", "qk_norm")
            self.qk_norm.check(h, h_kv, d_k)
        if self.softcap is not None:
            c = self.softcap
            if isinstance(c, bool) or not isinstance(c, (int, float, np.floating, np.integer)) or not _finite(c) or c <= 0:
                raise SessionError(f"must be a finite number > 0 (the cap of c·tanh(s/c)) or null, got {c!r}", "softcap")
            object.__setattr__(self, "softcap", float(c))
        if self.sinks is not None:
            sinks = frozen_matrix(self.sinks, "sinks", 1)
            if sinks.shape[0] != h:
                raise SessionError(f"has {counted(sinks.shape[0], 'number')}, expected one per head, heads = {h}", "sinks")
            object.__setattr__(self, "sinks", sinks)

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
        """Query head h uses K/V head h // (H / H_kv): (H,) ints, read-only."""
        return kv_head_map(self.heads, self.kv_heads)

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

    # In a notebook a session shows its computed weights (head 0), as its result does; a long
    # session shows its text repr rather than being computed for display.
    def _repr_svg_(self) -> str | None:
        from ..notebook.session_result import session_result

        result = session_result(self)
        return None if result is None else result._repr_svg_()

    def _repr_png_(self) -> bytes | None:
        from ..notebook.session_result import session_result

        result = session_result(self)
        return None if result is None else result._repr_png_()

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
            and self.qk_norm == other.qk_norm
            and self.softcap == other.softcap
            and same(self.sinks, other.sinks)
        )

    __hash__ = None


def _checked_source(source) -> Source:
    """``source`` with its tokens and embeddings checked as the session's own are."""
    if not isinstance(source, Source):
        raise SessionError("must be a Source or None", "source")
    tokens = _checked_tokens(source.tokens, "source.tokens")  # the session's own rule
    if not 1 <= len(tokens) <= MAX_TOKENS:
        raise SessionError(f"has {len(tokens)} tokens, expected 1..{MAX_TOKENS}", "source.tokens")
    x = frozen_matrix(source.embeddings, "source.embeddings", 2)
    if x.shape[0] != len(tokens):
        raise SessionError(f"has {counted(x.shape[0], 'row')}, expected {len(tokens)} (one per source token)", "source.embeddings")
    if not 1 <= x.shape[1] <= MAX_DIM:
        raise SessionError(f"width {x.shape[1]} is outside 1..{MAX_DIM}", "source.embeddings")
    if tokens is source.tokens and x is source.embeddings:
        return source
    return Source(tokens, x)
