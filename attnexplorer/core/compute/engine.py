"""The compute engine: a pure function from a session to every intermediate.

``compute(session)`` runs scaled dot-product self-attention for all heads at once (batched
over a head dimension, never a Python loop over heads) with PyTorch, on the CPU or a GPU, and
returns an ``AttentionResult`` of numpy arrays on the host. The window and the CLI never do
attention arithmetic themselves; they call this. The arithmetic itself is ``attention.attend``,
a torch-level function that fitting also calls (with autograd), so what is trained is what is
shown; this module adds the device, dtype, caching, overflow checks and host arrays around it.
After a small edit the projections are made from the previous ones (``projection_reuse``):
only the columns or rows that the edit changed are multiplied again.

torch is imported lazily so that ``attnexplorer --help`` and the file tools stay instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from ..kernel.attention import (INTERMEDIATES, STAGE_INTERMEDIATES, AttentionInputs, AttentionOverflow, attend, kv_head_map,
                        split_projections)
from .device_inputs import cannot_overflow, device_flags, device_tensor, done_reading, projection_weights
from .stage_inputs import positions_array, stage_bound, stage_tensors
from ..errors import EngineError
from .blocked_cells import mask_and_blocked_rows
from .memory import check_memory
from .projection_reuse import reuse_linear
from ..inputs.session import Session

DTYPES = ("float32", "float64", "float16", "bfloat16")

# INTERMEDIATES (from .attention): every intermediate the result can carry, in order.
_EVERYTHING = frozenset(INTERMEDIATES)
_KEEPABLE = _EVERYTHING | frozenset(STAGE_INTERMEDIATES)


def _torch():
    import torch

    return torch


def torch_devices() -> list[str]:
    """Devices torch can use here: always ``cpu``, then ``cuda``/``mps`` when present."""
    torch = _torch()
    devices = ["cpu"]
    try:
        if torch.cuda.is_available():
            devices.append("cuda")
    except Exception:  # a broken driver must not take the app down; the CPU still works
        pass
    try:
        if torch.backends.mps.is_available():
            devices.append("mps")
    except Exception:
        pass
    return devices


@functools.lru_cache(maxsize=None)
def dtype_works(device: str, dtype: str) -> bool:
    """Whether the kernels the engine needs (matmul, masked softmax) run in ``dtype`` on ``device``.

    Support for the half types differs between torch builds and GPUs (bfloat16 needs a recent
    GPU or macOS), so we ask the device itself once with a tiny problem instead of keeping a
    table that goes stale.
    """
    torch = _torch()
    try:
        with torch.inference_mode():
            t = getattr(torch, dtype)
            x = torch.ones(2, 2, 2, dtype=t, device=device)
            s = x @ x.transpose(-1, -2)
            m = torch.tensor([[False, True], [False, False]], device=device)
            w = torch.softmax(s.masked_fill(m, float("-inf")), dim=-1)
            (w @ x).float().cpu()
        return True
    except Exception:  # any refusal (RuntimeError, TypeError, NotImplementedError) means "no"
        return False


class Devices:
    """Where the engine may compute and in which number types, and the torch device and dtype
    for a choice (``resolve``), kept once resolved: every compute asks again, and devices do
    not come and go while we run.

    ``available()`` lists the devices and ``dtype_works(device, dtype)`` says whether a device
    runs the engine's kernels in a dtype; by default torch is asked (``torch_devices``,
    ``dtype_works``). ``DEVICES`` is the engine's own; another machine's (one without CUDA,
    or a device that refuses a dtype) is a ``Devices`` with its own answers.
    """

    def __init__(self, available=torch_devices, dtype_works=dtype_works):
        self.available = available
        self.dtype_works = dtype_works
        self._resolved: dict = {}

    def supported_dtypes(self, device: str) -> list[str]:
        """Dtypes the engine offers on ``device``, in ``DTYPES`` order (float32 first).

        float32 is always offered on an available device; the others only where a trial run on
        the device works (float64 does not exist on mps; half types need kernel support).
        """
        base = device.split(":")[0] if isinstance(device, str) else device
        if base not in self.available():
            return []
        if base == "mps":  # mps has no float64 at all; do not even try
            candidates = [t for t in DTYPES if t != "float64"]
        else:
            candidates = list(DTYPES)
        return [t for t in candidates if t == "float32" or self.dtype_works(base, t)]

    def resolve(self, device: str, dtype: str):
        """Check ``device`` and ``dtype`` and return the torch objects, or raise EngineError.

        ``device`` is ``cpu``, ``cuda``, ``cuda:N`` or ``mps``; ``dtype`` one of ``DTYPES``. The
        messages name what is available instead.
        """
        resolved = self._resolved
        hit = resolved.get((device, dtype)) if isinstance(device, str) and isinstance(dtype, str) else None
        if hit is not None:
            return hit
        torch = _torch()
        if not isinstance(device, str):
            raise EngineError(f"device must be a name such as 'cpu' or 'cuda', got {device!r}")
        if not isinstance(dtype, str):
            raise EngineError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if device == "cpu" and dtype in ("float32", "float64"):
            # Always there: skip the device and dtype probes.
            return resolved.setdefault((device, dtype), (torch.device("cpu"), getattr(torch, dtype)))
        base, _, index = device.partition(":")
        devices = self.available()
        if base not in devices:
            raise EngineError(f"device {device!r} is not available here; available: {', '.join(devices)}")
        if ":" in device:
            if base != "cuda" or not index.isdigit():
                raise EngineError(f"device {device!r} is not a valid device name; available: {', '.join(devices)}")
            count = torch.cuda.device_count()
            if int(index) >= count:
                raise EngineError(f"device {device!r} is not available here; there are {count} CUDA devices "
                                  f"(cuda:0..cuda:{count - 1})")
        if dtype not in DTYPES:
            raise EngineError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
        offered = self.supported_dtypes(base)
        if dtype not in offered:
            raise EngineError(f"dtype {dtype} is not supported on {base}; choose one of {', '.join(offered)}")
        return resolved.setdefault((device, dtype), (torch.device(device), getattr(torch, dtype)))


DEVICES = Devices()


def available_devices() -> list[str]:
    """Devices the engine can use here (``DEVICES``): always ``cpu``, then ``cuda``/``mps``."""
    return DEVICES.available()


def supported_dtypes(device: str) -> list[str]:
    """Dtypes the engine offers on ``device`` (``Devices.supported_dtypes``)."""
    return DEVICES.supported_dtypes(device)


def resolve(device: str, dtype: str):
    """The torch device and dtype for a choice, or EngineError (``Devices.resolve``)."""
    return DEVICES.resolve(device, dtype)


@dataclass(frozen=True, eq=False)
class AttentionResult:
    """Every intermediate of one computation, as host numpy arrays.

    Shapes (H query heads, H_kv K/V heads, n tokens, n_k keys: n, or the source's length in
    cross-attention): ``Q`` (H, n, d_k); ``K`` (H_kv, n_k, d_k); ``V`` (H_kv, n_k, d_v);
    ``scores`` raw QKᵀ, ``scaled_scores`` (scores × scale factor + position_bias, not masked)
    and ``weights`` (H, n, n_k); ``mask`` (n, n_k), True = blocked (for a long result a
    ``core.compute.blocked_cells.MaskMatrix``, read like the array but made a block at a time); ``head_outputs``
    (H, n, d_v); ``concat`` (n, H·d_v); ``output`` is ``concat @ W_o + b_o`` when the session
    has W_o, else ``concat``. ``blocked_rows`` (n,) flags queries whose every key is blocked:
    their weights and outputs are 0, never NaN. Blocked cells of other rows have weight
    exactly 0. Arrays are read-only; they are float64 for a float64 compute, float32 otherwise
    (half types are widened to float32 on the way to the host). An intermediate not asked for
    (see ``compute(keep=...)``) is ``None``.

    The stages of a real head (None when the session does not use them): ``E`` is the
    session's embeddings as given; ``P`` (n, d) the absolute positions added to them; ``X``
    (n, d) the attention input, norm(E + P) (``E`` itself when neither applies);
    ``Q_unrotated``/``K_unrotated`` Q and K before RoPE (``Q``/``K`` are after it);
    ``Q_unnormed``/``K_unnormed`` Q and K before QK-norm; ``sink_share`` (H, n) the attention
    sink's share of each query's softmax (the weights over the real keys then sum to
    1 − sink_share);
    ``position_bias`` (H, n, n), ALiBi's −slope·|i − j|; ``kv_head_of`` (H,) the K/V head
    each query head reads; ``source_tokens`` and ``source_X`` (n_k, d_s), the source sequence
    of cross-attention as given.

    ``session`` is the exact session the result was computed from: a view or an export reads
    tokens, mask, scale and embeddings from it, never from "the current session", which may
    already be one edit further.
    """

    session: Session
    scale_factor: float
    mask: np.ndarray
    blocked_rows: np.ndarray
    Q: np.ndarray | None
    K: np.ndarray | None
    V: np.ndarray | None
    scores: np.ndarray | None
    scaled_scores: np.ndarray | None
    weights: np.ndarray | None
    head_outputs: np.ndarray | None
    concat: np.ndarray | None
    output: np.ndarray | None
    device: str = "cpu"
    dtype: str = "float32"
    compute_ms: float = 0.0
    E: np.ndarray | None = None
    P: np.ndarray | None = None
    X: np.ndarray | None = None
    Q_unrotated: np.ndarray | None = None
    K_unrotated: np.ndarray | None = None
    position_bias: np.ndarray | None = None
    Q_unnormed: np.ndarray | None = None
    K_unnormed: np.ndarray | None = None
    sink_share: np.ndarray | None = None
    kv_head_of: np.ndarray | None = None
    source_tokens: tuple[str, ...] | None = None
    source_X: np.ndarray | None = None
    # A long session's result (core/compute/long): the n × n intermediates are None, and this
    # StreamedResult gives their exact tiles, rows and pooled overviews instead.
    streamed: object | None = None

    @property
    def heads(self) -> int:
        for a in (self.weights, self.Q, self.head_outputs):
            if a is not None:
                return a.shape[0]
        return 0

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.session.tokens

    @property
    def n(self) -> int:
        return self.session.n

    def is_for(self, session: Session) -> bool:
        """Whether this result was computed from ``session`` (the same object, or an equal one)."""
        return self.session is session or self.session == session

    @property
    def key_tokens(self) -> tuple[str, ...]:
        """The keys' labels: the source's tokens in cross-attention, else the tokens."""
        return self.tokens if self.source_tokens is None else self.source_tokens

    @property
    def any_blocked_rows(self) -> bool:
        return bool(self.blocked_rows.any())

    # -- in a notebook: the weights heatmap of head 0 with its tokens (core/notebook/figure) --
    def _repr_svg_(self) -> str | None:
        from ..notebook.figure import weights_svg

        return None if self.weights is None else weights_svg(self, 0)

    def _repr_png_(self) -> bytes | None:
        from ..notebook.figure import weights_png

        return None if self.weights is None else weights_png(self, 0)

    # -- one interface for dense and long results ---------------------------------------------
    # A view, an export or an explanation reads the n × n_k matrices through these, whichever
    # path computed the result: a dense result holds them as arrays, a long one (core/compute/long)
    # makes any part of them exactly from Q, K and the row normalisers.

    @property
    def tiled(self) -> bool:
        """Whether the n × n_k matrices are read in parts (a long result), never whole."""
        return self.streamed is not None

    def matrix(self, name: str, head: int):
        """Head ``head``'s (n, n_k) matrix ``name`` (one of ``MATRICES``): the array of a dense
        result, a ``core.compute.long.tiled.TiledMatrix`` of a long one (``StreamedResult.matrix``) (exact ``m[r0:r1, c0:c1]`` and
        ``m[i, j]``, and a pooled ``overview``; never made whole). None when the result does
        not carry it (not kept, or a stage the session does not use)."""
        _check_matrix(name)
        self._check_index(head, self.session.heads, "head")
        if self.streamed is not None:
            return self.streamed.matrix(head, name)
        values = getattr(self, name)
        return None if values is None else values[head]

    def row(self, name: str, head: int, query: int) -> np.ndarray | None:
        """Query ``query``'s row of matrix ``name`` in ``head`` (n_k,), exact, the same way for
        both kinds of result. A dense result computed without the matrix (a large session
        keeps only what its panels show) makes the row from its Q and K with the engine's own
        kernel (``attention.attention_block``) instead; None when it cannot (no Q and K, or
        ALiBi's bias in a session without ALiBi)."""
        _check_matrix(name)
        self._check_index(head, self.session.heads, "head")
        self._check_index(query, self.n, "query")
        if self.streamed is not None:
            if name == "position_bias" and self.streamed.alibi_slopes is None:
                return None
            return getattr(self.streamed.row(head, query), name)
        values = getattr(self, name)
        if values is not None:
            return values[head, query]
        if name == "position_bias":
            p = self.session.positions
            if p is None or p.kind != "alibi":
                return None
            return to_host(_alibi_row(p.slopes_for(self.session.heads)[head:head + 1], query, self.session.n_keys,
                                      self.Q.dtype if self.Q is not None else np.float64))
        if self.Q is None or self.K is None:
            return None
        return _row_from_qk(self, name, head, query)

    @staticmethod
    def _check_index(value, count: int, what: str) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < count:
            raise EngineError(f"{what} {value!r} is outside 0..{count - 1}")

    def rows(self, name: str, head: int, rows) -> np.ndarray:
        """Rows ``rows`` (a step-1 slice or a list of indices) of matrix ``name`` in ``head``,
        (len(rows), n_k), exact: a long result makes them from its tiles."""
        if self.streamed is not None:
            return self.streamed.rows(head, rows, name)
        values = getattr(self, name)
        if values is None:
            raise EngineError(f"this result does not hold the {name.replace('_', ' ')}")
        return np.asarray(values[head, rows])

    @property
    def log_sum_exp(self) -> np.ndarray | None:
        """log Σ_j exp(scaled score) over each query's unblocked keys, (H, n) (−inf for a fully
        blocked query): a long result's from its row normalisers, a dense one's from its
        scaled scores (None when it was computed without them)."""
        if self.streamed is not None:
            return self.streamed.log_sum_exp
        if self.scaled_scores is None:
            return None
        torch = _torch()
        with torch.inference_mode():
            scaled = torch.from_numpy(np.array(self.scaled_scores))
            mask = np.asarray(self.mask)
            if mask.any():
                scaled = scaled.masked_fill(torch.from_numpy(np.array(mask, dtype=bool)), float("-inf"))
            return to_host(torch.logsumexp(scaled, dim=-1))

    @property
    def pooled_by(self) -> str | None:
        """How a long result's overviews pool their cells ("max" or "mean"); None for a dense
        result (a view pools its arrays as it likes)."""
        if self.streamed is None:
            return None
        return next((p.pool for p in self.streamed.overviews.values()), None)


# The n × n_k matrices a result answers ``matrix``, ``row`` and ``rows`` for.
MATRICES = ("scores", "scaled_scores", "weights", "position_bias")


def _check_matrix(name: str) -> None:
    if name not in MATRICES:
        raise EngineError(f"unknown matrix {name!r}; choose one of {', '.join(MATRICES)}")


def _alibi_row(slopes, query: int, n_keys: int, dtype):
    from ..kernel.attention import alibi_bias

    torch = _torch()
    return alibi_bias(slopes, slice(query, query + 1), slice(0, n_keys), getattr(torch, np.dtype(dtype).name))[0, 0]


def _row_from_qk(result: "AttentionResult", name: str, head: int, query: int) -> np.ndarray:
    """One row of a dense result that does not hold the matrix, made from its Q and K (and
    the session's bias and mask) by ``attention_block``, in the result's dtype."""
    from ..kernel.attention import attention_block

    torch = _torch()
    session = result.session
    g = head if result.kv_head_of is None else int(result.kv_head_of[head])
    with torch.inference_mode():
        q = torch.tensor(result.Q[head:head + 1, query:query + 1])
        k = torch.tensor(result.K[g:g + 1])
        bias = None
        p = session.positions
        if p is not None and p.kind == "alibi":
            bias = _alibi_row(p.slopes_for(session.heads)[head:head + 1], query, session.n_keys, result.Q.dtype)
        blocked = np.asarray(result.mask[query])
        sinks = None if session.sinks is None else torch.tensor(session.sinks[head:head + 1], dtype=q.dtype)
        block = attention_block(q, k, factor=result.scale_factor, bias=bias,
                                mask=torch.from_numpy(np.array(blocked)) if blocked.any() else None,
                                blocked_rows=torch.tensor([bool(result.blocked_rows[query])]),
                                until=name, keep=("scores", "scaled_scores"), softcap=session.softcap, sinks=sinks)
        return to_host(getattr(block, name)[0, 0])


def to_host(t) -> np.ndarray:
    """A read-only host numpy array of the tensor ``t``, the one device→host conversion of the
    engines: a view of a CPU tensor's own memory (no copy), else a copy from its device;
    float16/bfloat16 are widened to float32 (numpy has no bfloat16). ``t`` is made without
    autograd (inference mode), so it is never part of a graph."""
    if t.dtype.itemsize == 2:
        t = t.float()
    a = t.numpy() if t.device.type == "cpu" else t.cpu().numpy()
    a.flags.writeable = False
    return a


class engine_failures:
    """``with engine_failures(device, dtype):`` turns a failure of the device itself (out of
    memory, a missing kernel) inside the block into the one-line ``EngineError`` a user sees,
    naming the device and dtype. A class, not a generator: it wraps every compute, and a
    generator-based context manager costs several times more to enter and leave."""

    __slots__ = ("device", "dtype")

    def __init__(self, device: str, dtype: str):
        self.device, self.dtype = device, dtype

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is None or not issubclass(kind, (RuntimeError, NotImplementedError, MemoryError)):
            return False
        first = str(err).strip().splitlines()[0] if str(err).strip() else kind.__name__
        raise EngineError(f"the engine failed on {self.device} ({self.dtype}): {first}") from None


def all_finite(t) -> bool:
    """Whether every number in ``t`` is finite.

    On the CPU numpy looks at the tensor's own memory: torch.isfinite(...).all() makes two
    passes and a temporary and cost more than the rest of the engine's overhead together.
    """
    # Fast path: a NaN or inf anywhere makes the plain sum non-finite. Only when the sum is not
    # finite (an overflow, or finite numbers so large that their sum overflows) is every
    # element looked at, so the common case costs one cheap reduction.
    if math.isfinite(float(t.sum())):
        return True
    return bool(_torch().isfinite(t).all())


def compute(session: Session, device: str = "cpu", dtype: str = "float32", keep=None) -> AttentionResult:
    """Compute self-attention for ``session`` and return every intermediate.

    ``keep`` is an optional collection of names from ``INTERMEDIATES``; the others are not
    copied to the host (they are ``None`` in the result). Large sessions on a GPU use it so
    that only what is on screen crosses the bus. Raises ``EngineError`` for an unavailable
    device or dtype, for numbers that overflow the dtype (the message suggests float64), and
    when the device itself fails (e.g. out of memory).
    """
    torch = _torch()
    if not isinstance(session, Session):
        raise EngineError(f"compute() needs a Session, got {type(session).__name__}")
    dev, tdtype = resolve(device, dtype)
    if keep is None:
        wanted = _KEEPABLE
    else:
        wanted = set(keep)
        unknown = wanted - _KEEPABLE
        if unknown:
            raise EngineError(f"unknown intermediate(s): {', '.join(sorted(unknown))}; "
                              f"choose from {', '.join(INTERMEDIATES + STAGE_INTERMEDIATES)}")
    check_memory(session, dtype, device)  # refuse what cannot fit before allocating any of it
    masks = mask_and_blocked_rows(session)
    factor = session.scale.factor(session.d_k)
    # Decided from the inputs before any work: when nothing can overflow, the result need not
    # be searched for inf/NaN afterwards.
    info = torch.finfo(tdtype)
    staged = uses_stages(session)
    checked = cannot_overflow(session, factor, info.max, info.eps, stage_bound if staged else None)
    start = time.perf_counter()
    with engine_failures(device, dtype), torch.inference_mode():
        inputs, reading = build_attention_inputs(session, tdtype, dev, masks, reuse_linear, staged=staged)
        try:
            # Unless the bound rules overflow out, the scores are looked at before masking.
            t = attend(inputs, wanted, check_finite=None if checked else all_finite)
        except AttentionOverflow:
            raise overflow_error(dtype, device) from None
        finally:
            if reading is not None:  # the products are made: an edit may write into it again
                done_reading(reading)
        scores, scaled, weights = t["scores"], t["scaled_scores"], t["weights"]
        head_out, output = t["head_outputs"], t["output"]
        # Past the scores, an overflow (in V, or a NaN weight row from +inf scores) always
        # reaches the small head outputs, so checking them and the output suffices.
        finite = checked or (all_finite(head_out) and (output is None or all_finite(output)))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elapsed = (time.perf_counter() - start) * 1000.0
        if not finite:
            raise overflow_error(dtype, device)
        # On the CPU in float32/64 a host array is a view of the tensor's memory, made directly;
        # elsewhere ``to_host`` copies (and widens half types).
        host = _cpu_view if dev.type == "cpu" and tdtype.itemsize > 2 else to_host
        fields = _results_to_host(session, wanted, t["joined"], scores, scaled, weights, head_out, output,
                                  qkv=(t["Q"], t["K"], t["V"]) if staged else None, convert=host)
        if staged:
            fields.update(stages_to_host(session, wanted, t, inputs))
    if not staged:  # E is X, and the rest are absent: nothing to make
        fields.update(E=session.embeddings, X=session.embeddings, kv_head_of=kv_head_map(session.heads, session.heads))
    return _new_result(fields, session=session, scale_factor=factor, mask=masks[0], blocked_rows=masks[1],
                       device=str(dev), dtype=dtype, compute_ms=elapsed)


# Every field of AttentionResult that has a default, with it.
_RESULT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(AttentionResult) if f.default is not dataclasses.MISSING}


