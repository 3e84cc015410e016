"""The long-inputs rows of `attnexplorer bench`: each figure from a fresh process, every field
there, and the report names them. The figures themselves are not asserted (shared machines)."""

from attnexplorer.commands import long_bench
from attnexplorer.commands.long_bench import _child, format_long


def test_a_child_process_reports_the_streamed_and_the_dense_figures():
    streamed = _child(256, 2, "streamed")
    assert {"overview_s", "outputs_s", "tile_ms", "row_ms", "peak_mb", "before_mb"} <= set(streamed), streamed
    assert streamed["overview_s"] > 0 and streamed["peak_mb"] >= streamed["before_mb"] > 0
    dense = _child(128, 2, "dense")
    assert dense["path"] == "dense" and dense["overview_s"] > 0 and "tile_ms" not in dense


def test_a_failed_child_says_why_in_one_line():
    row = _child(0, 2, "streamed")  # 0 tokens: the preset refuses
    assert "error" in row and "\n" not in row["error"] and "0" in row["error"]


def test_the_report_names_every_figure_and_the_target():
    row = {"n": 16384, "heads": 4, "path": "streamed", "overview_s": 7.5, "outputs_s": 6.0, "tile_ms": 3.0,
           "row_ms": 2.0, "peak_mb": 600.0, "load": "1.20", "met": True}
    dense = {"n": 4096, "heads": 4, "path": "dense", "overview_s": 1.5, "peak_mb": 1800.0}
    window = {"n": 16384, "heads": 4, "edit_to_drawn_ms": 12000.0, "max_block_while_computing_ms": 40.0,
              "scroll_step_ms": 5.0, "peak_mb": 800.0}
    lines = "\n".join(format_long({"long": row, "long_dense": [dense, dict(row, n=4096)], "long_window": window},
                                   lambda met: " ok"))
    for words in ("Long input n = 16,384, 4 heads", "load average 1.20", "first complete overview of all heads 7.5 s",
                  "zoom tile 128×128 3.0 ms", "selected row 2.0 ms", "peak memory 600 MB (target < 2048) ok",
                  "n = 4,096    dense: every matrix 1.50 s, peak memory 1800 MB", "n = 4,096 streamed: overview",
                  "the window at n = 16,384 (d_k = 16): edit → drawn 12.0 s, longest GUI block while computing 40 ms"):
        assert words in lines, words
    assert long_bench.TARGETS == {"long_overview_s": 10.0, "long_peak_mb": 2048.0}
