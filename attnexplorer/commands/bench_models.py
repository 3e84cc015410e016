"""The real-model rows of ``attnexplorer bench``.

Each row is timed in a fresh Python process, as a person's first open in a session would be
(transformers imported, the model read from disk, the text run, and the model view's
thumbnails painted offscreen): MiniLM on a 32-token text (target ≤ 3 s) and SmolLM2 from the
dequantised cache (target ≤ 5 s; the cache is filled first, untimed, when it is empty).
A model that is not installed gives a row saying so instead of a time.
"""

from __future__ import annotations

import json
import subprocess
import sys

TARGETS = {"minilm": 3.0, "smollm2": 5.0}

# 32 tokens for MiniLM with [CLS] and [SEP]
TEXT_32 = ("The dog fetched the ball and she was happy because the sun was warm, the grass was "
           "green and the whole long afternoon lay ahead of them all")

_PROBE = r"""
import json, os, sys, time
started = time.perf_counter()
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtWidgets import QApplication
app = QApplication.instance() or QApplication([])
from attnexplorer.ui.model_views import ModelGrid
import torch, transformers
imported = time.perf_counter()
from attnexplorer.models.loading import load_model
loaded = load_model(sys.argv[1])
opened = time.perf_counter()
run = loaded.run(sys.argv[2])
ran = time.perf_counter()
grid = ModelGrid()
grid.set_attentions(run.attentions)
grid.grab()
done = time.perf_counter()
print(json.dumps({"seconds": done - started, "import_s": imported - started, "open_s": opened - imported,
                  "run_s": ran - opened, "paint_s": done - ran, "tokens": len(run.tokens),
                  "from_cache": loaded.from_cache, "layers": loaded.num_layers, "heads": loaded.num_heads}))
"""


def _probe(name: str, text: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, name, text], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_models() -> list[dict]:
    from ..models import missing_dependencies, packaged_models

    problem = missing_dependencies()
    installed = {name: ok for name, _what, ok in packaged_models()}
    rows = []
    for name, target in TARGETS.items():
        row = {"model": name, "target_s": target}
        if problem or not installed.get(name):
            row.update(seconds=None, met=None, error=problem or f"{name} is not installed")
            rows.append(row)
            continue
        if name == "smollm2":
            warm = _probe(name, "Hello")   # fills the dequantised cache when empty (untimed)
            if "error" in warm:
                row.update(seconds=None, met=False, error=warm["error"])
                rows.append(row)
                continue
        result = _probe(name, TEXT_32)
        if "error" in result:
            row.update(seconds=None, met=False, error=result["error"])
        else:
            row.update(result, met=result["seconds"] <= target)
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> list[str]:
    out = ["Real models: open → text run → model view painted, in a fresh process"]
    for row in rows:
        if row.get("seconds") is None:
            out.append(f"  {row['model']:8} not measured: {row.get('error')}")
            continue
        how = "from the cache, " if row.get("from_cache") else ""
        out.append(f"  {row['model']:8} {row['tokens']:>3} tokens, {row['layers']} × {row['heads']} thumbnails: "
                   f"{how}{row['seconds']:.2f} s (target ≤ {row['target_s']:.0f} s)"
                   + ("  ok" if row["met"] else "  MISSED"))
        out.append(f"           imports {row['import_s']:.2f} s, open {row['open_s']:.2f} s, "
                   f"run {row['run_s']:.2f} s, paint {row['paint_s']:.2f} s")
    return out
