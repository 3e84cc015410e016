"""Block reduction of a big matrix to about the pixels it is drawn on (numpy only).

A 4,096 × 4,096 heatmap on a 400-pixel panel shows about 10 × 10 cells per pixel. Left to
pyqtgraph, the image is averaged down again on every paint (about 0.1 s at that size, on
the GUI thread), and averaging hides exactly what one looks for in attention: a few strong
cells. ``block_reduce`` is run once per new matrix instead and keeps, per block,

- the maximum (unsigned matrices: weights), so a single strong weight stays visible;
- the value of largest magnitude, with its sign (signed matrices: scores, Q, K, V), so the
  extremes on both sides stay visible and symmetric colour levels computed from the result
  equal those of the full matrix.

Blocked cells (``blocked`` True) are left out; a block with every cell blocked is NaN (drawn
as the hatch). The input is read in strips of rows, so no full-size copy is ever made (only a
strip-sized one where cells are blocked), and float32 stays float32.
"""

from __future__ import annotations

import math

import numpy as np

# Rows of the input handled at once: a strip of about this many cells (4 MB of float32).
_STRIP_CELLS = 1 << 20


def factor_for(cells: int, pixels: float) -> int:
    """Cells per block along one axis so that ``cells`` fit in ``pixels`` (1: no reduction)."""
    if cells <= 0 or pixels <= 0:
        return 1
    return max(1, math.ceil(cells / pixels))


def _reduce_rows(x: np.ndarray, f: int, ufunc) -> np.ndarray:
    """``ufunc`` (np.fmax / np.fmin) over blocks of ``f`` rows: ceil(rows / f) × cols.

    Whole blocks are reduced by ``f - 1`` element-wise calls over strided row views, each a
    fast contiguous loop (``ufunc.reduce`` over a short middle axis is several times slower);
    a last, partial block is reduced on its own.
    """
    rows = x.shape[0]
    whole = rows // f
    parts = []
    if whole:
        blocks = x[: whole * f].reshape(whole, f, *x.shape[1:])
        acc = np.array(blocks[:, 0])
        for i in range(1, f):
            ufunc(acc, blocks[:, i], out=acc)
        parts.append(acc)
    if whole * f < rows:
        parts.append(ufunc.reduce(x[whole * f:], axis=0, keepdims=True))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def block_reduce(data: np.ndarray, fy: int, fx: int, *, signed: bool,
                 blocked: np.ndarray | None = None, pool: str = "max") -> np.ndarray:
    """``data`` (rows × cols) reduced by blocks of ``fy`` rows × ``fx`` columns.

    The result has ``ceil(rows / fy) × ceil(cols / fx)`` cells (the last block of a row or
    column may be smaller). See the module docstring for what each cell holds; ``pool="mean"``
    gives each block's mean over its cells instead (blocked cells, and NaN, left out).
    """
    data = np.asarray(data)
    if data.dtype.kind != "f":
        data = data.astype(np.float64)
    rows, cols = data.shape
    fy, fx = max(1, int(fy)), max(1, int(fx))
    if blocked is not None and not blocked.any():
        blocked = None
    if pool == "mean":
        return _block_mean(data, fy, fx, blocked)
    if pool != "max":
        raise ValueError(f"unknown pooling {pool!r}; use 'max' or 'mean'")
    ufuncs = (np.fmax, np.fmin) if signed else (np.fmax,)
    out = [[] for _ in ufuncs]
    strip_rows = fy * max(1, _STRIP_CELLS // max(1, fy * cols))
    for r0 in range(0, rows, strip_rows):
        r1 = min(rows, r0 + strip_rows)
        strip = data[r0:r1]
        if blocked is not None:
            strip = strip.copy()  # strip-sized: NaN where blocked, so fmax/fmin skip them
            np.copyto(strip, np.nan, where=blocked[r0:r1])
        for k, ufunc in enumerate(ufuncs):
            # fmax/fmin ignore NaN (a block of NaN only stays NaN), and never warn.
            reduced = _reduce_rows(strip, fy, ufunc)
            out[k].append(_reduce_rows(reduced.T, fx, ufunc).T)
    hi = np.concatenate(out[0], axis=0)
    if not signed:
        return hi
    lo = np.concatenate(out[1], axis=0)
    # The value of larger magnitude, with its sign (NaN stays NaN: both sides are NaN).
    return np.where(np.abs(lo) > np.abs(hi), lo, hi)


def _block_mean(data: np.ndarray, fy: int, fx: int, blocked: np.ndarray | None) -> np.ndarray:
    """Each block's mean over its free, finite cells (NaN where it has none), a strip at a time."""
    rows, cols = data.shape
    starts_x = np.arange(0, cols, fx)
    out = []
    strip_rows = fy * max(1, _STRIP_CELLS // max(1, fy * cols))
    for r0 in range(0, rows, strip_rows):
        strip = data[r0:min(rows, r0 + strip_rows)]
        free = ~np.isnan(strip)
        if blocked is not None:
            free &= ~blocked[r0:r0 + strip.shape[0]]
        values = np.where(free, strip, 0.0)
        starts_y = np.arange(0, strip.shape[0], fy)
        total = np.add.reduceat(np.add.reduceat(values, starts_y, axis=0), starts_x, axis=1)
        count = np.add.reduceat(np.add.reduceat(free.astype(np.int32), starts_y, axis=0), starts_x, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((total / count).astype(data.dtype, copy=False))
    return np.concatenate(out, axis=0)
