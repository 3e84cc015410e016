"""How the process's memory allocator treats big buffers: the same way in every run.

glibc's ``malloc`` serves a block over its mmap threshold (128 KB at start) with a fresh
``mmap`` and gives it back to the system when it is freed; after such a block is freed it
raises that threshold to the block's size (up to 32 MB) and keeps later ones on its heap,
whose free top it gives back past a trim threshold. So whether the 1–16 MB matrices of a
compute (n = 512 to 2,048 in float32) come from memory already mapped, or from pages the
kernel must map and zero again on first touch, depends on which sizes the process happened
to free before, not on the work. Measured (``attnexplorer bench``'s engine row at n = 2,048,
bare torch beside the engine): one run faulted a whole 16 MB matrix in again on every call
(4,064 page faults a call) and took twice the processor time of the same call in another
run (112 against 56 ms): a ratio of 0.48 where other runs gave 0.8–0.9. The same faults on
the engine's side instead would give the 1.37× one full bench run once showed.

``steady_allocator`` fixes both thresholds at start, as the dynamic threshold would end up
anyway after the first big block: blocks up to 32 MB stay on the heap and are reused, and
the heap keeps up to 256 MB of freed memory for the next compute instead of unmapping it.
Blocks over 32 MB (a 4,096² matrix) are still mapped and returned one by one. Only glibc has
``mallopt``; elsewhere (macOS, Windows, musl) nothing is changed.
"""

from __future__ import annotations

import os

# glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on a 64-bit machine (DEFAULT_MMAP_THRESHOLD_MAX:
# 4 × 1 MB × sizeof(long)): the value its dynamic threshold reaches after a big free.
MMAP_THRESHOLD = 32 * 1024 * 1024
# Freed heap memory kept for reuse before the top of the heap is given back: a compute at
# n = 2,048 frees about 64 MB of intermediates at once.
TRIM_THRESHOLD = 256 * 1024 * 1024

_applied: dict[str, int] | None = None


def steady_allocator() -> dict[str, int] | None:
    """Fix glibc's mmap and trim thresholds (``MMAP_THRESHOLD``, ``TRIM_THRESHOLD``) for this
    process, once; returns the values set, or None where the C library is not glibc or
    refused them. Call it at start, before big buffers are made."""
    global _applied
    if _applied is not None:
        return _applied
    if not _glibc():
        return None
    import ctypes

    try:
        # The process's own symbols hold the C library's (no search for libc: ctypes.util's
        # runs a subprocess, a cost at every start).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 when it refuses a value.
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return None
    _applied = {"mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}
    return _applied


def allocator_settings() -> dict[str, int] | None:
    """The thresholds ``steady_allocator`` set in this process (None: not set)."""
    return _applied


def _glibc() -> bool:
    """Whether this process runs on glibc (``os.confstr`` names it there; platform.libc_ver
    would read the whole interpreter binary)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False
