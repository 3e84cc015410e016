"""The engine rows of ``attnexplorer bench``: ``compute()`` against a bare torch attention.

``engine``: ``compute()`` against a bare torch ``softmax((X·W_q)(X·W_k)ᵀ·s)·(X·W_v)`` on the
same inputs, n = 16 … 4,096, d = 64, on the CPU (and CUDA when present), timed side by side,
interleaved call by call. Target: ratio ≤ 1.3 at n ≥ 256. The rows with the stages of a real
head are in ``stages.py``.
"""

from __future__ import annotations

import statistics
import time

TARGETS = {"engine_ratio": 1.3}


def measure_engine_overhead(n: int, d: int = 64, heads: int = 1, repeats: int = 15, device: str = "cpu",
                            dtype: str = "float32", keep=None, seed: int = 0) -> dict:
    """Time ``compute()`` against a bare torch ``softmax((X@Wq)@(X@Wk)ᵀ·s)@(X@Wv)``, side by side.

    Both run on the same random inputs (n tokens, width d, ``heads`` heads, d_k = d_v = d),
    interleaved call by call so that a noisy machine slows both alike; device work is
    synchronised before a clock is read. The bare version starts from tensors already on the
    device and returns a tensor; the engine starts from the session and returns host numpy
    arrays, so the ratio is everything the engine adds. ``keep`` is passed to ``compute``;
    by default everything on the CPU (host arrays share memory, so it is free) and only
    ``output`` on a GPU (what crosses the bus is what the window asks for).

    Returns ``{"n", "d", "heads", "device", "dtype", "repeats", "engine_ms", "bare_ms", "ratio"}``
    with medians in milliseconds and ratio = engine_ms / bare_ms.
    """
    import numpy as np
    import torch

    from ..core.compute.engine import compute, resolve
    from ..core.errors import EngineError
    from ..core.inputs.session import Session

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise EngineError(f"repeats must be a whole number >= 1, got {repeats!r}")
    dev, tdtype = resolve(device, dtype)
    rng = np.random.default_rng(seed)
    session = Session(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        # ~1/√d weights keep the scores O(1), as in a trained layer, so no softmax saturates.
        w_query=rng.normal(size=(heads, d, d)) / np.sqrt(d),
        w_key=rng.normal(size=(heads, d, d)) / np.sqrt(d),
        w_value=rng.normal(size=(heads, d, d)) / np.sqrt(d),
    )
    if keep is None and dev.type != "cpu":
        keep = ("output",)
    factor = session.scale.factor(d)
    x = torch.tensor(session.embeddings, dtype=tdtype, device=dev)
    wq, wk, wv = (torch.tensor(w, dtype=tdtype, device=dev) for w in (session.w_query, session.w_key, session.w_value))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elif dev.type == "mps":
            torch.mps.synchronize()

    def bare():
        with torch.inference_mode():
            out = torch.softmax((x @ wq) @ (x @ wk).transpose(-1, -2) * factor, dim=-1) @ (x @ wv)
        sync()
        return out

    def engine():
        return compute(session, device=device, dtype=dtype, keep=keep)

    engine_ms, bare_ms = interleaved_medians(engine, bare, repeats, warmups=3)
    return {"n": n, "d": d, "heads": heads, "device": str(dev), "dtype": dtype, "repeats": repeats,
            "engine_ms": engine_ms, "bare_ms": bare_ms, "ratio": engine_ms / bare_ms}


def interleaved_medians(engine, bare, repeats: int, warmups: int) -> tuple[float, float]:
    """Median milliseconds of ``engine()`` and ``bare()``, timed call by call.

    The first ``warmups`` calls of each (allocations, kernels, the engine's device caches) are
    not timed; then the two alternate, in swapped order every other round, so that neither
    always runs right after the other's garbage. Each callable synchronises its own device.
    """
    for _ in range(warmups):
        bare()
        engine()
    times = {"bare": [], "engine": []}
    for r in range(repeats):
        for name, fn in (("bare", bare), ("engine", engine)) if r % 2 == 0 else (("engine", engine), ("bare", bare)):
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times["engine"]), statistics.median(times["bare"])


def bench_engine(sizes, devices, repeats) -> list[dict]:

    rows = []
    for device in devices:
        for n in sizes:
            # A call at n ≤ 512 takes well under a millisecond: many samples cost nothing and
            # keep one scheduler hiccup from moving the median.
            reps = (repeats * 5 if n <= 512 else repeats * 3 if n <= 1024 else repeats if n <= 2048
                    else max(3, repeats // 3))
            row = measure_engine_overhead(n, d=64, heads=1, repeats=reps, device=device)
            row["met"] = n < 256 or row["ratio"] <= TARGETS["engine_ratio"]
            rows.append(row)
        if 4096 in sizes:
            row = measure_engine_overhead(4096, d=64, heads=4, repeats=3, device=device)
            row["met"] = row["ratio"] <= TARGETS["engine_ratio"]
            rows.append(row)
    return rows

