"""The edit-cost row of ``attnexplorer bench``: one W_q cell typed into the window at a large
head, and what 20 such edits add to memory (targets: ≤ 20 ms, < 50 MB)."""

from __future__ import annotations

import os
import time
from statistics import median

from .harness import close_window, open_window, settle, start_app

TARGETS = {"edit_ms": 20.0, "edit_growth_mb": 50.0}


def _resident_mb() -> float | None:
    """This process's resident memory now (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Restart this process's peak resident memory count (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_mb() -> float | None:
    """This process's peak resident memory since ``_reset_peak_mb`` (Linux), else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _load_average() -> float | None:
    """The system's one-minute load average where it can be read: the wall times count the
    waits for a processor, so they are read with it."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def bench_edit_cost(heads: int, d: int, edits: int = 20, n: int = 8) -> dict:
    """One W_q cell typed into the main window at ``heads`` heads of d = d_k = d_v = ``d``.

    What is timed is what the person waits for: from the W_q table's ``setData`` (the value
    typed and Enter pressed, on the Weights tab) until every panel and the table have painted
    the new result (``median_ms``). At this size the compute runs inline, so that is also the
    time the GUI thread is busy; ``compute_ms`` is the engine's part of it and ``paint_ms``
    Qt's repaint after the panels took the result. ``gui_cpu_ms`` is the processor time the
    GUI thread itself used meanwhile: on a machine shared with other work the wall time also
    holds the time the thread waited for a processor, and this does not (``load_average``: the
    machine's one-minute load average when the edits ended). The ``edits`` edits go to
    different cells (each one undo step). ``growth_mb`` is how far the process's peak resident memory rose
    above the memory before ``edits`` edits of different cells and heads (the memory after them
    where the peak cannot be read: ``peak`` False), measured first, on a document of its own:
    the window's autosave writes the whole session to its recovery file a few seconds after an
    edit, and that write's buffers are not what an edit costs."""
    import gc

    import numpy as np

    from ..core.inputs.session import Session
    from ..core.inputs.session_arrays import memory_file_bytes
    from ..ui import user_actions
    from ..ui.document import SessionDocument

    start_app()

    def made():  # made afresh for each part, so that nothing but the document holds its arrays
        rng = np.random.default_rng(0)
        return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                       w_query=rng.normal(size=(heads, d, d)) / np.sqrt(d), w_key=rng.normal(size=(heads, d, d)) / np.sqrt(d),
                       w_value=rng.normal(size=(heads, d, d)) / np.sqrt(d))

    def cell(k):
        return (5 * k) % d, (7 * k + 1) % d, f"{0.01 * (k + 1)}"

    # Memory first, on a document of its own, so that no cache of the window's computes is
    # freed while the edits are measured.
    document = SessionDocument(made())
    document.compute.wait_idle(60.0)
    gc.collect()
    peak = _reset_peak()
    before = _resident_mb()
    for k in range(edits):
        row, col, text = cell(k)
        user_actions.set_cell(document, "W_q", row, col, text, head=k % heads)
        document.compute.wait_idle(60.0)
    gc.collect()
    after = _peak_mb() if peak else _resident_mb()
    # Copy-on-write copies keep their numbers in memory files whose pages the resident size
    # counts only once read: counted here as held at the end (at least what the peak had).
    files_mb = memory_file_bytes() / 2**20
    steps = document.undo_stack.count()
    document.shutdown()
    document, window = open_window(made())
    window.inputs.setCurrentWidget(window.inputs.weights)
    model = window.inputs.weights.tables["W_q"].model
    document.compute.wait_idle(60.0)
    settle()
    times, cpu, computes, paints = [], [], [], []
    for k in range(edits + 2):  # the first two warm up caches and are left out
        row, col, text = cell(k)
        start, start_cpu = time.perf_counter(), time.thread_time()
        model.setData(model.index(row, col), text)
        document.compute.wait_idle(60.0)  # returns at once: the compute ran inline
        painting = time.perf_counter()
        settle()  # Qt paints what the edit marked dirty
        end, end_cpu = time.perf_counter(), time.thread_time()
        if k >= 2:
            times.append((end - start) * 1000.0)
            cpu.append((end_cpu - start_cpu) * 1000.0)
            paints.append((end - painting) * 1000.0)
            computes.append(document.compute.last_compute_ms)
    close_window(document, window)
    row = {"heads": heads, "d": d, "n": n, "edits": edits, "undo_steps": steps, "median_ms": median(times),
           "gui_cpu_ms": median(cpu), "compute_ms": median(computes), "paint_ms": median(paints),
           "growth_mb": None if before is None or after is None else after - before + files_mb,
           "memory_files_mb": files_mb,
           "peak": peak,
           "target_ms": TARGETS["edit_ms"], "target_mb": TARGETS["edit_growth_mb"],
           "load_average": _load_average()}
    row["met"] = row["median_ms"] <= TARGETS["edit_ms"] and (row["growth_mb"] is None or row["growth_mb"] < TARGETS["edit_growth_mb"])
    return row

