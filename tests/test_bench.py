"""`attnexplorer bench` runs headless and its JSON has the documented fields.

The figures themselves are not asserted: these machines are shared and noisy (issue 5).
"""

import json
import subprocess
import sys

ENGINE_FIELDS = {"n", "d", "heads", "device", "dtype", "engine_ms", "bare_ms", "ratio", "met"}
STAGES_FIELDS = {"n", "d", "heads", "kv_heads", "positions", "device", "dtype", "engine_ms", "bare_ms", "ratio", "met"}
REDRAW_FIELDS = {"n", "d", "heads", "median_ms", "compute_ms", "draw_ms", "target_ms", "met"}
DRAG_FIELDS = {"n", "steps", "median_ms", "redraws_per_s", "undo_steps", "target_per_s", "met"}
HEATMAP_FIELDS = {"n", "pyqtgraph_ms", "pyqtgraph_first_ms", "matplotlib_ms", "speedup", "met"}
LARGE_FIELDS = {"n", "heads", "first_window_ms", "edit_to_drawn_ms", "compute_ms",
                "max_block_while_computing_ms", "max_block_ms", "peak_mb", "met"}
EDIT_COST_FIELDS = {"heads", "d", "n", "edits", "undo_steps", "median_ms", "gui_cpu_ms", "compute_ms", "paint_ms",
                    "growth_mb", "peak", "target_ms", "target_mb", "met", "load_average"}
STARTUP_FIELDS = {"baseline_s", "app_s", "extra_s", "target_extra_s", "met"}
FIT_STEPS_FIELDS = {"n", "d", "steps", "steps_per_s", "target_per_s", "met"}
LONG_FIELDS = {"n", "heads", "path", "overview_s", "outputs_s", "tile_ms", "row_ms", "peak_mb", "met"}
FIT_GUI_FIELDS = {"n", "seconds", "steps", "steps_per_s", "frames_per_s", "max_block_ms", "max_block_gui_cpu_ms",
                  "max_gui_work_ms", "load", "cpus", "target_block_ms", "met"}


