"""The optional stages of a real transformer head, as immutable values a Session holds.

- ``Norm``: LayerNorm or RMSNorm applied to E + P before the projections (pre-norm).
- ``Positions``: sinusoidal or learned absolute positions (added to E), RoPE (rotates Q and
  K) or ALiBi (a bias added to the scaled scores).
- ``QKNorm``: LayerNorm or RMSNorm of each query and key (head, or whole projection) before
  RoPE; ``RopeScaling``: RoPE's frequencies stretched for long contexts (linear, llama3, yarn).
- ``Source``: the second sequence of cross-attention, whose rows the keys and values are
  made from.

Each checks what it can alone on construction; what depends on the rest of the session (d,
d_k, the number of heads and tokens) is checked by ``Session``. The arithmetic that defines a
stage and that the engine, the explanations and the tests share (the sinusoidal table, the
ALiBi slopes, the RoPE pairs and angles) is here as small numpy functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import SessionError
from .limits import bound_problem
from ..numbers.display import counted
from ..kernel.position_encoding import rope_angles, rope_frequencies  # noqa: F401 - the panels' and the bench's, from here as before

NormKind = Literal["layer", "rms"]
PositionsKind = Literal["sinusoidal", "learned", "rope", "alibi"]
RopeLayout = Literal["half", "interleaved"]

# A RoPE offset shifts every position; large enough for any real context, small enough that
# the angles stay exact in float64.
MAX_OFFSET = 1_000_000


def _positive(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SessionError(f"must be a number, got {value!r}", where)
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise SessionError(f"must be a finite number > 0, got {value!r}", where)
    return v


def _bounded(value, bound: str, where: str | None = None) -> float:
    """A finite number within ``limits.BOUNDS[bound]``, or SessionError saying the bound
    (naming ``where``, by default the bound's own field)."""
    where = bound if where is None else where
    v = _positive(value, where)
    problem = bound_problem(bound, v)
    if problem:
        raise SessionError(problem, where)
    return v


def _whole(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _vector(value, where: str) -> np.ndarray:
    """A read-only float64 copy of a 1-D array of finite numbers, or SessionError."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raise SessionError("must be a list of numbers", where) from None
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    a = np.array(raw, dtype=np.float64)
    if a.ndim != 1:
        raise SessionError(f"must be a list of numbers, got shape {a.shape}", where)
    if not np.isfinite(a).all():
        raise SessionError(f"holds a non-finite number at [{int(np.argwhere(~np.isfinite(a))[0][0])}]", where)
    a.flags.writeable = False
    return a


def _table(value, where: str) -> np.ndarray:
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raise SessionError("must be a 2-dimensional array of numbers with rows of equal length", where) from None
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    a = np.array(raw, dtype=np.float64)
    if a.ndim != 2:
        raise SessionError(f"must be 2-dimensional, got shape {a.shape}", where)
    if not np.isfinite(a).all():
        idx = [int(k) for k in np.argwhere(~np.isfinite(a))[0]]
        raise SessionError(f"holds a non-finite number at {idx}", where)
    a.flags.writeable = False
    return a


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool(np.array_equal(a, b))


@dataclass(frozen=True, eq=False)
class Norm:
    """Pre-attention normalisation of each row x of E + P (width d).

    ``layer``: (x − mean(x)) / sqrt(var(x) + eps) · weight + bias, the variance biased (÷ d),
    as ``nn.LayerNorm``; ``bias`` None means zeros. ``rms``: x / sqrt(mean(x²) + eps) · weight,
    as ``nn.RMSNorm``; it has no bias. ``weight`` None means ones.
    """

    kind: NormKind
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    eps: float = 1e-5

    def __post_init__(self):
        if self.kind not in ("layer", "rms"):
            raise SessionError(f"unknown kind {self.kind!r}, expected \"layer\" or \"rms\"", "norm.kind")
        if self.weight is not None:
            object.__setattr__(self, "weight", _vector(self.weight, "norm.weight"))
        if self.bias is not None:
            if self.kind == "rms":
                raise SessionError("RMSNorm has no bias", "norm.bias")
            object.__setattr__(self, "bias", _vector(self.bias, "norm.bias"))
        object.__setattr__(self, "eps", _bounded(self.eps, "norm.eps"))

    def check(self, d: int) -> None:
        for name, v in (("weight", self.weight), ("bias", self.bias)):
            if v is not None and v.shape[0] != d:
                raise SessionError(f"has {counted(v.shape[0], 'number')}, expected d = {d} (the embedding width)", f"norm.{name}")

    def weight_or_ones(self, d: int) -> np.ndarray:
        return np.ones(d) if self.weight is None else self.weight

    def bias_or_zeros(self, d: int) -> np.ndarray:
        return np.zeros(d) if self.bias is None else self.bias

    def __eq__(self, other):
        if not isinstance(other, Norm):
            return NotImplemented
        return (self.kind == other.kind and self.eps == other.eps and _same(self.weight, other.weight)
                and _same(self.bias, other.bias))

    __hash__ = None


QKNormOver = Literal["head", "all"]


@dataclass(frozen=True, eq=False)
class QKNorm:
    """QK-norm: LayerNorm or RMSNorm of each query and each key after the projection (and its
    bias) and before RoPE (Qwen3, Gemma 3, OLMo 2; ``attention.normalise_heads``).

    ``over`` "head": each head's d_k numbers are one row of the norm, and a weight (or bias)
    has d_k numbers shared by every head or heads·d_k (head h's at h·d_k …); "all": a token's
    whole projection (heads·d_k numbers, H_kv·d_k for the keys) is one row, OLMo 2's.
    ``query_weight``/``key_weight`` None mean ones; the biases (LayerNorm only) None, zeros.
    A model whose RMSNorm multiplies by 1 + w (Gemma) is held with its effective weight 1 + w.
    """

    kind: NormKind
    over: QKNormOver = "head"
    eps: float = 1e-6
    query_weight: np.ndarray | None = None
    key_weight: np.ndarray | None = None
    query_bias: np.ndarray | None = None
    key_bias: np.ndarray | None = None

    def __post_init__(self):
        if self.kind not in ("layer", "rms"):
            raise SessionError(f"unknown kind {self.kind!r}, expected \"layer\" or \"rms\"", "qk_norm.kind")
        if self.over not in ("head", "all"):
            raise SessionError(f"is {self.over!r}, expected \"head\" or \"all\"", "qk_norm.over")
        for name in ("query_weight", "key_weight", "query_bias", "key_bias"):
            value = getattr(self, name)
            if value is None:
                continue
            if name.endswith("bias") and self.kind == "rms":
                raise SessionError("RMSNorm has no bias", f"qk_norm.{name}")
            object.__setattr__(self, name, _vector(value, f"qk_norm.{name}"))
        object.__setattr__(self, "eps", _bounded(self.eps, "norm.eps", "qk_norm.eps"))

    def check(self, heads: int, kv_heads: int, d_k: int) -> None:
        """Raise SessionError when a weight's length does not fit the heads."""
        for side, count in (("query", heads), ("key", kv_heads)):
            for part in ("weight", "bias"):
                v = getattr(self, f"{side}_{part}")
                if v is None:
                    continue
                sizes = (d_k, count * d_k) if self.over == "head" else (count * d_k,)
                if v.shape[0] not in sizes:
                    heads_word = "heads" if side == "query" else "K/V heads"
                    expected = (f"d_k = {d_k} (shared by the heads) or {count} {heads_word} × d_k = {count * d_k}"
                                if self.over == "head" else f"{count} {heads_word} × d_k = {count * d_k} (over \"all\")")
                    raise SessionError(f"has {counted(v.shape[0], 'number')}, expected {expected}", f"qk_norm.{side}_{part}")

    def __eq__(self, other):
        if not isinstance(other, QKNorm):
            return NotImplemented
        return ((self.kind, self.over, self.eps) == (other.kind, other.over, other.eps)
                and all(_same(getattr(self, f), getattr(other, f))
                        for f in ("query_weight", "key_weight", "query_bias", "key_bias")))

    __hash__ = None


RopeScalingKind = Literal["linear", "llama3", "yarn"]
RopeAngles = Literal["float64", "float32"]
# The fields each kind of RoPE scaling reads (transformers' rope_parameters names).
SCALING_FIELDS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"),
}


@dataclass(frozen=True)
class RopeScaling:
    """How a long-context model stretches RoPE's frequencies (``attention.rope_inv_freq`` has
    the formulas, transformers' ``rope_type`` names): ``linear`` divides every frequency by
    ``factor``; ``llama3`` divides the low frequencies only, blending between
    ``low_freq_factor`` and ``high_freq_factor`` of ``original_max_position_embeddings``;
    ``yarn`` blends between the pairs turning ``beta_fast`` and ``beta_slow`` times over the
    original length and multiplies cos and sin by ``attention_factor`` (None: 0.1·ln(factor)
    + 1, transformers' default). Only the fields of ``kind`` matter."""

    kind: RopeScalingKind
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self):
        if self.kind not in SCALING_FIELDS:
            raise SessionError(f"unknown kind {self.kind!r}, expected \"linear\", \"llama3\" or \"yarn\"",
                               "positions.scaling.kind")
        fields = SCALING_FIELDS[self.kind]
        for name in ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            if name in fields:
                object.__setattr__(self, name, _positive(getattr(self, name), f"positions.scaling.{name}"))
        if "original_max_position_embeddings" in fields:
            m = self.original_max_position_embeddings
            if not _whole(m) or not 1 <= m <= 100_000_000:
                raise SessionError(f"{m!r} must be a whole number in 1..100000000",
                                   "positions.scaling.original_max_position_embeddings")
            object.__setattr__(self, "original_max_position_embeddings", int(m))
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise SessionError(f"is {self.high_freq_factor!r}; it must be larger than low_freq_factor "
                               f"({self.low_freq_factor!r})", "positions.scaling.high_freq_factor")
        if self.kind == "yarn":
            if self.attention_factor is not None:
                object.__setattr__(self, "attention_factor",
                                   _positive(self.attention_factor, "positions.scaling.attention_factor"))
            if not isinstance(self.truncate, (bool, np.bool_)):
                raise SessionError(f"is {self.truncate!r}, expected true or false", "positions.scaling.truncate")
            object.__setattr__(self, "truncate", bool(self.truncate))
        # Fields another kind reads go back to their defaults, so equal scalings compare equal.
        for f in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "beta_fast",
                  "beta_slow", "attention_factor", "truncate"):
            if f not in fields:
                object.__setattr__(self, f, RopeScaling.__dataclass_fields__[f].default)

    @classmethod
    def from_rope_parameters(cls, params, max_position_embeddings: int | None = None) -> "RopeScaling | None":
        """The scaling a transformers config's ``rope_parameters`` (or older ``rope_scaling``)
        describes: None for ``default`` (no scaling), a ``RopeScaling`` for ``linear``,
        ``llama3`` and ``yarn`` with every value transformers' ``ROPE_INIT_FUNCTIONS`` would
        use (YaRN's attention factor worked out from ``mscale``/``mscale_all_dim`` when the
        config gives them, its factor from the lengths when it gives none); SessionError
        naming ``positions.scaling.kind`` for another kind (``dynamic``, ``longrope``: their
        frequencies depend on the text's length)."""
        if params is None:
            return None
        kind = params.get("rope_type", params.get("type", "default"))
        if kind == "default":
            return None
        if kind not in SCALING_FIELDS:
            raise SessionError(f"rope type {kind!r} is not supported; attnexplorer reads linear, llama3 and yarn",
                               "positions.scaling.kind")
        if kind == "linear":
            return cls("linear", factor=params["factor"])
        if kind == "llama3":
            return cls("llama3", factor=params["factor"], low_freq_factor=params["low_freq_factor"],
                       high_freq_factor=params["high_freq_factor"],
                       original_max_position_embeddings=params["original_max_position_embeddings"])
        original = params["original_max_position_embeddings"]
        factor = params.get("factor")
        if factor is None and max_position_embeddings is not None:
            factor = max_position_embeddings / original
        attention = params.get("attention_factor")
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if attention is None and mscale and mscale_all_dim:
            def m(scale, weight):
                return 1.0 if scale <= 1 else 0.1 * weight * math.log(scale) + 1.0

            attention = float(m(factor, mscale) / m(factor, mscale_all_dim))
        return cls("yarn", factor=factor, original_max_position_embeddings=original,
                   beta_fast=params.get("beta_fast") or 32.0, beta_slow=params.get("beta_slow") or 1.0,
                   attention_factor=attention, truncate=params.get("truncate", True))

    @property
    def yarn_attention_factor(self) -> float:
        """What YaRN multiplies cos and sin by (1 for the other kinds)."""
        if self.kind != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return self.attention_factor
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0

    def describe(self) -> str:
        if self.kind == "linear":
            return f"linear ÷{self.factor:g}"
        if self.kind == "llama3":
            return (f"llama3 ÷{self.factor:g} (low {self.low_freq_factor:g}, high {self.high_freq_factor:g}, "
                    f"original {self.original_max_position_embeddings})")
        return (f"yarn ×{self.factor:g} (original {self.original_max_position_embeddings}, β {self.beta_fast:g}/"
                f"{self.beta_slow:g}, attention ×{self.yarn_attention_factor:.6g})")


