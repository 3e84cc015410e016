"""The fit rows of ``attnexplorer bench``.

- ``fit_steps``: optimisation steps per second of ``core.fit.Fitter`` (Adam, previous-token
  target, causal mask) at n = 16, d = 16, on the CPU, with no window. Target: ≥ 200.
- ``fit_gui``: a fit at n = 512 in the real main window, its own event loop running, for a
  few seconds: the longest time the GUI thread was blocked (a 1 ms timer measures the gaps
  between its ticks; target ≤ 50 ms) and how much of it was the GUI thread's own work, how
  many frames the window drew meanwhile, and the steps per second the worker made while the
  window followed.
"""

from __future__ import annotations

import statistics
import time

TARGETS = {"fit_steps_per_s": 200.0, "fit_block_ms": 50.0}


def _session(n: int, d: int, d_k: int, seed: int = 0):
    from ..core.inputs.presets import build_preset
    from ..core.inputs.session import Mask

    built = build_preset("random", {"n": n, "d": d, "d_k": d_k, "d_v": d_k, "heads": 1, "seed": seed})
    return built.session.replace(mask=Mask("causal"))


def bench_fit_steps(n: int = 16, d: int = 16, steps: int = 300, repeats: int = 3) -> dict:
    """Steps per second (median of ``repeats`` runs of ``steps`` steps, after a warm-up)."""
    from ..core.fit import Fitter, target_for

    session = _session(n, d, d)
    target = {0: target_for(session, "previous-token")}
    rates, cpu_rates = [], []
    for r in range(repeats + 1):
        # tolerance 0: never "converged", so every run makes all its steps.
        fitter = Fitter(session, target, steps=steps, tolerance=0.0)
        start, cpu_start = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            if fitter.step().finished:
                break
        elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
        if r:  # the first run is the warm-up (kernels, allocator)
            rates.append(fitter.step_count / elapsed)
            cpu_rates.append(fitter.step_count / max(cpu, 1e-9))
    rate = float(statistics.median(rates))
    # Per second of this thread's own CPU time too: on a shared machine the wall clock also
    # counts the time other processes held the core (a step runs on one thread).
    return {"n": n, "d": d, "d_k": d, "steps": steps, "repeats": repeats, "steps_per_s": rate,
            "steps_per_cpu_s": float(statistics.median(cpu_rates)),
            "target_per_s": TARGETS["fit_steps_per_s"], "met": rate >= TARGETS["fit_steps_per_s"]}


def bench_fit_gui(n: int = 512, seconds: float = 3.0, repeats: int = 3) -> dict:
    """``fit_in_window`` ``repeats`` times (each a window and a fit of its own): each figure
    the median of the runs, every run counted (``<figure>_all``); the GUI work in the
    longest block is that of the run whose block is the median."""
    from .harness import load_average, median_of

    load_before = load_average()
    runs = [fit_in_window(n, seconds) for _ in range(repeats)]
    row = median_of(runs, ("max_block_ms", "steps_per_s", "frames_per_s"))
    if "error" in row:
        return {"n": n, **row}
    row.update(load_before=load_before, load_after=load_average())
    row["met"] = row["max_block_ms"] <= TARGETS["fit_block_ms"]
    return row


