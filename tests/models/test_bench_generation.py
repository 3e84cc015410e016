"""The generation row of ``attnexplorer bench``: its probe runs (here on a tiny Llama, at a short
context, in a fresh process as the bench runs it) and the report judges the row against its
targets. The figures themselves are SmolLM2's, taken by the full bench."""

from attnexplorer.bench.generation import STEP_PROBE, WINDOW_PROBE, TARGETS, format_row
from attnexplorer.bench.real_models import TEXT_32, run_probe


def test_the_probe_steps_and_recomputes_at_the_context(tiny_llama_lm):
    result = run_probe(STEP_PROBE, str(tiny_llama_lm), TEXT_32, "40", "2")
    assert "error" not in result, result
    assert result["context"] == 40 and result["layers"] == 3
    assert len(result["step_ms"]) == len(result["recompute_ms"]) == 2
    assert all(t > 0 for t in result["step_ms"] + result["recompute_ms"])


def test_the_window_probe_runs_the_generate_tab(tiny_llama_lm):
    result = run_probe(WINDOW_PROBE, str(tiny_llama_lm), "The dog fetched the ball", "6")
    assert "error" not in result, result
    assert result["run_steps"] == 6 and result["run_block_ms"] > 0 and result["run_s"] > 0


def test_the_row_is_judged_against_its_targets():
    row = {"model": "smollm2", "targets": TARGETS, "context": 256, "layers": 30, "step_ms": 42.0,
           "recompute_ms": 400.0, "speedup": 400 / 42, "met": True, "load_before": 1.0, "load_after": 1.5,
           "run_steps": 64, "run_s": 5.2, "run_block_ms": 31.0}
    text = "\n".join(format_row(row))
    assert "smollm2  at 256 tokens: step 42.0 ms (≤ 60), recompute 400 ms, 9.5× faster (≥ 5)  ok" in text
    assert "the window's Run 64: 5.2 s, the GUI thread's longest block 31 ms (≤ 50)" in text
    assert "load average 1.00 before, 1.50 after" in text
    missed = "\n".join(format_row({**row, "step_ms": 80.0, "speedup": 5.0, "met": False}))
    assert "MISSED" in missed
    assert "not measured: smollm2 is not installed" in "\n".join(
        format_row({"model": "smollm2", "targets": TARGETS, "error": "smollm2 is not installed", "met": None}))
