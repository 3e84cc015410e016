"""The long-inputs rows of `attnexplorer bench`: each figure from a fresh process, every field
there, and the report names them. The figures themselves are not asserted (shared machines)."""

from attnexplorer.bench import long as long_bench
from attnexplorer.bench.long import run_child, format_long


def test_a_child_process_reports_the_streamed_and_the_dense_figures():
    streamed = run_child(256, 2, "streamed")
    assert {"overview_s", "outputs_s", "tile_ms", "row_ms", "peak_mb", "before_mb"} <= set(streamed), streamed
    assert streamed["overview_s"] > 0 and streamed["peak_mb"] >= streamed["before_mb"] > 0
    masked = run_child(256, 2, "causal")
    assert masked["path"] == "causal" and masked["peak_mb"] >= masked["held_mb"] > 0 and masked["overview_s"] > 0
    dense = run_child(128, 2, "dense")
    assert dense["path"] == "dense" and dense["overview_s"] > 0 and "tile_ms" not in dense


def test_a_failed_child_says_why_in_one_line():
    row = run_child(0, 2, "streamed")  # 0 tokens: the preset refuses
    assert "error" in row and "\n" not in row["error"] and "0" in row["error"]


def test_the_report_names_every_figure_and_the_target():
    row = {"n": 16384, "heads": 4, "path": "streamed", "overview_s": 7.5, "outputs_s": 6.0, "tile_ms": 3.0,
           "row_ms": 2.0, "peak_mb": 600.0, "load": "1.20", "met": True}
    dense = {"n": 4096, "heads": 4, "path": "dense", "overview_s": 1.5, "peak_mb": 1800.0}
    window = {"n": 16384, "heads": 4, "d": 64, "first_overview_s": 9.0, "edit_to_drawn_ms": 12000.0,
              "max_block_while_computing_ms": 40.0, "gui_cpu_in_that_block_ms": 3.0, "max_block_ms": 200.0,
              "partial_overviews": 6, "zoom_exact_ms": 20.0, "zoom_pooled_ms": 300.0, "scroll_step_ms": 5.0,
              "peak_mb": 800.0, "load": 1.5, "met": True}
    masked = {"n": 16384, "heads": 4, "path": "causal", "overview_s": 9.0, "peak_mb": 640.0, "held_mb": 400.0}
    lines = "\n".join(format_long({"long": row, "long_dense": [dense, dict(row, n=4096)], "long_window": window,
                                    "long_masked": masked}, lambda met: " ok"))
    for words in ("Long input n = 16,384, 4 heads", "load average 1.20", "first complete overview of all heads 7.5 s",
                  "zoom tile 128×128 3.0 ms", "selected row 2.0 ms", "peak memory 600 MB (target < 2048) ok",
                  "n = 4,096    dense: every matrix 1.50 s, peak memory 1800 MB", "n = 4,096 streamed: overview",
                  "the window at n = 16,384 (d = 64, load average 1.5): first overview 9.0 s, edit → drawn 12.0 s "
                  "(6 partial overviews", "longest GUI block while computing 40 ms (target ≤ 50; 3 ms of it GUI work) ok",
                  "zoom to exact cells 20 ms", "pooled from exact tiles 300 ms", "peak memory 800 MB",
                  "a causal mask, the whole result", "9.0 s, peak memory 640 MB, 400 MB held with the result"):
        assert words in lines, words
    assert long_bench.TARGETS == {"long_overview_s": 10.0, "long_peak_mb": 2048.0}


def test_the_window_row_reports_its_figures_from_a_fresh_window():
    from attnexplorer.bench.long_window import bench_window

    row = bench_window(512, 2, edits=2)
    assert "error" not in row, row
    # each edit's figures, the row's the median of them (every edit counted)
    assert row["repeats"] == 2 and len(row["max_block_while_computing_ms_all"]) == 2
    assert min(row["edit_to_drawn_ms_all"]) <= row["edit_to_drawn_ms"] <= max(row["edit_to_drawn_ms_all"])
    for key in ("first_overview_s", "edit_to_drawn_ms", "max_block_while_computing_ms", "gui_cpu_in_that_block_ms",
                "scroll_step_ms", "peak_mb", "zoom_exact_ms"):
        assert row[key] is not None and row[key] >= 0, key
    assert row["zoom_exact_factor"] == [1, 1]
