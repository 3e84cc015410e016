"""The behaviour rows of ``attnexplorer bench`` (issue 23): how fast an edit or an ablation
reaches the model's prediction in the running app.

One fresh process per model, the app's main window up, the model opened through File ▸ Open
model…'s own call (``ModelController.start``) on a 32-token text:

- **SmolLM2**, layer 15 in the tables: one cell edit (W_q of head 0) → the Predictions panel
  redrawn with the edited layer's prediction (``edit_ms``, target ≤ 150 ms; the recompute
  runs layers 15–29 only, which the row checks: ``recomputed_layers``), and on to its logit
  lens drawn too (``edit_lens_ms``: the job hands the prediction over before the lens); one
  ablation toggle (L15H0 zero-ablated, then restored) → the panel redrawn (``ablation_ms``,
  ≤ 150 ms); the whole logit lens on top of a prediction (``Behaviour.predict`` with and
  without it, same interventions: ``lens_ms``, ≤ 50 ms more).
- **MiniLM** (no LM head: the pooled embedding's cosine): an ablation toggle → the panel
  redrawn (``ablation_ms``, ≤ 60 ms).

Each time is the median of several repeats, each waiting for a new answer (the one before is
cleared first: from the second edit on, the last answer already said "layer 15 edited", and
the row once timed only the edit's own call); the load average is reported beside them. So
is the CPU time per edit and per toggle of the prediction's worker thread and of the GUI
thread (``*_worker_cpu_ms``, ``*_gui_cpu_ms``): on a busy machine the wall times say more
about the other processes than about the app, those do not.
"""

from __future__ import annotations

import statistics

from .real_models import TEXT_32, _load, run_probe, not_installed

TARGETS = {"smollm2": {"edit_ms": 150.0, "ablation_ms": 150.0, "lens_ms": 50.0}, "minilm": {"ablation_ms": 60.0}}
LAYER = 15

_PROBE = r"""
import json, statistics, sys, time
from attnexplorer.bench.harness import close_window, end_probe, open_probe_window
app, document, window, errors = open_probe_window()
name, text, layer, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from attnexplorer.ui.model import behaviour_control
from attnexplorer.ui.model.controller import ModelController
worker_cpu = []   # the prediction worker's CPU per job
predict = behaviour_control.predict

def timed_predict(*args, **kwargs):
    started = time.thread_time()
    try:
        return predict(*args, **kwargs)
    finally:
        worker_cpu.append(time.thread_time() - started)

behaviour_control.predict = timed_predict
window.model_controller = controller = ModelController(window, document, window.actions)
control = controller.behaviour
controller.start(name, text, layer)

def wait(done, limit=600.0):
    end = time.perf_counter() + limit
    while not done() and not errors and time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.0005)
    if errors or not done():
        raise SystemExit(errors[0] if errors else "timed out")

def drawn(what, lens=False):
    # the Predictions panels drawn with ``what`` in effect (with ``lens``: its logit lens too)
    def done():
        r = control.last_result if lens else control.last_prediction
        return r is not None and ((r.get("intervened") or {}).get("interventions") or []) == what
    return done

def settle():
    # the last answer's lens and the tables' redraw done: each repeat starts from a quiet window
    wait(lambda: control.jobs.idle)
    for _ in range(20):
        app.processEvents()
        time.sleep(0.002)

def measure(change, what, into):
    settle()
    control.last_result = control.last_prediction = None
    worker_cpu.clear()
    gui, started = time.thread_time(), time.perf_counter()
    change()
    wait(drawn(what))
    into["ms"].append(1000 * (time.perf_counter() - started))
    into["gui"].append(1000 * (time.thread_time() - gui))
    wait(drawn(what, lens=True))
    into["lens"].append(1000 * (time.perf_counter() - started))
    into["worker"].append(1000 * sum(worker_cpu))

wait(drawn([], lens=True))
behaviour = control.behaviour
out = {"tokens": len(behaviour.run.ids), "layers": behaviour.loaded.num_layers}
edits, ablations = ({"ms": [], "gui": [], "lens": [], "worker": []} for _ in range(2))
if behaviour.problem is None:
    session = document.session
    for i in range(repeats):
        w = session.w_query.copy()
        w[0, 0, 0] += 0.5 * (i + 1)
        measure(lambda: document.edit(session.replace(w_query=w), "Edit W_q"), [f"layer {layer} edited"], edits)
    edited = control.interventions()
    out["recomputed_layers"] = out["layers"] - behaviour.effective(edited).first_layer()
    document.edit(session, "back")
    wait(drawn([], lens=True))
    out.update(edit_ms=edits["ms"], edit_lens_ms=edits["lens"], edit_gui_cpu_ms=edits["gui"],
               edit_worker_cpu_ms=edits["worker"])
for i in range(repeats):
    measure(lambda: control.set_ablation(layer, 0, "zero"), [f"L{layer}H0 zero"], ablations)
    control.set_ablation(layer, 0, None)
    wait(drawn([], lens=True))
out.update(ablation_ms=ablations["ms"], ablation_gui_cpu_ms=ablations["gui"], ablation_worker_cpu_ms=ablations["worker"])
if behaviour.problem is None:
    from attnexplorer.models.interventions import Interventions
    ablated = Interventions().with_ablation(layer, 0, "zero")
    lens = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        behaviour.predict(ablated, top=10)
        t1 = time.perf_counter()
        behaviour.predict(ablated, top=10, lens=True)
        t2 = time.perf_counter()
        lens.append(1000 * ((t2 - t1) - (t1 - t0)))
    out["lens_ms"] = lens
print(json.dumps(out))
controller.window.close()
controller.shutdown()
close_window(document, window)
end_probe(controller.window)
"""

