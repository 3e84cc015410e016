"""Pooling a block of query rows of a head's matrix into screen pixels, on the compute device.

A 16,384-token heatmap on an 800-pixel panel shows about 20 × 20 cells per pixel. The
overview keeps, per pixel block of ``fy`` rows × ``fx`` columns (as the window's
``block_reduce`` does for a dense matrix, so both paths draw the same picture):

- ``max`` (the default): the largest weight, so one strong link stays visible; for signed
  matrices (scores) the value of largest magnitude, with its sign;
- ``mean``: the average over the block's cells.

In the masked matrices (``scaled_scores``, ``weights``) blocked cells are left out, and a block
whose every cell is blocked is NaN (drawn as the hatch). The raw ``scores`` are not masked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POOLS = ("max", "mean")
# What can be pooled: name → (signed, masked), as the heatmap panels show them.
POOLED = {"scores": (True, False), "scaled_scores": (True, True), "weights": (False, True)}


def pool_grid(n: int, n_k: int, height: float, width: float) -> tuple[int, int]:
    """Rows and columns per pooled cell so that n × n_k cells fit ``height`` × ``width`` pixels
    (1: a cell per pixel or more room)."""
    def factor(cells, pixels):
        return 1 if cells <= 0 or pixels <= 0 else max(1, math.ceil(cells / pixels))

    return factor(n, height), factor(n_k, width)


@dataclass(frozen=True, eq=False)
class Pooled:
    """A head-by-head pooled overview of one matrix: ``data`` (H, ceil(n / fy), ceil(n_k / fx)).

    ``rows_done`` is how many query rows are in it so far (the overview fills in a block of
    rows at a time; rows not yet done are NaN); ``complete`` once every row is.
    """

    what: str
    pool: str
    fy: int
    fx: int
    n: int
    data: np.ndarray
    rows_done: int

    @property
    def complete(self) -> bool:
        return self.rows_done >= self.n


def _reduce(x, f: int, dim: int, op: str):
    """``op`` ("max", "min", "sum") over consecutive groups of ``f`` along ``dim`` (-1 or -2)
    of the torch tensor x; the last group may be shorter. Views, no padded copy."""
    size = x.shape[dim]
    whole = size // f * f
    parts = []
    if whole:
        head = x.narrow(dim, 0, whole)
        shape = list(head.shape)
        # (…, whole) → (…, whole/f, f) for the last axis; (…, whole, cols) → (…, whole/f, f,
        # cols) for the rows: either way the groups' own axis is then ``dim``.
        shape[len(shape) + dim] = f
        shape.insert(len(shape) + dim, whole // f)
        parts.append(_apply(head.reshape(shape), op, dim))
    if whole < size:
        parts.append(_apply(x.narrow(dim, whole, size - whole), op, dim, keepdim=True))
    if len(parts) == 1:
        return parts[0]
    import torch

    return torch.cat(parts, dim=dim)


def _apply(x, op: str, dim: int, keepdim: bool = False):
    if op == "max":
        return x.amax(dim=dim, keepdim=keepdim)
    if op == "min":
        return x.amin(dim=dim, keepdim=keepdim)
    return x.sum(dim=dim, keepdim=keepdim)


def _pooled(x, fy: int, fx: int, op: str):
    # Rows first: a reduction over whole contiguous rows is vectorised, and three times
    # faster than one over short groups of columns, which then runs on fy times less data.
    return _reduce(_reduce(x, fy, -2, op), fx, -1, op)


def pool_rows(values, blocked, fy: int, fx: int, what: str, pool: str):
    """Pool ``values`` (H, rows, n_k torch tensor, ``rows`` a multiple of ``fy`` except at the
    end of the matrix) of matrix ``what`` into (H, ceil(rows / fy), ceil(n_k / fx)).

    ``blocked`` (rows, n_k) bool tensor or None. Returns a torch tensor in the values' dtype.
    """
    import torch

    signed, masked = POOLED[what]
    if not masked:
        blocked = None
    inf = float("inf")
    if pool == "mean":
        if blocked is None:
            total = _pooled(values, fy, fx, "sum")
            count = _pooled(torch.ones(values.shape[-2:], dtype=values.dtype, device=values.device), fy, fx, "sum")
            return total / count
        free = (~blocked).to(values.dtype)
        total = _pooled(values * free, fy, fx, "sum")
        count = _pooled(free, fy, fx, "sum")
        return torch.where(count > 0, total / count, torch.full_like(total, float("nan")))
    if signed:
        hi = _pooled(values if blocked is None else values.masked_fill(blocked, -inf), fy, fx, "max")
        lo = _pooled(values if blocked is None else values.masked_fill(blocked, inf), fy, fx, "min")
        out = torch.where(lo.abs() > hi.abs(), lo, hi)
    else:
        # Weights are ≥ 0 and blocked cells hold 0, so the plain maximum is the maximum over the
        # free cells wherever a block has one; blocks with none are made NaN below.
        out = _pooled(values, fy, fx, "max")
    if blocked is not None:
        all_blocked = _pooled(blocked.to(torch.uint8), fy, fx, "min").bool()
        out = out.masked_fill(all_blocked, float("nan"))
    return out
