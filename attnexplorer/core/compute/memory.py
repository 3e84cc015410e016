"""How much memory a computation needs, estimated from the session's shapes before any work.

A session within the file bounds (8,192 tokens × 64 heads) asks for about 70 GB: each head
has n×n scores, scaled scores, masked scores and weights. Rather than let the machine swap or
the process die with a MemoryError, ``compute`` refuses a session whose estimate is above
``memory_limit()``, naming both sizes; the window and ``attnexplorer export`` both call
``compute``, so they refuse the same sessions.

``return_free_memory`` hands the heap's freed pages back after a long pass (a real model's
4,096-token run), so the process does not carry them through its peak.
"""

from __future__ import annotations

import functools
import os

from ..errors import EngineError

# Used where the machine's memory cannot be read (e.g. Windows without sysconf).
FALLBACK_LIMIT = 8 * 1024**3
# The n×n matrices per head the engine holds at its peak: scores, scaled, masked, weights.
SQUARE_BUFFERS = 4

_ITEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def memory_limit() -> int:
    """Half of this machine's physical memory: the rest is for the window, the exported files
    and everything else running."""
    return _half_of_physical_memory()


@functools.lru_cache(maxsize=1)
def _half_of_physical_memory() -> int:
    # Asked once: the two sysconf calls cost more than the rest of ``check_memory``, which runs
    # on every compute, and the machine's memory does not change while we run.
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_LIMIT
    return total // 2 if total > 0 else FALLBACK_LIMIT


def compute_bytes(heads: int, n: int, d: int, d_k: int, d_v: int, dtype: str, device: str = "cpu",
                  n_keys: int | None = None, alibi: bool = False) -> int:
    """An upper estimate of the bytes a computation of these shapes holds at its peak.

    The n×n_keys buffers dominate (n_keys: a cross-attention source's length, else n; ALiBi
    adds its H×n×n bias); half types and other devices add float32 host copies of the three
    n×n results (numpy has no bfloat16; a GPU's results are copied to the host).
    """
    item = _ITEM_BYTES.get(dtype, 8)
    keys = n if n_keys is None else n_keys
    square = heads * n * keys
    total = square * (SQUARE_BUFFERS + alibi) * item + n * keys  # and the boolean mask
    if item == 2 or not str(device).startswith("cpu"):
        total += square * 3 * 4
    total += n * (d + heads * (2 * d_k + 2 * d_v)) * max(item, 4) * 2  # projections, outputs
    return total


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.0f} MB"


def check_memory(session, dtype: str, device: str = "cpu", limit: int | None = None) -> None:
    """Raise EngineError when computing ``session`` would need more than ``limit`` bytes
    (default ``memory_limit()``)."""
    limit = memory_limit() if limit is None else limit
    alibi = session.positions is not None and session.positions.kind == "alibi"
    need = compute_bytes(session.heads, session.n, session.d, session.d_k, session.d_v, dtype, device,
                         n_keys=session.n_keys, alibi=alibi)
    if need > limit:
        raise EngineError(
            f"this session needs about {_size(need)} of memory to compute ({session.heads} heads × "
            f"{session.n:,} × {session.n_keys:,} attention matrices in {dtype}), more than the limit of "
            f"{_size(limit)} (half of this machine's memory); use fewer tokens or heads")


def return_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    A long run allocates and frees tens of MB per block and per layer on the thread that runs it;
    glibc keeps the freed pages in that thread's arena (about 290 MB after SmolLM2 on 4,096
    tokens), where the layer's compute, on another thread, never reuses them: the process
    would carry them through its peak."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
