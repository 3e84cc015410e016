"""Which path computes a session, and a long session's ``AttentionResult``.

The dense engine holds about four n × n matrices per head (``core.compute.memory``); 4,096 tokens ×
4 heads is about 1.1 GB, 16,384 × 4 over 17 GB. Above ``DENSE_BUDGET`` a session is computed
by the streamed pass instead (``stream``): its result carries everything that is not n × n
(Q, K, V, head outputs, output, the stages) and, in ``streamed``, the normalisers that give
any tile or row of scores and weights exactly, and pooled overviews at ``OVERVIEW_CELLS``
cells a side, which a heatmap pools further to its pixels.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..engine import AttentionResult, compute
from ...errors import EngineError
from ..blocked_cells import MaskMatrix
from ..memory import compute_bytes, memory_limit
from ...inputs.session import Session
from .pooling import pool_grid, pool_rows
from .streamed import MATRICES, stream

# Dense computes up to this estimate (4,096 tokens × 4 heads, about 1.1 GB, stays dense, as
# every panel and export there expects); above it, or above half the memory, the streamed path.
DENSE_BUDGET = int(1.5e9)
# The overviews' resolution: about this many pooled cells along each axis (a heatmap panel
# is at most ~1,000 pixels; it pools further by max or mean, which compose).
OVERVIEW_CELLS = 1024


def dense_bytes(session: Session, dtype: str = "float32", device: str = "cpu") -> int:
    """The dense engine's memory estimate for ``session`` (``core.compute.memory.compute_bytes``)."""
    alibi = session.positions is not None and session.positions.kind == "alibi"
    return compute_bytes(session.heads, session.n, session.d, session.d_k, session.d_v, dtype, device,
                         n_keys=session.n_keys, alibi=alibi)


def is_long(session: Session, dtype: str = "float32", device: str = "cpu", budget: int | None = None) -> bool:
    """Whether ``session`` goes the streamed way: its dense estimate is above ``budget``
    (default ``DENSE_BUDGET``) or above the memory limit."""
    budget = DENSE_BUDGET if budget is None else budget
    return dense_bytes(session, dtype, device) > min(budget, memory_limit())


def overview_grid(session: Session) -> tuple[int, int]:
    """Rows and columns per pooled cell of a long session's overviews."""
    return pool_grid(session.n, session.n_keys, OVERVIEW_CELLS, OVERVIEW_CELLS)


def compute_long(session: Session, device: str = "cpu", dtype: str = "float32", *, pool: str = "max",
                 overviews=MATRICES, progress: Callable | None = None,
                 cancelled: Callable[[], bool] | None = None) -> AttentionResult:
    """``session``'s result by the streamed path: n × n intermediates None, ``streamed`` set,
    and ``mask`` a ``MaskMatrix`` (read in blocks, never made whole). With ALiBi,
    ``position_bias`` is None too: ``streamed.alibi_slopes`` and ``streamed.tile(...,
    "position_bias")`` give it.

    ``progress``/``cancelled`` as for ``stream``. Raises ``EngineError`` as ``compute`` does.
    """
    fy, fx = overview_grid(session)
    s = stream(session, device, dtype, overviews=tuple(overviews), fy=fy, fx=fx, pool=pool, progress=progress,
               cancelled=cancelled)
    concat = s.head_outputs.transpose(1, 0, 2).reshape(session.n, -1) if session.w_out is not None else s.output
    return AttentionResult(session=session, scale_factor=s.scale_factor, mask=MaskMatrix(session),
                           blocked_rows=s.blocked_rows,
                           Q=s.Q, K=s.K, V=s.V, scores=None, scaled_scores=None, weights=None,
                           head_outputs=s.head_outputs, concat=concat, output=s.output, device=s.device,
                           dtype=dtype, compute_ms=s.compute_ms, streamed=s, **s.stages)


def pooled(result: AttentionResult, name: str, fy: int, fx: int, pool: str = "max") -> np.ndarray:
    """Matrix ``name`` of every head of ``result`` pooled by ``fy`` × ``fx`` cells (``pool``
    "max" or "mean"; blocked cells left out, NaN where every one is), (H, ⌈n / fy⌉,
    ⌈n_k / fx⌉), for a dense result as for a long one (its kept overview when it is that one)."""
    if result.tiled:
        return result.streamed.pooled(name, fy, fx, pool)
    import torch

    values = getattr(result, name)
    if values is None:
        raise EngineError(f"this result does not hold the {name.replace('_', ' ')}")
    mask = np.asarray(result.mask)
    blocked = torch.from_numpy(np.array(mask, dtype=bool)) if mask.any() else None
    with torch.inference_mode():
        return pool_rows(torch.from_numpy(np.array(values)), blocked, fy, fx, name, pool).numpy()


def compute_any(session: Session, device: str = "cpu", dtype: str = "float32", keep=None, **long_options) -> AttentionResult:
    """The dense result when ``session`` fits the dense budget, else ``compute_long``'s."""
    if is_long(session, dtype, device):
        return compute_long(session, device, dtype, **long_options)
    return compute(session, device=device, dtype=dtype, keep=keep)