def _new_result(fields: dict, **more) -> AttentionResult:
    """``AttentionResult(**fields, **more)`` made without the frozen dataclass's ``__init__``,
    which sets its 29 fields one ``object.__setattr__`` at a time: about 3 µs of every compute,
    a tenth of what it adds to the arithmetic at teaching sizes. The caller gives every field
    without a default (``tests/core/test_engine_overhead.py`` checks that the result is the
    constructor's)."""
    result = object.__new__(AttentionResult)
    values = result.__dict__
    values.update(_RESULT_DEFAULTS)
    values.update(fields)
    values.update(more)
    return result


def carries(session: Session, name: str) -> bool:
    """Whether a full compute of ``session`` has intermediate ``name`` (not None): every one of
    ``INTERMEDIATES`` and ``X`` always; ``P`` with absolute positions, ``Q_unrotated`` and
    ``K_unrotated`` with RoPE, ``position_bias`` with ALiBi, ``Q_unnormed``/``K_unnormed`` with
    QK-norm, ``sink_share`` with sinks. A view that keeps only what it
    reads asks this before taking a missing stage for one not kept."""
    p = session.positions
    if name == "P":
        return p is not None and p.absolute
    if name in ("Q_unrotated", "K_unrotated"):
        return p is not None and p.kind == "rope"
    if name == "position_bias":
        return p is not None and p.kind == "alibi"
    if name in ("Q_unnormed", "K_unnormed"):
        return session.qk_norm is not None
    if name == "sink_share":
        return session.sinks is not None
    return name in _KEEPABLE


