"""The long-inputs rows of ``attnexplorer bench`` (the streamed path, ``core/compute/long``).

Each figure comes from a fresh child process, so that its peak resident memory
(``ru_maxrss``, which includes torch itself, about 0.3 GB) is that of the work alone:

- ``long``: n = 16,384 tokens × 4 heads, d = d_k = d_v = 64 (the ``random`` preset): the
  time to the first complete overview of all 4 heads (the row normalisers and the max-pooled
  weights at a 600 × 500 pixel panel's resolution), the head outputs after it, the latency
  of an exact zoom tile (128 × 128 cells of weights) and of a selected query's whole row, and
  the peak memory. Targets: overview ≤ 10 s, peak < 2 GB.
- ``long_dense``: the same at n = 4,096 through the dense engine and through the streamed
  path, for comparison.
- ``long_masked``: n = 16,384 × 4 heads with a causal mask, the whole result the window holds
  (``compute_long``: three overviews, head outputs, the mask read a block at a time): its
  time, the peak memory and the memory still held with the result alive.
- ``long_window`` (not with --quick): the window at n = 16,384 × 4 heads, d = 64
  (``long_window``: an edit's compute on the worker and the autosave's write, the GUI
  thread's longest block meanwhile and where it was, zoom latencies, a scroll through the
  embedding table, the peak memory).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

TARGETS = {"long_overview_s": 10.0, "long_peak_mb": 2048.0}
PANEL = (500, 600)  # a heatmap panel of the 1280×800 window, in pixels (height, width)


def _session(n: int, heads: int):
    from ..core.inputs.presets import build_preset

    return build_preset("random", {"n": n, "d": 64, "d_k": 64, "d_v": 64, "heads": heads, "seed": 0}).session


def _cpu_s() -> float:
    """CPU seconds this process has used (all its threads): on a shared machine the wall clock
    also counts the time other processes held the cores, this does not."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load() -> str | None:
    """The 1-minute load average (a shared machine's timings depend on it), where readable."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return None


def _resident_mb() -> float | None:
    """The memory this process holds now (Linux), where ``_peak_mb`` is the most it held."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024**2
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def long_probe(n: int, heads: int, path: str) -> None:
    """Run in a child process: print one JSON line with the figures of ``path`` ("streamed",
    "overview": the streamed pass's overview alone, "dense", or "causal": ``compute_long``
    with a causal mask) at n tokens."""
    import numpy as np

    session = _session(n, heads)
    import torch  # loaded before the clock starts, as in the window

    base_mb = _peak_mb()
    row: dict = {"n": n, "heads": heads, "path": path}
    if path == "causal":
        from ..core.compute.long.result import compute_long
        from ..core.inputs.session import Mask

        session = session.replace(mask=Mask("causal"))
        start = time.perf_counter()
        result = compute_long(session)
        row["overview_s"] = time.perf_counter() - start
        row["held_mb"] = _resident_mb()
        del result
    elif path == "dense":
        from ..core.compute.engine import compute

        start = time.perf_counter()
        compute(session)
        row["overview_s"] = time.perf_counter() - start
    else:
        from ..core.compute.long import pool_grid, stream

        fy, fx = pool_grid(n, n, *PANEL)
        start, cpu = time.perf_counter(), _cpu_s()
        result = stream(session, overviews=("weights",), fy=fy, fx=fx, outputs=False)
        row["overview_s"] = time.perf_counter() - start
        row["overview_cpu_s"] = _cpu_s() - cpu
        row["threads"] = torch.get_num_threads()
        if path == "overview":  # a repeat of the overview alone (``bench_long``)
            return _print_row(row, base_mb)
        start = time.perf_counter()
        stream(session, overviews=(), outputs=True)
        row["outputs_s"] = time.perf_counter() - start
        rng = np.random.default_rng(0)
        tiles, rows = [], []
        for _ in range(10):
            r0, c0 = (int(v) for v in rng.integers(0, n - 128, size=2))
            t0 = time.perf_counter()
            result.tile(int(rng.integers(heads)), slice(r0, r0 + 128), slice(c0, c0 + 128))
            tiles.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result.row(int(rng.integers(heads)), r0)
            rows.append(time.perf_counter() - t0)
        row["tile_ms"] = statistics.median(tiles) * 1000.0
        row["row_ms"] = statistics.median(rows) * 1000.0
    _print_row(row, base_mb)


def _print_row(row: dict, base_mb: float) -> None:
    # The kernel updates the peak lazily: the memory held a moment ago can read a little above it.
    row["peak_mb"] = max(_peak_mb(), row.get("held_mb") or 0.0)
    row["before_mb"] = base_mb
    row["load"] = _load()
    print(json.dumps(row))
    sys.stdout.flush()