# Reported beside the targets: the in-app lens, and the CPU time per change of both threads.
EXTRA = ("edit_lens_ms", "edit_gui_cpu_ms", "edit_worker_cpu_ms", "ablation_gui_cpu_ms", "ablation_worker_cpu_ms")


def bench_behaviour(repeats: int = 7) -> list[dict]:
    """One row per model: the medians, each against its target."""
    from ..models import missing_dependencies, packaged_models

    problem = missing_dependencies()
    installed = {name: ok for name, _what, ok in packaged_models()}
    rows = []
    for name, targets in TARGETS.items():
        row = {"model": name, "targets": targets}
        if problem or not installed.get(name):
            row.update(error=problem or not_installed(name), met=None)
            rows.append(row)
            continue
        row["load_before"] = _load()
        result = run_probe(_PROBE, name, TEXT_32, str(LAYER if name == "smollm2" else 3), str(repeats))
        row["load_after"] = _load()
        if "error" in result:
            row.update(error=result["error"], met=False)
            rows.append(row)
            continue
        row.update(tokens=result["tokens"], layers=result["layers"], recomputed_layers=result.get("recomputed_layers"))
        for key in targets:
            row[key] = statistics.median(result[key]) if result.get(key) else None
            row[key + "_all"] = result.get(key)
        for key in EXTRA:
            if result.get(key):
                row[key] = statistics.median(result[key])
        row["met"] = all(row[key] is not None and row[key] <= target for key, target in targets.items())
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> list[str]:
    out = ["Behaviour: an edit or an ablation → the Predictions panel redrawn (median, in the running app)"]
    names = {"edit_ms": "cell edit", "ablation_ms": "ablation toggle", "lens_ms": "logit lens on top"}
    for row in rows:
        if row.get("error"):
            out.append(f"  {row['model']:8} not measured: {row['error']}")
            continue
        parts = [f"{names[key]} {row[key]:.0f} ms (≤ {target:.0f})" for key, target in row["targets"].items()
                 if row.get(key) is not None]
        recomputed, layers = row.get("recomputed_layers"), row.get("layers")
        extra = f", layers {layers - recomputed}–{layers - 1} recomputed" if recomputed else ""
        out.append(f"  {row['model']:8} {row['tokens']} tokens{extra}: " + "; ".join(parts)
                   + ("  ok" if row["met"] else "  MISSED"))
        more = [f"the edit's lens drawn at {row['edit_lens_ms']:.0f} ms"] if row.get("edit_lens_ms") is not None else []
        more += [f"CPU per {what}: worker {row[key + '_worker_cpu_ms']:.0f} ms, GUI thread {row[key + '_gui_cpu_ms']:.0f} ms"
                 for key, what in (("edit", "edit"), ("ablation", "toggle"))
                 if row.get(key + "_worker_cpu_ms") is not None and row.get(key + "_gui_cpu_ms") is not None]
        if more:
            out.append("           " + "; ".join(more))
        if row.get("load_before") is not None:
            out.append(f"           load average {row['load_before']:.2f} before, {row['load_after']:.2f} after")
    return out
