"""The behaviour rows of the bench report (the measurement itself opens SmolLM2 and MiniLM in
fresh processes, which the full `attnexplorer bench` does; here, what the report makes of a row)."""

from attnexplorer.bench.behaviour import TARGETS, format_rows


def test_rows_are_judged_against_their_targets():
    rows = [{"model": "smollm2", "targets": TARGETS["smollm2"], "tokens": 30, "layers": 30, "recomputed_layers": 15,
             "edit_ms": 120.0, "ablation_ms": 160.0, "lens_ms": 20.0, "met": False, "load_before": 1.0, "load_after": 1.2,
             "edit_lens_ms": 141.0, "edit_worker_cpu_ms": 130.0, "edit_gui_cpu_ms": 35.0,
             "ablation_worker_cpu_ms": 125.0, "ablation_gui_cpu_ms": 12.0},
            {"model": "minilm", "targets": TARGETS["minilm"], "tokens": 32, "layers": 6, "recomputed_layers": None,
             "ablation_ms": 40.0, "met": True},
            {"model": "smollm2", "targets": TARGETS["smollm2"], "error": "smollm2 is not installed", "met": None}]
    text = "\n".join(format_rows(rows))
    assert "layers 15–29 recomputed: cell edit 120 ms (≤ 150); ablation toggle 160 ms (≤ 150); " \
           "logit lens on top 20 ms (≤ 50)  MISSED" in text
    assert ("the edit's lens drawn at 141 ms; CPU per edit: worker 130 ms, GUI thread 35 ms; "
            "CPU per toggle: worker 125 ms, GUI thread 12 ms") in text
    assert "minilm   32 tokens: ablation toggle 40 ms (≤ 60)  ok" in text
    assert "not measured: smollm2 is not installed" in text