def test_bench_json_has_the_documented_fields():
    proc = subprocess.run([sys.executable, "-m", "attnexplorer", "bench", "--quick", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    start = proc.stdout.index("{")
    data = json.loads(proc.stdout[start:])
    assert {"machine", "targets", "engine", "stages", "redraw", "drag", "heatmap", "large", "startup", "seconds"} <= set(data)
    assert {"python", "cpu", "cores", "torch", "devices"} <= set(data["machine"])
    assert data["engine"] and all(ENGINE_FIELDS <= set(row) for row in data["engine"])
    assert {row["positions"] for row in data["stages"]} == {"rope", "alibi"}
    assert all(STAGES_FIELDS <= set(row) and row["engine_ms"] > 0 for row in data["stages"])
    assert all(row["engine_ms"] > 0 and row["bare_ms"] > 0 for row in data["engine"])
    assert data["redraw"] and all(REDRAW_FIELDS <= set(row) for row in data["redraw"])
    assert DRAG_FIELDS <= set(data["drag"])
    assert data["drag"]["undo_steps"] == 1  # one drag is one undo step
    assert EDIT_COST_FIELDS <= set(data["edit_cost"]), data["edit_cost"]
    assert data["edit_cost"]["undo_steps"] == data["edit_cost"]["edits"]  # different cells: one step each
    assert data["heatmap"] and all(HEATMAP_FIELDS <= set(row) for row in data["heatmap"])
    assert LARGE_FIELDS <= set(data["large"]), data["large"]
    assert STARTUP_FIELDS <= set(data["startup"]), data["startup"]
    assert data["startup"]["app_s"] > 0
    assert FIT_STEPS_FIELDS <= set(data["fit_steps"]) and data["fit_steps"]["steps_per_s"] > 0
    assert FIT_GUI_FIELDS <= set(data["fit_gui"]), data["fit_gui"]
    assert data["fit_gui"]["steps"] > 0 and data["fit_gui"]["frames_per_s"] > 0  # the window followed the fit
    assert LONG_FIELDS <= set(data["long"]), data["long"]
    assert [row["path"] for row in data["long_dense"]] == ["dense", "streamed"]


def test_bench_text_report_names_every_section():
    from attnexplorer.bench.report import format_report

    fake_row = {"device": "cpu", "n": 16, "heads": 1, "engine_ms": 1.0, "bare_ms": 1.0, "ratio": 1.0, "met": True}
    report = format_report({
        "machine": {"cpu": "x", "cores": 2, "torch": "t", "torch_threads": 2, "devices": ["cpu"]},
        "engine": [fake_row],
        "stages": [dict(fake_row, positions="rope", n=1024)],
        "redraw": [{"n": 64, "median_ms": 10.0, "target_ms": 16.0, "met": True}],
        "drag": {"n": 512, "redraws_per_s": 40.0, "median_ms": 25.0, "met": True, "undo_steps": 1},
        "edit_cost": {"heads": 16, "d": 512, "n": 8, "edits": 20, "undo_steps": 20, "median_ms": 12.0, "gui_cpu_ms": 11.0,
                      "compute_ms": 1.0, "paint_ms": 4.0, "growth_mb": 3.0, "peak": True, "target_ms": 20.0,
                      "target_mb": 50.0, "met": True, "load_average": 8.5},
        "heatmap": [{"n": 16, "pyqtgraph_ms": 1.0, "pyqtgraph_first_ms": 2.0, "matplotlib_ms": 20.0, "speedup": 20.0,
                     "met": True}],
        "large": {"n": 4096, "error": "boom"},
        "startup": {"app_s": 2.0, "baseline_s": 1.5, "extra_s": 0.5, "met": True},
        "fit_steps": {"n": 16, "d": 16, "steps_per_s": 250.0, "met": True},
        "fit_gui": {"n": 512, "steps_per_s": 40.0, "frames_per_s": 30.0, "max_block_ms": 20.0, "met": True},
        "seconds": 1.0,
    })
    for words in ("Fit a head (Adam, previous token, causal), CPU, no window: n = 16, d = 16: 250 steps/s",
                  "Fit in the window, n = 512, d = 64: 40 steps/s while the window drew 30 frames/s",
                  "Engine vs bare torch", "8 query heads sharing 2 K/V heads", "Edit → every visible panel",
                  "Dragging the sine", "One W_q cell edit at 16 heads", "12.0 ms until every panel is painted",
                  "the engine 1.0 ms", "processor time 11.0 ms", "load average 8.5", "raised peak memory by 3.0 MB",
                  "matplotlib",
                  "Large session n = 4096: FAILED: boom", "Start-up"):
        assert words in report


def test_bench_without_matplotlib_says_what_to_install_and_runs_nothing(monkeypatch, capsys):
    import importlib.util

    from attnexplorer.bench import run as bench

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(bench, "collect", lambda **kw: (_ for _ in ()).throw(AssertionError("ran anyway")))
    assert bench.run_bench(type("Args", (), {"quick": True})()) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "pip install matplotlib" in err


def test_measure_engine_overhead_reports_its_fields():
    import pytest

    from attnexplorer.bench import engine as engine_bench
    from attnexplorer.core.errors import EngineError

    r = engine_bench.measure_engine_overhead(16, d=4, heads=2, repeats=3)
    assert set(r) == {"n", "d", "heads", "device", "dtype", "repeats", "engine_ms", "bare_ms", "ratio"}
    assert (r["n"], r["d"], r["heads"], r["device"], r["repeats"]) == (16, 4, 2, "cpu", 3)
    assert r["engine_ms"] > 0 and r["bare_ms"] > 0
    assert r["ratio"] == pytest.approx(r["engine_ms"] / r["bare_ms"])
    with pytest.raises(EngineError, match="repeats"):
        engine_bench.measure_engine_overhead(16, repeats=0)


def test_the_start_up_probe_opens_the_app_window_and_says_when_it_is_painted(tmp_path):
    # The bench's start-up row runs this in a fresh interpreter; the app has no hook for it.
    import os

    from attnexplorer.bench.startup_probe import COMMAND

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ATTNEXPLORER_CONFIG_DIR=str(tmp_path / "config"),
               ATTNEXPLORER_DATA_DIR=str(tmp_path / "data"))
    good = subprocess.run([sys.executable, "-c", COMMAND, "--preset", "dessert"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert good.returncode == 0, good.stderr
    (line,) = [line for line in good.stdout.splitlines() if line.startswith("painted ")]
    assert float(line.split()[1]) > 0
    bad = subprocess.run([sys.executable, "-c", COMMAND, "--preset", "nope"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert bad.returncode == 2
    assert "unknown preset 'nope'" in bad.stderr and "Traceback" not in bad.stderr
    assert "painted" not in bad.stdout