@dataclass(frozen=True, eq=False)
class Positions:
    """Where position enters: ``sinusoidal``/``learned`` add P to E; ``rope`` rotates Q and K;
    ``alibi`` adds −slope_h·|i − j| to the scaled scores.

    Only the fields of ``kind`` matter: ``base`` (sinusoidal); ``table`` (learned, rows × d, at
    least one row per token); ``theta``, ``dims`` (None: all of d_k; fewer: partial rotary, the
    rest of each head passes unturned), ``layout``, ``offset``, ``scaling`` (a ``RopeScaling``
    or None) and ``angles`` (rope: "float64" makes the angles in float64; "float32" makes the
    frequencies and position × frequency in float32 as transformers does, so an imported
    layer rounds as its model at every length); ``slopes`` (alibi, one per head; None: the
    paper's geometric slopes).
    """

    kind: PositionsKind
    base: float = 10000.0
    table: np.ndarray | None = None
    theta: float = 10000.0
    dims: int | None = None
    layout: RopeLayout = "half"
    offset: int = 0
    slopes: np.ndarray | None = None
    scaling: RopeScaling | None = None
    angles: RopeAngles = "float64"

    def __post_init__(self):
        if self.kind not in ("sinusoidal", "learned", "rope", "alibi"):
            raise SessionError(f"unknown kind {self.kind!r}, expected \"sinusoidal\", \"learned\", \"rope\" or \"alibi\"",
                               "positions.kind")
        object.__setattr__(self, "base", _bounded(self.base, "positions.base"))
        object.__setattr__(self, "theta", _bounded(self.theta, "positions.theta"))
        if self.kind == "learned":
            if self.table is None:
                raise SessionError("learned positions need a table (one row per position)", "positions.table")
            object.__setattr__(self, "table", _table(self.table, "positions.table"))
        elif self.table is not None:
            object.__setattr__(self, "table", None)
        if self.dims is not None:
            if not _whole(self.dims) or self.dims < 2 or self.dims % 2:
                raise SessionError(f"{self.dims!r} must be an even whole number >= 2", "positions.dims")
            object.__setattr__(self, "dims", int(self.dims))
        if self.layout not in ("half", "interleaved"):
            raise SessionError(f"is {self.layout!r}, expected \"half\" or \"interleaved\"", "positions.layout")
        if not _whole(self.offset) or not 0 <= self.offset <= MAX_OFFSET:
            raise SessionError(f"{self.offset!r} must be a whole number in 0..{MAX_OFFSET}", "positions.offset")
        object.__setattr__(self, "offset", int(self.offset))
        if self.slopes is not None:
            object.__setattr__(self, "slopes", _vector(self.slopes, "positions.slopes"))
        if self.scaling is not None and not isinstance(self.scaling, RopeScaling):
            raise SessionError("must be a RopeScaling or None", "positions.scaling")
        if self.angles not in ("float64", "float32"):
            raise SessionError(f"is {self.angles!r}, expected \"float64\" or \"float32\"", "positions.angles")
        if self.kind != "rope":  # only RoPE has frequencies to scale or round
            object.__setattr__(self, "scaling", None)
            object.__setattr__(self, "angles", "float64")

    @property
    def absolute(self) -> bool:
        """Whether P is added to the embeddings (sinusoidal or learned)."""
        return self.kind in ("sinusoidal", "learned")

    def check(self, n: int, d: int, d_k: int, heads: int) -> None:
        """Raise SessionError when these positions do not fit the session's sizes."""
        if self.kind == "learned":
            rows, cols = self.table.shape
            if cols != d:
                raise SessionError(f"has {counted(cols, 'column')}, expected d = {d} (the embedding width)", "positions.table")
            if rows < n:
                raise SessionError(f"has {counted(rows, 'row')}, fewer than the {n} tokens", "positions.table")
        if self.kind == "rope" and self.dims is not None and self.dims > d_k:
            raise SessionError(f"{self.dims} must be even and at most d_k = {d_k}", "positions.dims")
        if self.kind == "rope" and self.dims is None and d_k % 2:
            raise SessionError(f"RoPE rotates pairs of dimensions; d_k = {d_k} is odd, so set dims to an even number",
                               "positions.dims")
        if self.kind == "alibi" and self.slopes is not None and self.slopes.shape[0] != heads:
            raise SessionError(f"has {counted(self.slopes.shape[0], 'number')}, expected one per head ({heads})", "positions.slopes")

    def rope_dims(self, d_k: int) -> int:
        return d_k if self.dims is None else self.dims

    def slopes_for(self, heads: int) -> np.ndarray:
        return alibi_slopes(heads) if self.slopes is None else self.slopes

    def __eq__(self, other):
        if not isinstance(other, Positions):
            return NotImplemented
        if self.kind != other.kind:
            return False
        if self.kind == "sinusoidal":
            return self.base == other.base
        if self.kind == "learned":
            return _same(self.table, other.table)
        if self.kind == "rope":
            return ((self.theta, self.dims, self.layout, self.offset, self.scaling, self.angles)
                    == (other.theta, other.dims, other.layout, other.offset, other.scaling, other.angles))
        return _same(self.slopes, other.slopes)

    __hash__ = None