@contextlib.contextmanager
def attention_inputs(session: Session, tdtype, dev, masks=None, linear=None, whole: bool = True):
    """``with attention_inputs(session, tdtype, dev) as inputs:`` what ``attend`` reads for
    ``session``, cached device copies of its arrays and stages: the one builder of
    ``AttentionInputs`` from a session. Make the products from them inside the block: the
    joined projection weights are shared with other computes and an edit may write into them
    in place once no block reads them (``device_inputs.done_reading``).

    ``compute`` calls it under inference mode; fitting calls it too (and swaps in trainable
    W_q, W_k and biases), so the window and the fit feed the engine the same tensors; the
    streamed path for long inputs calls it with ``whole=False``: then neither the n × n_k mask
    nor ALiBi's H × n × n bias is made (the streamed path makes them a block at a time, from
    the session's mask and ``positions.slopes_for``). Under inference mode the cached tensors
    are inference tensors: a caller with autograd on must clone them. ``masks``:
    ``mask_and_blocked_rows(session)`` when the caller has it; ``linear``:
    ``AttentionInputs.linear`` (compute's reuse of the previous product; the fit leaves it
    None, as its weights change every step).
    """
    inputs, reading = build_attention_inputs(session, tdtype, dev, masks, linear, whole)
    try:
        yield inputs
    finally:
        if reading is not None:
            done_reading(reading)


