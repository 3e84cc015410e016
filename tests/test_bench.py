"""`attnexplorer bench`: its report, unit by unit, and the row table and ``--only`` it runs from.

The whole bench takes minutes; one quick real run of its cheapest rows goes through an installed
wheel (tests/test_wheel_install.py: it checks those rows' fields with the sets below), and the
rows it measures are each tested where they are measured (tests/test_long_bench.py, the fit
and model tests). The figures themselves are not asserted:
these machines are shared and noisy (issue 5).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnexplorer.bench import run as bench
from attnexplorer.bench.report import format_report

ENGINE_FIELDS = {"n", "d", "heads", "device", "dtype", "engine_ms", "bare_ms", "ratio", "met"}
STAGES_FIELDS = {"n", "d", "heads", "kv_heads", "positions", "device", "dtype", "engine_ms", "bare_ms", "ratio", "met"}
REDRAW_FIELDS = {"n", "d", "heads", "median_ms", "gui_cpu_ms", "compute_ms", "draw_ms", "target_ms", "met"}
DRAG_FIELDS = {"n", "steps", "median_ms", "redraws_per_s", "gui_cpu_ms", "undo_steps", "target_per_s", "met"}
HEATMAP_FIELDS = {"n", "pyqtgraph_ms", "pyqtgraph_first_ms", "matplotlib_ms", "speedup", "met"}
LARGE_FIELDS = {"n", "heads", "first_window_ms", "edit_to_drawn_ms", "compute_ms",
                "max_block_while_computing_ms", "max_block_ms", "peak_mb", "met"}
EDIT_COST_FIELDS = {"heads", "d", "n", "edits", "undo_steps", "median_ms", "gui_cpu_ms", "compute_ms", "paint_ms",
                    "growth_mb", "memory_files_mb", "peak", "target_ms", "target_mb", "met", "load_average"}
STARTUP_FIELDS = {"baseline_s", "first_paint_s", "drawn_s", "torch_at_first_paint", "target_paint_s", "target_drawn_s",
                  "paint_met", "drawn_met", "met"}
FIT_STEPS_FIELDS = {"n", "d", "steps", "steps_per_s", "target_per_s", "met"}
LONG_FIELDS = {"n", "heads", "path", "overview_s", "outputs_s", "tile_ms", "row_ms", "peak_mb", "met"}
FIT_GUI_FIELDS = {"n", "seconds", "steps", "steps_per_s", "frames_per_s", "max_block_ms", "max_block_gui_cpu_ms",
                  "max_gui_work_ms", "load", "cpus", "target_block_ms", "met"}


MACHINE = {"python": "3.11", "cpu": "x", "cores": 2, "torch": "t", "torch_threads": 2, "devices": ["cpu"]}


def _row(fields: set[str], **values) -> dict:
    """A row with every documented field (1.0 unless given)."""
    return {**dict.fromkeys(fields, 1.0), **values}


def test_the_report_reads_only_the_documented_fields():
    # Every kind of row with exactly its documented fields: the report finds what it writes.
    report = format_report({
        "machine": MACHINE,
        "engine": [_row(ENGINE_FIELDS, device="cpu", met=True)],
        "stages": [_row(STAGES_FIELDS, device="cpu", positions="rope", met=True)],
        "redraw": [_row(REDRAW_FIELDS, met=True)],
        "drag": _row(DRAG_FIELDS, met=False),
        "edit_cost": _row(EDIT_COST_FIELDS, met=True),
        "heatmap": [_row(HEATMAP_FIELDS, met=True)],
        "large": _row(LARGE_FIELDS, met=True),
        "startup": _row(STARTUP_FIELDS, met=True),
        "fit_steps": _row(FIT_STEPS_FIELDS, met=True),
        "fit_gui": _row(FIT_GUI_FIELDS, met=True),
        "seconds": 1.0,
    })
    assert report.count(" ok") >= 9 and "target ≥ 1) MISSED" in report


def test_the_report_says_which_rows_failed():
    report = format_report({"machine": MACHINE, "large": {"n": 4096, "error": "boom"},
                            "startup": {"error": "no window"}, "fit_gui": {"n": 512, "error": "stuck"}, "seconds": 2.0})
    for line in ("Large session n = 4096: FAILED: boom", "Start-up: FAILED: no window",
                 "Fit in the window, n = 512: FAILED: stuck", "(2 s in all)"):
        assert line in report.splitlines()
    assert "Engine vs bare torch" not in report and "Fit a head" not in report


def test_every_kind_of_row_is_documented_and_offered():
    # The README's list of JSON fields, the row table and `--only`'s help name the same rows.
    from attnexplorer.commands.arguments import build_bench_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    listed = re.search(r"`--json` gives the same figures as JSON \(fields: (.*?)\)", readme, re.S)[1]
    fields = [f for kind in bench.row_kinds() for f in bench.ROW_FIELDS.get(kind, (kind,))]
    assert re.findall(r"`(\w+)`", listed) == ["machine", "date", "load_before", "targets", *fields, "load_after",
                                              "row_seconds", "seconds"]
    usage = " ".join(build_bench_parser().format_help().split())
    assert all(kind in usage for kind in bench.row_kinds())


def _speed_section() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return readme[readme.index("\n## Speed\n"):readme.index("\n## Packaging\n")]


def _flat(targets: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for key, value in targets.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = float(value)
    return out


def test_the_readme_names_the_bench_targets_and_no_others():
    """The Speed section is a record of `attnexplorer bench`: its targets table holds every
    target of ``bench.TARGETS`` (each figure in its row, in the order of the JSON names), and
    every target the section names anywhere (its prose, its run) is one of those numbers."""
    section = _speed_section()
    flat = _flat(bench.TARGETS)
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    named = {}
    for row in rows:
        _figure, target, json_names = [cell.strip() for cell in row.strip("|").split("|")]
        numbers = [float(x) for x in re.findall(r"[0-9]+(?:\.[0-9]+)?", target)]
        names = re.findall(r"`(\w+)`", json_names)
        keys = [k for name in names for k in flat if k == name or k.startswith(name + ".")]
        assert sorted(numbers) == sorted(flat[k] for k in keys), row
        named.update({k: flat[k] for k in keys})
    assert named == flat  # every target has its row
    values = set(flat.values())
    mentioned = re.findall(r"[Tt]argets?(?: met)?(?: then)?:? (?:≤|≥|<) ?\+?([0-9][0-9,]*(?:\.[0-9]+)?)\s*(GB|×|ms|s|MB|/s)?",
                           section)
    assert mentioned
    for number, unit in mentioned:
        value = float(number.replace(",", "")) * (1024 if unit == "GB" else 1)
        assert value in values, f"the README names a target of {number}{unit}, which bench.TARGETS does not hold"


@pytest.mark.parametrize("text,message", [
    ("nope", "--only: unknown row 'nope'; choose from engine, stages, redraw"),
    (" , ", "--only: no row named; choose from engine"),
])
def test_only_refuses_a_row_it_does_not_know_in_one_line(text, message, capsys):
    from attnexplorer.cli import main

    assert main(["bench", "--only", text]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnexplorer: {message}") and err.count("\n") == 1


def test_only_measures_the_rows_named_in_the_reports_order(monkeypatch):
    measured = []

    def kinds(quick, devices):
        def measure(name):
            measured.append(name)
            return {"long": {"n": 1}, "long_dense": []} if name == "long" else {"n": 1}
        return {name: (lambda name=name: measure(name)) for name in ("engine", "stages", "long")}

    monkeypatch.setattr(bench, "machine_info", lambda: MACHINE)
    monkeypatch.setattr(bench, "row_kinds", kinds)
    data = bench.collect(quick=True, only=("long", "engine"))
    assert measured == ["engine", "long"]
    assert set(data) == {"machine", "date", "load_before", "targets", "engine", "long", "long_dense", "load_after",
                         "row_seconds", "seconds"}
    assert list(data["row_seconds"]) == ["engine", "long"]
    # every row records the load average around its measurement
    assert {"load_before", "load_after"} <= set(data["engine"]) and {"load_before", "load_after"} <= set(data["long"])


def test_quick_leaves_out_the_real_model_rows_unless_only_names_them():
    kinds = bench.row_kinds(quick=True)
    everything = bench.measured_rows(True, None, kinds)
    assert bench.REAL_MODEL_ROWS <= set(kinds) and not bench.REAL_MODEL_ROWS & set(everything)
    assert everything[:2] == ["engine", "stages"]
    assert bench.measured_rows(False, None, kinds) == list(kinds)  # a full run measures every row
    # `--quick --only models` measured nothing: a row named is measured, quick or not
    assert bench.measured_rows(True, bench.parse_only("models"), kinds) == ["models"]
    assert bench.measured_rows(True, bench.parse_only("heads,engine"), kinds) == ["engine", "heads"]


def test_quick_measures_a_named_real_model_row_once(monkeypatch):
    import attnexplorer.bench.real_models as real_models

    asked = []
    monkeypatch.setattr(real_models, "bench_models", lambda repeats=3: asked.append(repeats) or [{"model": "x"}])
    monkeypatch.setattr(bench, "machine_info", lambda: MACHINE)
    data = bench.collect(quick=True, only=bench.parse_only("models"))
    assert asked == [1] and [row["model"] for row in data["models"]] == ["x"]
    assert all({"load_before", "load_after"} <= set(row) for row in data["models"])
    bench.collect(quick=False, only=("models",))
    assert asked == [1, 3]


def test_a_repeated_row_is_the_median_of_every_repeat():
    from attnexplorer.bench.harness import median_of

    runs = [{"block_ms": 90.0, "where": "slow"}, {"block_ms": 20.0, "where": "fast"}, {"block_ms": 30.0, "where": "mid"}]
    row = median_of(runs, ("block_ms",))
    # the slow repeat is counted, not dropped; the note is the median repeat's own
    assert row == {"block_ms": 30.0, "where": "mid", "block_ms_all": [90.0, 20.0, 30.0], "repeats": 3}
    assert median_of(runs + [{"error": "no window"}], ("block_ms",)) == {"error": "no window", "repeats": 4}
    report = format_report({"machine": MACHINE, "large": _row(LARGE_FIELDS, met=True, repeats=5, load_before=1.0,
                                                              load_after=1.5), "seconds": 1.0,
                            "row_seconds": {"large": 1.0}})
    assert "(median of 5 edits in one fresh process; load average 1.00 → 1.50)" in report
    assert "(1 s in all: large 1 s)" in report


def test_bench_text_report_names_every_section():
    fake_row = {"device": "cpu", "n": 16, "heads": 1, "engine_ms": 1.0, "bare_ms": 1.0, "ratio": 1.0, "met": True}
    report = format_report({
        "machine": {"cpu": "x", "cores": 2, "torch": "t", "torch_threads": 2, "devices": ["cpu"]},
        "engine": [fake_row],
        "stages": [dict(fake_row, positions="rope", n=1024)],
        "redraw": [{"n": 64, "median_ms": 10.0, "target_ms": 16.0, "met": True}],
        "drag": {"n": 512, "redraws_per_s": 40.0, "median_ms": 25.0, "gui_cpu_ms": 22.0, "target_per_s": 40.0, "met": True,
                 "undo_steps": 1},
        "edit_cost": {"heads": 16, "d": 512, "n": 8, "edits": 20, "undo_steps": 20, "median_ms": 12.0, "gui_cpu_ms": 11.0,
                      "compute_ms": 1.0, "paint_ms": 4.0, "growth_mb": 3.0, "peak": True, "target_ms": 20.0,
                      "target_mb": 50.0, "met": True, "load_average": 8.5},
        "heatmap": [{"n": 16, "pyqtgraph_ms": 1.0, "pyqtgraph_first_ms": 2.0, "matplotlib_ms": 20.0, "speedup": 20.0,
                     "met": True}],
        "large": {"n": 4096, "error": "boom"},
        "startup": {"baseline_s": 1.5, "first_paint_s": 0.9, "drawn_s": 2.0, "torch_at_first_paint": False,
                    "target_paint_s": 1.2, "target_drawn_s": 2.5, "paint_met": True, "drawn_met": True, "met": True},
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
                  "Large session n = 4096: FAILED: boom", "Start-up", "first painted window 0.90 s (before torch",
                  "every panel drawn 2.00 s (target ≤ 2.5 s) ok"):
        assert words in report


def test_bench_without_matplotlib_says_what_to_install_and_runs_nothing(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(bench, "collect", lambda **kw: (_ for _ in ()).throw(AssertionError("ran anyway")))
    assert bench.run_bench(type("Args", (), {"quick": True})()) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "pip install matplotlib" in err
    # Rows that draw nothing with matplotlib run without it.
    monkeypatch.setattr(bench, "collect", lambda **kw: {"machine": MACHINE, "seconds": 0.0, "only": kw["only"]})
    assert bench.run_bench(type("Args", (), {"quick": True, "only": "engine", "json": True})()) == 0
    assert json.loads(capsys.readouterr().out)["only"] == ["engine"]


def test_measure_engine_overhead_reports_its_fields():
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


def test_the_heads_row_reads_its_fields_and_its_targets():
    from attnexplorer.bench.heads import TARGETS, format_row

    row = {"model": "smollm2", "targets": TARGETS, "heads": 270, "scores_s": 0.4, "probe_s": 25.0, "probe_tokens": 512,
           "dla_s": 0.3, "sweep_s": 12.0, "tokens": 32, "load_before": 1.0, "load_after": 2.0, "met": False,
           "long_tokens": 4096, "long_s": 80.5, "long_peak_mb": 1500.0}
    lines = format_row(row)
    assert "every score on 64 tokens 0.40 s (≤ 3) ok" in lines[1] and "(512 tokens) 25.0 s (≤ 20) MISSED" in lines[1]
    assert "DLA 0.30 s (≤ 1) ok" in lines[2] and "sweep 12.0 s (≤ 30) ok" in lines[2]
    assert "long forward of 4,096 tokens: 80.5 s, peak memory 1500 MB (< 2048) ok" in lines[3]
    assert "(< 2048) MISSED" in format_row(dict(row, long_peak_mb=2100.0))[3]
    assert format_row({"model": "smollm2", "error": "smollm2 is not installed"})[1].endswith("not installed")
    assert "Which heads do what" in format_report({"machine": MACHINE, "heads": row, "seconds": 1.0})