def run_child(n: int, heads: int, path: str) -> dict:
    code = f"from attnexplorer.bench.long import long_probe; long_probe({n}, {heads}, {path!r})"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                              env={**os.environ})
    except subprocess.TimeoutExpired:
        return {"n": n, "heads": heads, "path": path, "error": "took more than 600 s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"n": n, "heads": heads, "path": path, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


# Fresh processes timing the first overview (the first of them also times the rest): its
# figure is their median.
OVERVIEW_REPEATS = 3


def _streamed_row(n: int, repeats: int) -> dict:
    """The ``long`` row: the first overview's time and CPU seconds the median of ``repeats``
    fresh processes (every one counted), the other figures the first's, the peak memory the
    largest of them."""
    from .harness import load_average, median_of

    load_before = load_average()
    runs = [run_child(n, 4, "streamed")] + [run_child(n, 4, "overview") for _ in range(repeats - 1)]
    row = median_of(runs, ("overview_s", "overview_cpu_s"))
    if "error" in row:
        return {"n": n, "heads": 4, "path": "streamed", **row}
    first = runs[0]
    row.update({name: first[name] for name in ("path", "outputs_s", "tile_ms", "row_ms")},
               peak_mb=max(run["peak_mb"] for run in runs), load_before=load_before, load_after=load_average())
    row["met"] = row["overview_s"] <= TARGETS["long_overview_s"] and row["peak_mb"] < TARGETS["long_peak_mb"]
    return row


def bench_long(quick: bool = False) -> dict:
    """The 16,384-token row (2,048 with ``quick``) and the comparison at 4,096 (512)."""
    n, compare = (2048, 512) if quick else (16384, 4096)
    row = _streamed_row(n, 1 if quick else OVERVIEW_REPEATS)
    out = {"long": row, "long_dense": [run_child(compare, 4, "dense"), run_child(compare, 4, "streamed")],
           "long_masked": run_child(n, 4, "causal")}
    if not quick:
        from .long_window import bench_window

        # The window itself at that size, GUI blocks and all.
        out["long_window"] = bench_window(n, 4)
    return out


def format_long(r: dict, mark) -> list[str]:
    out = [""]
    row = r["long"]
    if "error" in row:
        out.append(f"Long input n = {row['n']:,}, {row['heads']} heads (streamed): FAILED: {row['error']}")
        return out
    from .notes import repeats_note

    load = row.get("load")
    how = repeats_note(row, "fresh processes for the first overview")
    out.append(f"Long input n = {row['n']:,}, {row['heads']} heads, d = 64 (streamed)"
               + (how or (f", load average {load}" if load else "")))
    cpu = row.get("overview_cpu_s")
    out.append(f"  first complete overview of all heads {row['overview_s']:.1f} s (target ≤ 10"
               + (f"; {cpu:.1f} CPU s over {row['threads']} threads" if cpu is not None else "") + "), head outputs "
               f"{row['outputs_s']:.1f} s more; zoom tile 128×128 {row['tile_ms']:.1f} ms, selected row "
               f"{row['row_ms']:.1f} ms; peak memory {row['peak_mb']:.0f} MB (target < 2048){mark(row['met'])}")
    window = r.get("long_window")
    if window is not None and "error" in window:
        out.append(f"  the window at n = {window['n']:,}: FAILED: {window['error']}")
    elif window is not None:
        out += _format_window(window, mark)
    masked = r.get("long_masked")
    if masked is not None and "error" in masked:
        out.append(f"  a causal mask: FAILED: {masked['error']}")
    elif masked is not None:
        held = masked.get("held_mb")
        out.append(f"  a causal mask, the whole result (3 overviews, head outputs; the mask made a block at a time): "
                   f"{masked['overview_s']:.1f} s, peak memory {masked['peak_mb']:.0f} MB"
                   + (f", {held:.0f} MB held with the result" if held is not None else ""))
    for other in r["long_dense"]:
        if "error" in other:
            out.append(f"  n = {other['n']:,} {other['path']}: FAILED: {other['error']}")
        else:
            what = "every matrix" if other["path"] == "dense" else "overview"
            out.append(f"  n = {other['n']:,} {other['path']:>8}: {what} {other['overview_s']:.2f} s, "
                       f"peak memory {other['peak_mb']:.0f} MB")
    return out


def _format_window(w: dict, mark) -> list[str]:
    from .notes import repeats_note

    load = w.get("load")
    how = repeats_note(w, "edits in one fresh process")
    lines = [f"  the window at n = {w['n']:,} (d = {w.get('d', 64)}"
             + (f", load average {load}" if load is not None and not how else "") + f"): first overview "
             f"{w.get('first_overview_s', 0):.1f} s, edit → drawn {w['edit_to_drawn_ms'] / 1000:.1f} s "
             f"({w.get('partial_overviews', 0):.0f} partial overviews shown while it filled in){how}",
             f"    longest GUI block while computing {w['max_block_while_computing_ms']:.0f} ms (target ≤ 50; "
             f"{w.get('gui_cpu_in_that_block_ms', 0):.0f} ms of it GUI work){mark(w.get('met'))}, "
             f"after the result {w.get('max_block_ms', 0):.0f} ms (the panels' redraw)"]
    zoom = []
    if w.get("zoom_exact_ms") is not None:
        zoom.append(f"zoom to exact cells {w['zoom_exact_ms']:.0f} ms")
    if w.get("zoom_pooled_ms") is not None:
        zoom.append(f"to a 2,048² region pooled from exact tiles {w['zoom_pooled_ms']:.0f} ms")
    zoom.append(f"embedding table scroll step {w.get('scroll_step_ms') or 0:.1f} ms")
    zoom.append(f"peak memory {w['peak_mb']:.0f} MB")
    lines.append("    " + ", ".join(zoom))
    return lines
