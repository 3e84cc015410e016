"""The export row of ``attnexplorer bench``: how fast a session file is written, and
``attnexplorer export --matrices npz`` of one real model layer from a cold process.

The session is one MiniLM layer's shape (15 tokens, d = 384, 12 heads of d_k = d_v = 32, W_o,
a layer norm and learned positions; about 12.6 MB of JSON), made from random numbers, so the
row runs without the models installed. Targets: session.json written at ≥ 50 MB/s; the
export, from launch to the process's exit, ≤ 2 s (it imports torch, reads the session,
computes and writes attention.npz and session.json).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from .harness import child_env

TARGETS = {"session_write_mb_s": 50.0, "export_s": 2.0}


def minilm_layer_session():
    """A session of one MiniLM layer's shape and stages, with random numbers."""
    import numpy as np

    from ..core.inputs.session import Session
    from ..core.inputs.stages import Norm, Positions

    rng = np.random.default_rng(0)
    n, d, heads, d_k = 15, 384, 12, 32

    def weights(*shape):
        return rng.normal(size=shape) / np.sqrt(shape[-2])

    return Session(tokens=tuple(f"tok{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                   w_query=weights(heads, d, d_k), w_key=weights(heads, d, d_k), w_value=weights(heads, d, d_k),
                   w_out=weights(heads * d_k, d), b_query=rng.normal(size=(heads, d_k)),
                   b_key=rng.normal(size=(heads, d_k)), b_value=rng.normal(size=(heads, d_k)),
                   b_out=rng.normal(size=d), norm=Norm("layer", weight=1 + 0.1 * rng.normal(size=d),
                                                      bias=0.1 * rng.normal(size=d), eps=1e-12),
                   positions=Positions("learned", table=0.1 * rng.normal(size=(n, d))))


def bench_export(repeats: int = 3) -> dict:
    """``session_write_mb_s``: the median speed of ``save_session`` (the text and the atomic
    write) over ``repeats`` writes; ``export_s``: the median of ``repeats`` fresh processes
    running ``attnexplorer export --session … --matrices npz``, timed from launch to exit."""
    from ..io.session_file import save_session

    session = minilm_layer_session()
    with tempfile.TemporaryDirectory(prefix="attnexplorer-bench-export-") as folder:
        path = Path(folder) / "minilm-layer.json"
        writes = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            save_session(session, path)
            writes.append(time.perf_counter() - start)
        size_mb = path.stat().st_size / 1e6
        write_s = median(writes[1:])  # the first warms the page cache and the allocator
        env = child_env()
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed app starts from compiled bytecode
        command = [sys.executable, "-m", "attnexplorer", "export", "--session", str(path), "--matrices", "npz"]
        runs = []
        for k in range(repeats + 1):  # the first writes the bytecode and warms the file cache
            out = Path(folder) / f"out{k}"
            start = time.perf_counter()
            proc = subprocess.run(command + ["--out", str(out)], capture_output=True, text=True, timeout=300, env=env)
            runs.append(time.perf_counter() - start)
            if proc.returncode != 0:
                return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    row = {"session_mb": size_mb, "session_write_s": write_s, "session_write_mb_s": size_mb / write_s,
           "export_s": median(runs[1:]), "repeats": repeats,
           "target_write_mb_s": TARGETS["session_write_mb_s"], "target_export_s": TARGETS["export_s"]}
    row["write_met"] = row["session_write_mb_s"] >= row["target_write_mb_s"]
    row["export_met"] = row["export_s"] <= row["target_export_s"]
    row["met"] = row["write_met"] and row["export_met"]
    return row


def format_export(row: dict, mark) -> list[str]:
    if "error" in row:
        return ["", f"Export: FAILED: {row['error']}"]
    return ["", "Export of one MiniLM layer's shape (15 tokens, d = 384, 12 heads, W_o; random numbers)",
            f"  session.json ({row['session_mb']:.1f} MB) written at {row['session_write_mb_s']:.0f} MB/s "
            f"({row['session_write_s'] * 1000:.0f} ms; target ≥ {row['target_write_mb_s']:.0f} MB/s){mark(row['write_met'])}",
            f"  `attnexplorer export --matrices npz` from a fresh process: {row['export_s']:.2f} s "
            f"(target ≤ {row['target_export_s']:.0f} s){mark(row['export_met'])}"]