def build_attention_inputs(session: Session, tdtype, dev, masks=None, linear=None, whole: bool = True,
                           staged: bool | None = None):
    """``attention_inputs`` without the ``with``: ``(inputs, reading)``, where ``reading`` is
    the joined projection weights the caller must pass to ``device_inputs.done_reading`` once
    its products are made (None when there is none). ``compute`` calls this directly (a
    generator-based ``with`` costs as much as the rest of its bookkeeping); ``staged``:
    ``uses_stages(session)`` when the caller has it."""
    if staged is None:
        staged = uses_stages(session)
    stages = stage_tensors(session, tdtype, dev, dense_bias=whole) if staged else {}
    stages.pop("alibi_slopes", None)
    mask = blocked_rows = None
    if whole:
        mask_np, blocked_rows_np, any_blocked = mask_and_blocked_rows(session) if masks is None else masks
        if any_blocked:
            mask = device_flags(mask_np, dev)
            blocked_rows = device_flags(blocked_rows_np, dev) if blocked_rows_np.any() else None
    joined = None if "w_q" in stages else projection_weights(session, tdtype, dev, reading=True)
    try:
        inputs = AttentionInputs(
            x=device_tensor(session.embeddings, tdtype, dev),
            # With a source, only the queries are made from X: stage_tensors has W_q alone.
            w_qkv=stages.pop("w_q") if joined is None else joined,
            heads=session.heads, d_k=session.d_k, d_v=session.d_v, factor=session.scale.factor(session.d_k),
            mask=mask, blocked_rows=blocked_rows,
            w_out=None if session.w_out is None else device_tensor(session.w_out, tdtype, dev),
            linear=linear, **stages)
    except BaseException:
        if joined is not None:
            done_reading(joined)
        raise
    return inputs, joined


