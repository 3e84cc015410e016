"""The streamed pass: softmax normalisers, head outputs and pooled overviews, a block of query
rows at a time; then exact tiles and rows from Q, K and the normalisers.

The weight of query i for key j in head h is exp(s_ij − m_i) / z_i, where s is the scaled,
masked score, m_i the row's largest s and z_i = Σ_j exp(s_ij − m_i): the softmax of the dense
engine, written with the two numbers per query that make any cell of the row computable on
its own. ``stream`` finds m and z for every query, a block of rows at a time (each block
holds its rows in full, so no online rescaling is needed); ``StreamedResult.tile`` then
recomputes only the scores of the rectangle asked for.

torch is imported lazily, as in the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...kernel.attention import AttentionInputs, alibi_bias, attention_block, combine_heads, kv_head_map, queries_keys_values
from ..device_inputs import cannot_overflow
from ..engine import (all_finite, attention_inputs, engine_failures, overflow_error, resolve, stages_to_host, to_host,
                      uses_stages)
from ...errors import Cancelled, EngineError
from ..blocked_cells import any_blocked
from ...inputs.session import Session
from ..stage_inputs import stage_bound
from .pooling import POOLED, POOLS, Pooled, pool_rows
from .tiled import TILED, TiledMatrix

# Bytes of one (heads × rows × keys) buffer of a block: the pass holds a few of them at once.
# 64 MB is 256 query rows of 4 heads × 16,384 keys in float32: large enough that each matrix
# product is efficient, small enough that the peak stays a few hundred MB at any n.
BLOCK_BYTES = 64 * 1024**2
MATRICES = tuple(POOLED)  # "scores", "scaled_scores", "weights"


def _torch():
    import torch

    return torch


@dataclass(frozen=True, eq=False)
class RowDetail:
    """One query's full row in one head: ``scores`` (raw QKᵀ), ``scaled_scores`` (× scale +
    position bias, unmasked), ``weights`` (blocked keys 0) over the n_k keys, ``blocked`` the
    row of the mask, ``output`` = Σ_j weight_j · V_j (d_v,), and ``position_bias`` ALiBi's
    row as added to the scaled scores (None without ALiBi)."""

    head: int
    query: int
    scores: np.ndarray
    scaled_scores: np.ndarray
    weights: np.ndarray
    blocked: np.ndarray
    output: np.ndarray
    position_bias: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class StreamedResult:
    """What the streamed pass knows about one session: small arrays only.

    - ``Q`` (H, n, d_k), ``K`` (H_kv, n_k, d_k), ``V`` (H_kv, n_k, d_v): after every stage
      (biases, norm, positions, RoPE), as the dense engine makes them.
    - ``row_max``, ``row_scale`` (H, n): each query's largest scaled, masked score m and
      1 / Σ exp(score − m) (with attention sinks, 1 / (Σ exp(score − m) + exp(sink − m))), so that a weight is exp(score − m) · row_scale, the very
      arithmetic of torch's softmax; a query with every key blocked has −inf and 0 (its
      weights are 0). ``row_sum`` is Σ exp(score − m) itself.
    - ``blocked_rows`` (n,): the queries with every key blocked.
    - ``head_outputs`` (H, n, d_v), ``output`` (concat·W_o + b_o, or the concatenation without
      W_o): None when the pass was asked not to make them.
    - ``overviews``: name → ``Pooled`` made during the pass.
    - ``stages``: the stage arrays an ``AttentionResult`` carries (E, P, X, Q_unrotated,
      K_unrotated, Q_unnormed, K_unnormed, sink_share, kv_head_of, source_tokens, source_X; never ALiBi's H × n × n bias:
      ``alibi_slopes`` and ``tile(..., "position_bias")`` give any part of it instead).

    Host arrays are read-only numpy (float64 for a float64 compute, float32 otherwise).
    """

    session: Session
    device: str
    dtype: str
    scale_factor: float
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    row_max: np.ndarray
    row_scale: np.ndarray
    blocked_rows: np.ndarray
    head_outputs: np.ndarray | None
    output: np.ndarray | None
    overviews: dict
    compute_ms: float
    stages: dict = field(default_factory=dict)
    _prepared: Any = field(repr=False, default=None)
    # The last few rows asked for: a selected row is read again on every hover and redraw.
    _rows: dict = field(repr=False, default_factory=dict)

    @property
    def heads(self) -> int:
        return self.Q.shape[0]

    @property
    def n(self) -> int:
        return self.session.n

    @property
    def n_keys(self) -> int:
        return self.session.n_keys

    @property
    def alibi_slopes(self) -> np.ndarray | None:
        """ALiBi's slope of each query head (H,), float64; None without ALiBi. The bias of
        query i for key j in head h is −slope_h · |i − j| (``tile(h, rows, cols,
        "position_bias")`` gives it as the engine adds it, in the result's dtype)."""
        return self._prepared.slopes

    @property
    def row_sum(self) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(self.blocked_rows[None, :], 0.0, 1.0 / self.row_scale)

    @property
    def log_sum_exp(self) -> np.ndarray:
        """log Σ_j exp(s_ij) per head and query (−inf for a fully blocked row)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.blocked_rows[None, :], -np.inf, self.row_max - np.log(self.row_scale))

    def _check_head(self, head: int) -> None:
        if not 0 <= head < self.heads:
            raise EngineError(f"head {head} is outside 0..{self.heads - 1}")

    def tile(self, head: int, rows: slice, cols: slice, what: str = "weights") -> np.ndarray:
        """The exact rectangle ``[rows, cols]`` of matrix ``what`` ("scores", "scaled_scores",
        "weights", or with ALiBi "position_bias") of ``head``, as the dense engine's result
        holds it."""
        if what not in TILED:
            raise EngineError(f"unknown matrix {what!r}; choose one of {', '.join(TILED)}")
        if what == "position_bias" and self.alibi_slopes is None:
            raise EngineError("this session has no position bias (only ALiBi adds one)")
        self._check_head(head)
        rows, cols = _bounded(rows, self.n), _bounded(cols, self.n_keys)
        p = self._prepared
        with _torch().inference_mode():
            values = _block(p, rows, cols, heads=slice(head, head + 1), what=what,
                            row_max=self.row_max, row_scale=self.row_scale, blocked_rows=self.blocked_rows)
            return to_host(values[0])

    def matrix(self, head: int, what: str) -> TiledMatrix | None:
        """Head ``head``'s matrix ``what`` read like an array, in exact tiles, with its pooled
        overview (``TiledMatrix``); None for "position_bias" without ALiBi."""
        if what == "position_bias" and self.alibi_slopes is None:
            return None
        return TiledMatrix(self, head, what)

    def rows(self, head: int, rows, what: str = "weights") -> np.ndarray:
        """Rows ``rows`` (a step-1 slice or a list of query indices) of matrix ``what``."""
        if isinstance(rows, slice):
            return self.tile(head, rows, slice(None), what)
        return np.stack([self.tile(head, slice(r, r + 1), slice(None), what)[0] for r in rows])

    def pooled(self, what: str, fy: int, fx: int, pool: str) -> np.ndarray:
        """Matrix ``what`` of every head pooled by fy × fx: the overview kept from the pass
        when it is that one, else made now (``overview``)."""
        kept = self.overviews.get(what)
        if kept is not None and kept.pool == pool and (kept.fy, kept.fx) == (fy, fx) and kept.complete:
            return np.asarray(kept.data)
        return np.asarray(self.overview(what, fy, fx, pool).data)

    def row(self, head: int, query: int) -> RowDetail:
        """Query ``query``'s whole row in ``head``, exact, with its output Σ weight · value."""
        self._check_head(head)
        if not 0 <= query < self.n:
            raise EngineError(f"query {query} is outside 0..{self.n - 1}")
        kept = self._rows.get((head, query))
        if kept is not None:
            return kept
        if len(self._rows) >= 8:
            self._rows.pop(next(iter(self._rows)))
        self._rows[(head, query)] = made = self._make_row(head, query)
        return made

    def _make_row(self, head: int, query: int) -> RowDetail:
        p = self._prepared
        rows, cols = slice(query, query + 1), slice(0, self.n_keys)
        torch = _torch()
        with torch.inference_mode():
            block = _block(p, rows, cols, heads=slice(head, head + 1), what="output", row_max=self.row_max,
                           row_scale=self.row_scale, blocked_rows=self.blocked_rows,
                           keep=("scores", "scaled_scores"))
            scores, scaled, weights, output = block.scores, block.scaled_scores, block.weights, block.output[0]
            bias = None if p.slopes is None else _block(p, rows, cols, heads=slice(head, head + 1),
                                                         what="position_bias")
        blocked = p.mask_block(rows, cols)
        return RowDetail(head=head, query=query, scores=to_host(scores[0, 0]), scaled_scores=to_host(scaled[0, 0]),
                         weights=to_host(weights[0, 0]),
                         blocked=np.zeros(self.n_keys, dtype=bool) if blocked is None else blocked[0],
                         output=to_host(output[0]), position_bias=None if bias is None else to_host(bias[0, 0]))

    def overview(self, what: str = "weights", fy: int = 1, fx: int = 1, pool: str = "max",
                 progress: Callable | None = None, cancelled: Callable[[], bool] | None = None) -> Pooled:
        """A new pooled overview of ``what`` (see ``pooling``), a block of rows at a time from
        Q, K and the normalisers; ``progress(pooled_so_far)`` after each block, and
        ``Cancelled`` raised when ``cancelled()`` says so."""
        _check_pool(what, pool)
        p = self._prepared
        fy, fx = max(1, int(fy)), max(1, int(fx))
        out = _empty_pooled(self.heads, self.n, self.n_keys, fy, fx, p.host_dtype)
        step = _rows_per_block(p, fy)
        torch = _torch()
        with torch.inference_mode():
            buffer = torch.empty(self.heads * min(step, self.n) * self.n_keys, dtype=p.tdtype, device=p.dev)
            for r0 in range(0, self.n, step):
                if cancelled is not None and cancelled():
                    raise Cancelled()
                rows = slice(r0, min(self.n, r0 + step))
                values = _block(p, rows, slice(0, self.n_keys), heads=slice(None), what=what, row_max=self.row_max,
                                row_scale=self.row_scale, blocked_rows=self.blocked_rows, buffer=buffer)
                blocked = p.mask_tensor(rows)
                out[:, r0 // fy: -(-rows.stop // fy)] = to_host(pool_rows(values, blocked, fy, fx, what, pool))
                if progress is not None:
                    progress(Pooled(what, pool, fy, fx, self.n, out, rows.stop))
        out.flags.writeable = False
        return Pooled(what, pool, fy, fx, self.n, out, self.n)


def _bounded(s: slice, size: int) -> slice:
    start, stop, _ = s.indices(size)
    return slice(start, max(start, stop))


def _check_pool(what: str, pool: str) -> None:
    if what not in MATRICES:
        raise EngineError(f"unknown matrix {what!r}; choose one of {', '.join(MATRICES)}")
    if pool not in POOLS:
        raise EngineError(f"unknown pooling {pool!r}; choose one of {', '.join(POOLS)}")


def _empty_pooled(heads: int, n: int, n_k: int, fy: int, fx: int, dtype) -> np.ndarray:
    return np.full((heads, -(-n // fy), -(-n_k // fx)), np.nan, dtype=dtype)


@dataclass(frozen=True, eq=False)
class _Prepared:
    """The device tensors one session's blocks are made from (never handed to a view)."""

    session: Session
    dev: Any
    tdtype: Any
    q: Any
    k: Any
    v: Any
    factor: float
    kv_head_of: np.ndarray
    slopes: np.ndarray | None
    any_blocked: bool
    inputs: AttentionInputs
    block_bytes: int

    @property
    def host_dtype(self):
        return np.float64 if self.tdtype.itemsize == 8 else np.float32

    def mask_block(self, rows: slice, cols: slice) -> np.ndarray | None:
        """The mask's rectangle, or None when nothing in the session is blocked."""
        if not self.any_blocked:
            return None
        s = self.session
        return s.mask.block(s.n, None if s.source is None else s.source.n, rows, cols)

    def mask_tensor(self, rows: slice, cols: slice | None = None):
        block = self.mask_block(rows, slice(0, self.session.n_keys) if cols is None else cols)
        return None if block is None or not block.any() else _torch().from_numpy(block).to(self.dev)


def _prepare(session: Session, dev, tdtype, block_bytes: int) -> tuple[_Prepared, dict]:
    """X, Q, K and V by the dense engine's own ``queries_keys_values``, and what the blocks need."""
    p = session.positions
    slopes = None
    if p is not None and p.kind == "alibi":
        slopes = np.array(p.slopes_for(session.heads), dtype=np.float64)
        slopes.flags.writeable = False
    with attention_inputs(session, tdtype, dev, whole=False) as inputs:
        t = queries_keys_values(inputs)
    prepared = _Prepared(session=session, dev=dev, tdtype=tdtype, q=t["Q"].contiguous(), k=t["K"].contiguous(),
                         v=t["V"].contiguous(), factor=inputs.factor,
                         kv_head_of=kv_head_map(session.heads, session.kv_heads), slopes=slopes,
                         any_blocked=any_blocked(session), inputs=inputs, block_bytes=block_bytes)
    return prepared, t


def _bias(p: _Prepared, heads: range, rows: slice, cols: slice):
    return None if p.slopes is None else alibi_bias(p.slopes[heads.start:heads.stop], rows, cols, p.tdtype, p.dev)


def _block(p: _Prepared, rows: slice, cols: slice, heads: slice, what: str,
           row_max=None, row_scale=None, blocked_rows=None, buffer=None, keep=()):
    """Matrix ``what`` over ``[heads, rows, cols]`` as a torch tensor (heads × rows × cols),
    by ``attention_block``; for ``what`` "output", its whole ``AttentionBlock`` (the stages
    named in ``keep`` intact).

    For weights, ``row_max``/``row_scale`` are the normalisers (host arrays) of the whole rows.
    ``buffer``, a flat tensor at least that large, is written into instead of a new
    allocation: a fresh 64 MB block costs as much in page faults as the matrix product
    that fills it.
    """
    torch = _torch()
    hs = range(p.session.heads)[heads]
    if what == "position_bias":
        return _bias(p, hs, rows, cols)
    kv = p.kv_head_of[hs.start:hs.stop]
    first, last = int(kv[0]), int(kv[-1]) + 1
    normalisers = dead = None
    if what in ("weights", "output"):
        normalisers = tuple(torch.tensor(a[hs.start:hs.stop, rows], dtype=p.tdtype, device=p.dev)[..., None]
                            for a in (row_max, row_scale))
        if blocked_rows[rows].any():
            dead = torch.tensor(blocked_rows[rows], device=p.dev)
    v = p.v[first:last, cols] if what == "output" else None
    # The sinks are in the normalisers already (made by the pass with them).
    block = attention_block(p.q[hs.start:hs.stop, rows], p.k[first:last, cols], v, factor=p.factor,
                            bias=_bias(p, hs, rows, cols), mask=p.mask_tensor(rows, cols), blocked_rows=dead,
                            normalisers=normalisers, until=what, keep=keep,
                            out=None if buffer is None else {"scores": buffer}, softcap=p.inputs.softcap)
    return block if what == "output" else getattr(block, what)


def _rows_per_block(p: _Prepared, fy: int = 1) -> int:
    """Query rows per block: about ``block_bytes`` per heads × rows × keys buffer, a whole
    number of pooled rows."""
    s = p.session
    per_row = s.heads * s.n_keys * p.tdtype.itemsize
    rows = max(1, p.block_bytes // max(1, per_row))
    return max(fy, rows // fy * fy)


def stream(session: Session, device: str = "cpu", dtype: str = "float32", *, overviews=("weights",),
           fy: int = 1, fx: int = 1, pool: str = "max", outputs: bool = True,
           progress: Callable | None = None, cancelled: Callable[[], bool] | None = None,
           block_bytes: int | None = None) -> StreamedResult:
    """The streamed pass over ``session``: normalisers, head outputs (unless ``outputs`` is
    False) and a pooled overview of each matrix named in ``overviews`` at ``fy`` × ``fx``
    cells per pixel, all from one computation of each block of rows.

    ``progress(rows_done, n, overviews_so_far)`` is called after each block; ``cancelled()``
    is asked before each block and ``Cancelled`` raised when it says True. ``block_bytes``
    bounds each block's buffer (default ``BLOCK_BYTES``; tests make it tiny to cross many
    block edges). Raises
    ``EngineError`` as ``compute`` does (device, dtype, overflow, a device failure).
    """
    if not isinstance(session, Session):
        raise EngineError(f"stream() needs a Session, got {type(session).__name__}")
    for what in overviews:
        _check_pool(what, pool)
    torch = _torch()
    dev, tdtype = resolve(device, dtype)
    fy, fx = max(1, int(fy)), max(1, int(fx))
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    start = time.perf_counter()
    info = torch.finfo(tdtype)
    factor = session.scale.factor(session.d_k)
    checked = cannot_overflow(session, factor, info.max, info.eps,
                             stage_bound if uses_stages(session) else None)
    with engine_failures(device, dtype), torch.inference_mode():
        return _run(session, dev, tdtype, dtype, device, overviews, fy, fx, pool, outputs, progress, cancelled,
                    checked, start, block_bytes)


def _run(session, dev, tdtype, dtype, device, overviews, fy, fx, pool, outputs, progress, cancelled, checked, start,
         block_bytes):
    torch = _torch()
    p, t = _prepare(session, dev, tdtype, block_bytes)
    n, n_k, heads = session.n, session.n_keys, session.heads
    host = p.host_dtype
    row_max = np.empty((heads, n), dtype=host)
    row_scale = np.empty((heads, n), dtype=host)
    blocked_rows = np.zeros(n, dtype=bool)
    sinks = p.inputs.sinks
    sink_share = None if sinks is None else np.empty((heads, n), dtype=host)
    pooled = {what: _empty_pooled(heads, n, n_k, fy, fx, host) for what in overviews}
    head_out = torch.empty((heads, n, session.d_v), dtype=tdtype, device=dev) if outputs else None
    step = _rows_per_block(p, fy)
    buffers = {name: torch.empty(heads * min(step, n) * n_k, dtype=tdtype, device=dev) for name in ("scores", "weights")}
    for r0 in range(0, n, step):
        if cancelled is not None and cancelled():
            raise Cancelled()
        rows = slice(r0, min(n, r0 + step))
        out_rows = slice(r0 // fy, -(-rows.stop // fy))
        blocked = p.mask_tensor(rows)
        dead = None
        if blocked is not None:
            dead = blocked.all(dim=-1)
            blocked_rows[rows] = to_host(dead)
            dead = dead if blocked_rows[rows].any() else None
        found = {}

        def observe(stage, values):
            # Each stage is looked at before the next overwrites it in the same buffer.
            if stage == "masked":
                found["max"] = values.amax(dim=-1)
                return
            if not checked and not all_finite(values):
                raise overflow_error(dtype, device)
            if stage in pooled:
                pooled[stage][:, out_rows] = to_host(pool_rows(values, None if stage == "scores" else blocked,
                                                                fy, fx, stage, pool))

        block = attention_block(p.q[:, rows], p.k, p.v if outputs else None, factor=p.factor,
                                bias=_bias(p, range(heads), rows, slice(0, n_k)), mask=blocked, blocked_rows=dead,
                                until="output" if outputs else "weights", observe=observe, out=buffers,
                                softcap=p.inputs.softcap, sinks=sinks)
        weights = block.weights
        if sink_share is not None:
            sink_share[:, rows] = to_host(block.sink_share)
        # The weight of a row's largest score is exp(0) · (1 / Σ): the very factor softmax
        # multiplied the row by, so tiles made later with it repeat its arithmetic.
        row_max[:, rows] = to_host(found["max"])
        row_scale[:, rows] = to_host(weights.amax(dim=-1))
        if "weights" in pooled:
            pooled["weights"][:, out_rows] = to_host(pool_rows(weights, blocked, fy, fx, "weights", pool))
        if outputs:
            head_out[:, rows] = block.output
        del block, weights
        if progress is not None:
            progress(rows.stop, n, {w: Pooled(w, pool, fy, fx, n, a, rows.stop) for w, a in pooled.items()})
    output = None
    if outputs:
        out = combine_heads(head_out, p.inputs)
        if not checked and not (all_finite(head_out) and (out is None or all_finite(out))):
            raise overflow_error(dtype, device)
        if out is None:
            output = to_host(head_out.transpose(0, 1).reshape(n, -1))
        else:
            output = to_host(out)
        head_out = to_host(head_out)
    for a in (row_max, row_scale, blocked_rows, *pooled.values()):
        a.flags.writeable = False
    stages = _stages(session, t, p)
    if sink_share is not None:
        sink_share.flags.writeable = False
        stages["sink_share"] = sink_share
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return StreamedResult(
        session=session, device=str(dev), dtype=dtype, scale_factor=p.factor,
        Q=to_host(p.q), K=to_host(p.k), V=to_host(p.v), row_max=row_max, row_scale=row_scale,
        blocked_rows=blocked_rows, head_outputs=head_out, output=output,
        overviews={w: Pooled(w, pool, fy, fx, n, a, n) for w, a in pooled.items()},
        compute_ms=(time.perf_counter() - start) * 1000.0, stages=stages, _prepared=p)


def _stages(session: Session, t: dict, p: _Prepared) -> dict:
    if not uses_stages(session):
        return {"E": session.embeddings, "X": session.embeddings, "kv_head_of": p.kv_head_of}
    wanted = {"P", "X", "Q_unrotated", "K_unrotated", "Q_unnormed", "K_unnormed"}
    return stages_to_host(session, wanted, t, p.inputs)
