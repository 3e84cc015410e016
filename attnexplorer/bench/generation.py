"""The generation row of ``attnexplorer bench`` (issue 25): what the KV cache saves.

In a fresh process, SmolLM2 reads a prompt of 255 tokens; then, alternately, a cached step
(``Generation.step``: one token through every layer over the cache, to its top 5, at a
256-token context) and a recompute of the same 256 tokens from their embeddings to the last
position's logits (``forward_from`` over every layer, nothing n × n kept: what generating
without a cache costs a token). The step is taken back after each (``Generation.back``), so
every step runs at the same context. Targets: a step ≤ 60 ms and ≥ 5× faster than the recompute.
Then, in a second fresh process, the model window is shown and painted, and its Generate tab runs
64 tokens (Run) while a 5 ms timer on the GUI thread records the longest gap between its ticks:
the GUI thread's longest block during the run (target ≤ 50 ms). Medians; the load average is reported beside them.
"""

from __future__ import annotations

import statistics

from .real_models import TEXT_32, _load, run_probe

TARGETS = {"step_ms": 60.0, "speedup": 5.0, "run_block_ms": 50.0}
RUN_STEPS = 64
CONTEXT = 256
MODEL = "smollm2"

STEP_PROBE = r"""
import json, sys, time
import torch
from attnexplorer.models.loading import load_model
from attnexplorer.models.forward import family, forward_from
from attnexplorer.models.generation import Generation
from attnexplorer.models.interventions import Behaviour
name, words, context, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loaded = load_model(name)
words = (words.split() * context)
text = words.pop(0)
while words and len(loaded.tokenize(text + " " + words[0])[0]) <= context - 1:
    text += " " + words.pop(0)
behaviour = Behaviour(loaded, loaded.run(text))
generation = Generation(behaviour, stop=())
while generation.length < context - 1:   # topped up to the context by steps
    generation.step()
kind, config, weights = behaviour.kind, loaded.config, loaded.weights
model = family(kind, config, weights)

def recompute(ids):
    with torch.no_grad():
        x = model.embed(torch.tensor(ids))
    after, _ = forward_from(kind, config, weights, 0, x)
    return behaviour.logits(after[-1][-1:])[0]

step_ms, recompute_ms = [], []
for i in range(repeats + 1):
    t0 = time.perf_counter()
    generation.step()
    t1 = time.perf_counter()
    recompute(generation.ids)
    t2 = time.perf_counter()
    generation.back()
    if i:   # the first of each is a warm-up
        step_ms.append(1000 * (t1 - t0))
        recompute_ms.append(1000 * (t2 - t1))
print(json.dumps({"context": generation.length + 1, "layers": loaded.num_layers, "step_ms": step_ms,
                  "recompute_ms": recompute_ms, "threads": torch.get_num_threads()}))
"""

WINDOW_PROBE = r"""
import json, sys, time
from PySide6.QtCore import QTimer
from attnexplorer.bench.harness import close_window, end_probe, open_probe_window
app, document, window, errors = open_probe_window()
name, text, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
from attnexplorer.ui.model.controller import ModelController
window.model_controller = controller = ModelController(window, document, window.actions)
controller.start(name, text, 0)

def wait(done, limit=900.0):
    end = time.perf_counter() + limit
    while not done() and not errors and time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.0005)
    if errors or not done():
        raise SystemExit(errors[0] if errors else "timed out")

wait(lambda: controller.behaviour.last_result is not None)
panel, control = controller.window.generation, controller.generation
controller.window.side_tabs.setCurrentWidget(panel)
controller.window.show()
panel.run_count.setValue(steps)
# the window's first paint (every panel of the tab, the thumbnails) is not the run's: done first
settled = time.perf_counter() + 1.0
while time.perf_counter() < settled:
    app.processEvents()
    time.sleep(0.005)
gaps = {"max": 0.0, "last": time.perf_counter()}
def tick():
    now = time.perf_counter()
    gaps["max"] = max(gaps["max"], 1000 * (now - gaps["last"]))
    gaps["last"] = now
timer = QTimer()
timer.setInterval(5)
timer.timeout.connect(tick)
started = time.perf_counter()
gaps["last"] = started
timer.start()
panel.run_button.click()
wait(lambda: control.last is not None and (control.last["steps"] == steps or control.last["ended"]))
timer.stop()
print(json.dumps({"run_block_ms": gaps["max"], "run_s": time.perf_counter() - started,
                  "run_steps": control.last["steps"]}))
controller.window.close()
controller.shutdown()
close_window(document, window)
end_probe(controller.window)
"""


def bench_generation(repeats: int = 9) -> dict:
    """The SmolLM2 row: the medians of a cached step and of a recompute, and their ratio."""
    from ..models import missing_dependencies, packaged_models

    problem = missing_dependencies()
    installed = {name: ok for name, _what, ok in packaged_models()}
    row = {"model": MODEL, "targets": TARGETS}
    if problem or not installed.get(MODEL):
        row.update(error=problem or f"{MODEL} is not installed", met=None)
        return row
    row["load_before"] = _load()
    result = run_probe(STEP_PROBE, MODEL, TEXT_32, str(CONTEXT), str(repeats))
    row["load_after"] = _load()
    if "error" in result:
        row.update(error=result["error"], met=False)
        return row
    step, recompute = statistics.median(result["step_ms"]), statistics.median(result["recompute_ms"])
    row.update(context=result["context"], layers=result["layers"], step_ms=step, recompute_ms=recompute,
               speedup=recompute / step if step > 0 else None, step_all=result["step_ms"],
               recompute_all=result["recompute_ms"])
    window = run_probe(WINDOW_PROBE, MODEL, TEXT_32, str(RUN_STEPS))
    row["load_after"] = _load()
    if "error" in window:
        row.update(error=f"the window's Run {RUN_STEPS}: {window['error']}", met=False)
        return row
    row.update(window)
    row["met"] = (step <= TARGETS["step_ms"] and row["speedup"] is not None and row["speedup"] >= TARGETS["speedup"]
                  and window["run_block_ms"] <= TARGETS["run_block_ms"])
    return row


def format_row(row: dict) -> list[str]:
    out = ["Generation: one cached step vs recomputing the text (median)"]
    if row.get("error"):
        out.append(f"  {row['model']:8} not measured: {row['error']}")
        return out
    out.append(f"  {row['model']:8} at {row['context']} tokens: step {row['step_ms']:.1f} ms "
               f"(≤ {TARGETS['step_ms']:.0f}), recompute {row['recompute_ms']:.0f} ms, "
               f"{row['speedup']:.1f}× faster (≥ {TARGETS['speedup']:.0f})" + ("  ok" if row["met"] else "  MISSED"))
    if row.get("run_block_ms") is not None:
        out.append(f"           the window's Run {row['run_steps']}: {row['run_s']:.1f} s, the GUI thread's longest block "
                   f"{row['run_block_ms']:.0f} ms (≤ {TARGETS['run_block_ms']:.0f})")
    if row.get("load_before") is not None:
        out.append(f"           load average {row['load_before']:.2f} before, {row['load_after']:.2f} after")
    return out