def uses_stages(session: Session) -> bool:
    """Whether ``session`` uses any stage of a real head (biases, norm, positions, a source,
    grouped K/V heads): without one, Q, K and V come from one joined product of X."""
    return not (session.b_query is None and session.b_key is None and session.b_value is None and session.b_out is None
                and session.norm is None and session.positions is None and session.source is None
                and session.kv_heads == session.heads and session.qk_norm is None and session.softcap is None
                and session.sinks is None)


def stages_to_host(session: Session, wanted, t: dict, inputs) -> dict:
    """The stage intermediates as host arrays (see AttentionResult), for a session with stages."""
    out = {"E": session.embeddings, "kv_head_of": kv_head_map(session.heads, session.kv_heads)}
    if session.source is not None:
        out["source_tokens"] = session.source.tokens
        out["source_X"] = session.source.embeddings
    absolute = inputs.positions_add is not None
    if "P" in wanted and absolute:
        out["P"] = positions_array(session)
    if "X" in wanted:
        out["X"] = to_host(t["X"]) if absolute or inputs.norm is not None else session.embeddings
    if inputs.rope is not None:
        for name in ("Q_unrotated", "K_unrotated"):
            if name in wanted:
                out[name] = to_host(t[name])
    if inputs.position_bias is not None and "position_bias" in wanted:
        out["position_bias"] = to_host(inputs.position_bias)
    if inputs.qk_norm is not None:
        for name in ("Q_unnormed", "K_unnormed"):
            if name in wanted:
                out[name] = to_host(t[name])
    if t.get("sink_share") is not None and "sink_share" in wanted:
        out["sink_share"] = to_host(t["sink_share"])
    return out


