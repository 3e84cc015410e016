"""The heads row of ``attnexplorer bench`` (issue 24): head scores and attribution on SmolLM2.

In a fresh process, SmolLM2 (270 heads): every built-in score on a 64-token text (the time
spent in the scorer during the forward, ``observe``: what scoring adds to the run), the
induction probe ``repeated:256`` (512 tokens, run a block of rows at a time) from ids to
scores in all, direct logit attribution on the 32-token text, and a zero-ablation sweep of all
270 heads on it. Targets: scores ≤ 3 s after the forward, the probe ≤ 20 s, DLA ≤ 1 s, the
sweep ≤ 30 s. And in a second fresh process, every built-in score computed during the long
forward of 4,096 tokens (a block of query rows at a time, nothing n × n kept per head): the
process's peak resident memory (``ru_maxrss``: torch, the model's weights and the run), target
< 2 GB, and the forward's time with the scorer in it.
"""

from __future__ import annotations

from .real_models import TEXT_32, _load, run_probe

TARGETS = {"scores_s": 3.0, "probe_s": 20.0, "dla_s": 1.0, "sweep_s": 30.0, "long_peak_mb": 2048.0}
LONG_TOKENS = 4096
MODEL = "smollm2"

_PROBE = r"""
import json, sys, time
from attnexplorer.models.loading import load_model
from attnexplorer.models.head_scores import DEFAULT, HeadScores, make_probe, parse_scores
from attnexplorer.models.head_attribution import ablation_sweep, direct_logit_attribution, pick
from attnexplorer.models.interventions import Behaviour
name, text32 = sys.argv[1], sys.argv[2]
loaded = load_model(name)
words = (text32 + " ") * 4
ids = loaded.tokenize(words)[0][:64]
pieces = [loaded.tokenizer.piece(i) for i in ids]
scorer = HeadScores(parse_scores(DEFAULT), ids, loaded.num_layers, loaded.num_heads)
spent = [0.0]
def timed(layer, first, weights):
    t = time.perf_counter()
    scorer(layer, first, weights)
    spent[0] += time.perf_counter() - t
loaded.run_ids(ids, pieces, "64 tokens", observe=timed)
scorer.result()
t0 = time.perf_counter()
probe = make_probe(loaded, "repeated:256")
probe_scorer = HeadScores(parse_scores("induction"), probe.ids, loaded.num_layers, loaded.num_heads, probe)
loaded.run_ids(list(probe.ids), [loaded.tokenizer.piece(i) for i in probe.ids], probe.name, observe=probe_scorer)
top = probe_scorer.result()["induction"].argmax()
t1 = time.perf_counter()
behaviour = Behaviour(loaded, loaded.run(text32))
picked = pick(behaviour, " them")
t2 = time.perf_counter()
direct_logit_attribution(behaviour, picked)
t3 = time.perf_counter()
ablation_sweep(behaviour, picked, "zero")
t4 = time.perf_counter()
print(json.dumps({"heads": loaded.num_layers * loaded.num_heads, "scores_s": spent[0], "probe_s": t1 - t0,
                  "probe_tokens": len(probe.ids), "top_induction": [int(top // loaded.num_heads), int(top % loaded.num_heads)],
                  "dla_s": t3 - t2, "sweep_s": t4 - t3, "tokens": len(behaviour.run.ids)}))
"""


_LONG = r"""
import gc, json, resource, sys, time
from attnexplorer.bench.real_models import long_text
from attnexplorer.models.loading import load_model
from attnexplorer.models.head_scores import DEFAULT, HeadScores, parse_scores
name, tokens = sys.argv[1], int(sys.argv[2])
loaded = load_model(name)
ids, pieces = loaded.tokenize(long_text(loaded, tokens))
gc.collect()
scorer = HeadScores(parse_scores(DEFAULT), ids, loaded.num_layers, loaded.num_heads)
t0 = time.perf_counter()
run = loaded.run_ids(ids, pieces, "long", observe=scorer)
scores = scorer.result()
t1 = time.perf_counter()
print(json.dumps({"long_tokens": len(ids), "long_streamed": run.long, "long_s": t1 - t0, "long_scores": len(scores),
                  "long_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_heads() -> dict:
    from ..models import missing_dependencies, packaged_models

    problem = missing_dependencies()
    installed = {name: ok for name, _what, ok in packaged_models()}
    row = {"model": MODEL, "targets": TARGETS}
    if problem or not installed.get(MODEL):
        row.update(error=problem or f"{MODEL} is not installed", met=None)
        return row
    row["load_before"] = _load()
    result = run_probe(_PROBE, MODEL, TEXT_32)
    row["load_after"] = _load()
    if "error" in result:
        row.update(error=result["error"], met=False)
        return row
    row.update(result)
    long = run_probe(_LONG, MODEL, str(LONG_TOKENS))
    row["load_after"] = _load()
    if "error" in long:
        row.update(long_error=long["error"], met=False)
        return row
    row.update(long)
    row["met"] = all(row[key] <= limit for key, limit in TARGETS.items() if key != "long_peak_mb") \
        and row["long_peak_mb"] < TARGETS["long_peak_mb"]
    return row


def format_row(row: dict) -> list[str]:
    out = ["Which heads do what: scores and attribution"]
    if row.get("error"):
        out.append(f"  {row['model']:8} not measured: {row['error']}")
        return out

    def mark(key):
        return "ok" if row[key] <= TARGETS[key] else "MISSED"

    out.append(f"  {row['model']:8} {row['heads']} heads: every score on 64 tokens {row['scores_s']:.2f} s "
               f"(≤ {TARGETS['scores_s']:.0f}) {mark('scores_s')}; repeated:256 ({row['probe_tokens']} tokens) "
               f"{row['probe_s']:.1f} s (≤ {TARGETS['probe_s']:.0f}) {mark('probe_s')}")
    out.append(f"           on {row['tokens']} tokens: DLA {row['dla_s']:.2f} s (≤ {TARGETS['dla_s']:.0f}) {mark('dla_s')}; "
               f"zero-ablation sweep {row['sweep_s']:.1f} s (≤ {TARGETS['sweep_s']:.0f}) {mark('sweep_s')}")
    if row.get("long_error"):
        out.append(f"           at {LONG_TOKENS:,} tokens: not measured: {row['long_error']}")
    elif row.get("long_peak_mb") is not None:
        ok = "ok" if row["long_peak_mb"] < TARGETS["long_peak_mb"] else "MISSED"
        out.append(f"           every score during the long forward of {row['long_tokens']:,} tokens: "
                   f"{row['long_s']:.1f} s, peak memory {row['long_peak_mb']:.0f} MB (< {TARGETS['long_peak_mb']:.0f}) {ok}")
    if row.get("load_before") is not None:
        out.append(f"           load average {row['load_before']:.2f} before, {row['load_after']:.2f} after")
    return out