@dataclass(frozen=True, eq=False)
class Source:
    """The source sequence of cross-attention (an encoder's output): keys and values are made
    from its rows, used as they are (no positions, no norm: an encoder has applied its own)."""

    tokens: tuple[str, ...]
    embeddings: np.ndarray

    def __eq__(self, other):
        if not isinstance(other, Source):
            return NotImplemented
        return self.tokens == other.tokens and _same(self.embeddings, other.embeddings)

    __hash__ = None

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def d(self) -> int:
        return self.embeddings.shape[1]


# -- the arithmetic the stages define ---------------------------------------------------

def sinusoidal_table(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)), (n, d)."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    two_i = np.arange(0, d, 2, dtype=np.float64)
    angle = pos / base ** (two_i / d)
    pe = np.zeros((n, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe


def alibi_slopes(heads: int) -> np.ndarray:
    """The ALiBi paper's slopes: 2^(−8h/H) for h = 1..H when H is a power of two; otherwise
    those of the nearest lower power of two, then every other slope of twice as many heads
    (the paper's reference code)."""
    def powers(m: int) -> list[float]:
        start = 2.0 ** (-8.0 / m)
        return [start ** (i + 1) for i in range(m)]

    m = 2 ** int(math.floor(math.log2(heads)))
    slopes = powers(m)
    if m < heads:
        slopes += powers(2 * m)[0::2][: heads - m]
    return np.array(slopes, dtype=np.float64)


def rope_pairs(dims: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The rotated pairs (a[i], b[i]), i < dims/2: (i, i + dims/2) for ``half``, (2i, 2i+1)
    for ``interleaved``. Pair i turns by angle position · theta^(−2i/dims)."""
    half = dims // 2
    if layout == "half":
        return np.arange(half), np.arange(half) + half
    return np.arange(0, dims, 2), np.arange(1, dims, 2)


def norm_statistics(kind: str, rows, eps: float) -> tuple[np.ndarray | None, np.ndarray]:
    """What the norm does to each row x of E + P, before its weight and bias: (mean, scale).

    ``layer``: mean(x) and 1/√(var(x) + eps) (the variance biased, ÷ d), so x is centred and
    then multiplied by the scale; ``rms``: no mean (None) and 1/√(mean(x²) + eps). float64,
    one number per row. The window's stage panel and the explanations read them from here.
    """
    x = np.asarray(rows, dtype=np.float64)
    # Scaled by each row's largest |entry| first (the norm is the same on x / s with eps / s²),
    # so that squaring a row of 1e200 cannot overflow: the engine's norm does the same.
    s = np.maximum(np.abs(x).max(axis=1, initial=0.0), 1.0)
    x = x / s[:, None]
    eps_scaled = eps / s / s
    if kind == "layer":
        mean = x.mean(axis=1)
        var = ((x - mean[:, None]) ** 2).mean(axis=1)
        return mean * s, 1.0 / np.sqrt(var + eps_scaled) / s
    return None, 1.0 / np.sqrt((x * x).mean(axis=1) + eps_scaled) / s
