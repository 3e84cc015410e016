"""How much does the engine cost over a bare torch attention? A side-by-side benchmark.

    python benchmarks/engine_overhead.py [--repeats 21] [--device cpu] [--sizes 256 1024 2048] [--heads 1 4] [--threads N]

For each n (tokens) and head count, with d = d_k = d_v = 64, it times ``compute()`` and a bare
``softmax((X@Wq)@(X@Wk)ᵀ·s)@(X@Wv)`` on the same inputs, interleaved call by call, and prints
the medians and their ratio. The target (issue 2 and 5) is a ratio of at most 1.3 at n ≥ 256.
The measuring function lives in the package (``attnexplorer.bench.engine``) so that
``attnexplorer bench`` can call it from an installed copy; it is re-exported here.
"""

from __future__ import annotations

import argparse
import platform
import sys

from attnexplorer.bench.engine import measure_engine_overhead

__all__ = ["measure_engine_overhead", "main"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048], help="token counts n")
    p.add_argument("--heads", type=int, nargs="+", default=[1, 4], help="head counts")
    p.add_argument("--d", type=int, default=64, help="embedding width (= d_k = d_v)")
    p.add_argument("--repeats", type=int, default=21, help="timed calls of each, per row")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice); 1 gives steadier figures on a busy machine")
    args = p.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"device {args.device}, {args.dtype}, d = {args.d}, median of {args.repeats}")
    print(f"{'n':>6} {'heads':>5} {'engine ms':>10} {'bare ms':>10} {'ratio':>6}")
    worst = 0.0
    for n in args.sizes:
        for heads in args.heads:
            r = measure_engine_overhead(n, args.d, heads, args.repeats, device=args.device, dtype=args.dtype)
            worst = max(worst, r["ratio"])
            print(f"{n:>6} {heads:>5} {r['engine_ms']:>10.3f} {r['bare_ms']:>10.3f} {r['ratio']:>6.2f}")
    print(f"worst ratio {worst:.2f} (target ≤ 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