def overflow_error(dtype: str, device: str) -> EngineError:
    """The one-line refusal of numbers that overflowed ``dtype`` (suggesting float64)."""
    return EngineError(
        f"the numbers are too large for {dtype}: the attention overflowed to inf/NaN "
        f"on {device}; use float64 or smaller embeddings and weights"
    )


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _cpu_view(t) -> np.ndarray:
    """``to_host`` for a CPU tensor in float32/float64: a read-only view of its memory."""
    a = t.numpy()
    a.flags.writeable = False
    return a


def _results_to_host(session, wanted, joined, scores, scaled, weights, head_out, output, qkv=None,
                     convert=to_host) -> dict:
    """The intermediates in ``wanted`` as read-only host arrays; None for the others.

    On the CPU a host array is a view of the tensor's memory; elsewhere, or for half types
    (numpy has no bfloat16), it is a float32 copy. Views that numpy can make from another host
    array (Q, K and V from their joined product, the concatenation from the head outputs) cost
    no device transfer and no torch call. ``qkv``, when given, are the Q, K and V tensors to
    copy one by one (a session with stages: RoPE, grouped or cross-attention keys). ``convert``
    turns one tensor into its host array (``to_host``, or ``_cpu_view`` where that suffices).
    """
    host = dict.fromkeys(INTERMEDIATES)
    if qkv is not None:
        for name, t in zip(("Q", "K", "V"), qkv):
            host[name] = convert(t) if name in wanted else None
    elif "Q" in wanted or "K" in wanted or "V" in wanted:
        # One host copy of the joined projections; numpy views keep its read-only flag.
        q, k, v = split_projections(convert(joined), session.heads, session.d_k, session.d_v)
        host["Q"] = q if "Q" in wanted else None
        host["K"] = k if "K" in wanted else None
        host["V"] = v if "V" in wanted else None
    for name, t in (("scores", scores), ("scaled_scores", scaled), ("weights", weights)):
        if name in wanted:
            host[name] = convert(t)
    concat_wanted = "concat" in wanted or ("output" in wanted and output is None)
    if "head_outputs" in wanted or concat_wanted:
        per_head = convert(head_out)
        if "head_outputs" in wanted:
            host["head_outputs"] = per_head
        if concat_wanted:
            host["concat"] = _concat(per_head, session.n)
    if "output" in wanted:
        host["output"] = host["concat"] if output is None else convert(output)
    if "concat" not in wanted:
        host["concat"] = None
    return host


def _concat(per_head: np.ndarray, n: int) -> np.ndarray:
    """(H, n, d_v) → (n, H·d_v): a view for one head, a read-only copy for more."""
    if per_head.shape[0] == 1:
        return per_head[0]
    return _read_only(np.ascontiguousarray(per_head.transpose(1, 0, 2)).reshape(n, -1))