def fit_in_window(n: int = 512, seconds: float = 3.0) -> dict:
    """A fit at ``n`` tokens in the 1280×800 main window for ``seconds``, the GUI's longest block.

    The window runs its own event loop meanwhile (as in the app), with the Fit dock on screen.
    A 1 ms precise timer ticks on the GUI thread: the longest gap between two ticks is the
    longest the window could not respond (``max_block_ms``, the target). Beside it, the GUI
    thread's own CPU time in that gap (``max_block_gui_cpu_ms``), the most GUI work in any gap
    (``max_gui_work_ms``) and the machine's load: on a machine whose cores are all busy with
    other work, a gap is mostly time the GUI thread waited for a core, not work it did.
    """
    import os

    from PySide6.QtCore import QEventLoop, Qt, QTimer

    from .harness import close_window, open_window, start_app

    start_app()
    document, window = open_window(_session(n, 64, 16))
    document.compute.wait_idle(60.0)
    window.docks["fit"].raise_()
    fit = window.fit
    fit.controls.steps_spin.setValue(1_000_000)
    # The Fit dock laid out and painted before Start, as a user sees it before pressing it:
    # raised just before Start, its first layout (every panel's axes regenerated as the docks
    # resize) fell into the first frame of the fit, 57 ms of GUI work against 25-31 ms later.
    settle = QEventLoop()
    QTimer.singleShot(500, settle.quit)
    settle.exec()
    frames = {"count": 0}
    document.result_changed.connect(lambda _r: frames.__setitem__("count", frames["count"] + 1))
    worst = {"wall": 0.0, "cpu": 0.0, "work": 0.0}
    state = {"last": time.perf_counter(), "cpu": time.thread_time()}

    def tick():
        now, cpu = time.perf_counter(), time.thread_time()
        if fit.runner.running:
            wall, work = (now - state["last"]) * 1000.0, (cpu - state["cpu"]) * 1000.0
            if wall > worst["wall"]:
                worst["wall"], worst["cpu"] = wall, work
            worst["work"] = max(worst["work"], work)
        state["last"], state["cpu"] = now, cpu

    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.setInterval(1)
    timer.timeout.connect(tick)
    timer.start()
    if not fit.controls.start():
        timer.stop()
        close_window(document, window)
        return {"n": n, "error": fit.report}
    load_before = _load()
    start = time.perf_counter()
    state["last"], state["cpu"] = start, time.thread_time()
    loop = QEventLoop()
    fit.runner.finished.connect(loop.quit)
    QTimer.singleShot(round(seconds * 1000), loop.quit)
    loop.exec()
    elapsed = time.perf_counter() - start
    steps = fit.runner.last.step if fit.runner.last is not None else 0
    fit.runner.stop()
    fit.runner.wait(30.0)
    timer.stop()
    close_window(document, window)
    block = worst["wall"]
    return {"n": n, "seconds": elapsed, "steps": steps, "steps_per_s": steps / elapsed,
            "frames_per_s": frames["count"] / elapsed, "max_block_ms": block,
            "max_block_gui_cpu_ms": worst["cpu"], "max_gui_work_ms": worst["work"],
            "load": max(load_before, _load()), "cpus": os.cpu_count() or 1,
            "target_block_ms": TARGETS["fit_block_ms"], "met": block <= TARGETS["fit_block_ms"]}


def _load() -> float:
    """The 1-minute load average (0 where the system does not say)."""
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def format_fit(r: dict, mark) -> list[str]:
    """The report's lines for the fit rows measured (``mark(met)`` writes ok / MISSED)."""
    s, g = r.get("fit_steps"), r.get("fit_gui")
    out = [""]
    if s is not None:
        out.append(f"Fit a head (Adam, previous token, causal), CPU, no window: n = {s['n']}, d = {s['d']}: "
                   f"{s['steps_per_s']:.0f} steps/s (target ≥ 200){mark(s['met'])}"
                   + (f", {s['steps_per_cpu_s']:.0f} per CPU second" if "steps_per_cpu_s" in s else ""))
    if g is not None and "error" in g:
        out.append(f"Fit in the window, n = {g['n']}: FAILED: {g['error']}")
    elif g is not None:
        from .notes import repeats_note

        runs = f"fits of {g['seconds']:.1f} s" if "seconds" in g else "fits"
        out.append(f"Fit in the window, n = {g['n']}, d = 64: {g['steps_per_s']:.0f} steps/s while the window drew "
                   f"{g['frames_per_s']:.0f} frames/s; longest GUI block {g['max_block_ms']:.0f} ms "
                   f"(target ≤ 50){mark(g['met'])}{repeats_note(g, runs)}")
        if "max_block_gui_cpu_ms" in g:
            out.append(f"  of which the GUI thread worked {g['max_block_gui_cpu_ms']:.0f} ms (at most "
                       f"{g['max_gui_work_ms']:.0f} ms of work between two ticks); load {g['load']:.1f} "
                       f"on {g['cpus']} CPUs")
    return out
