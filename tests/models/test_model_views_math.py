"""The head view's lines and the badge, without Qt."""

import numpy as np

from attnexplorer.models.views import badge_text, head_colours, head_lines, max_difference


def _weights():
    w = np.zeros((2, 3, 3))
    w[0] = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]
    w[1] = [[1, 0, 0], [0.9, 0.1, 0], [0.005, 0.005, 0.99]]
    return w


def test_one_head_lines_carry_the_weights_weakest_first():
    lines = head_lines(_weights(), 0)
    assert set(lines[:, 0]) == {0}
    assert lines.shape == (6, 4)   # the six nonzero weights of head 0
    assert np.all(np.diff(lines[:, 3]) >= 0)
    assert [tuple(r) for r in lines[-1:]] == [(0, 0, 0, 1.0)]


def test_all_heads_and_the_floor():
    lines = head_lines(_weights(), None, floor=0.01)
    assert set(lines[:, 0]) == {0, 1}
    # head 1's 0.005 weights are below the floor
    assert not np.any((lines[:, 0] == 1) & (lines[:, 3] < 0.01))


def test_hover_isolates_a_token():
    q = head_lines(_weights(), None, hover=("query", 2))
    assert set(q[:, 1]) == {2}
    k = head_lines(_weights(), 0, hover=("key", 1))
    assert set(k[:, 2]) == {1} and sorted(k[:, 3]) == [0.3, 0.5]


def test_colours_are_distinct():
    colours = head_colours(12)
    assert len(set(colours)) == 12


def test_badge():
    a = _weights()
    assert max_difference(a, a + 2e-7) < 3e-7
    assert badge_text(2e-7) == "matches the model: max |Δ| = 2e-7 (checked to 1e-5)"
    assert badge_text(0.0) == "matches the model: max |Δ| = 0 (checked to 1e-5)"
    # issue 27, item 6: rounding the check does not allow for is not an edit, and is not a match
    assert badge_text(8.1e-5) == ("near the model but not within 1e-5: weights max |Δ| = 8.1e-05 "
                                  "(float32 rounding, e.g. of RoPE's angles on a long text)")
    assert badge_text(max_difference(a, a * 0.5)) == "edited: differs from the model by up to 0.5 (weights)"
    assert badge_text(max_difference(a, a[:, :2, :2])).startswith("edited: the shape")


def test_bench_rows_read_as_a_report():
    from attnexplorer.bench.report import format_report
    from attnexplorer.bench.real_models import format_rows

    rows = [{"model": "minilm", "target_s": 3.0, "seconds": 1.2, "met": True, "tokens": 32, "layers": 6,
             "heads": 12, "from_cache": False, "engine": "attnexplorer", "fresh_s": 3.4, "fresh_met": False,
             "import_s": 1.0, "open_s": 0.5, "run_s": 0.4, "paint_s": 0.6, "load_before": 0.5, "load_after": 1.25,
             "repeats": 3},
            {"model": "smollm2", "target_s": 5.0, "seconds": None, "met": None, "error": "smollm2 is not installed"}]
    lines = format_rows(rows)
    assert ("  minilm    32 tokens, 6 × 12 thumbnails, attnexplorer forward: in the app 1.20 s (target ≤ 3 s)  ok"
            in lines)
    assert "           in a fresh process 3.40 s  over the target: imports 1.00 s, open 0.50 s, run 0.40 s, " \
           "window painted 0.60 s" in lines
    assert "           load average 0.50 before, 1.25 after (3 runs each)" in lines
    assert "  smollm2  not measured: smollm2 is not installed" in lines
    report = format_report({
        "machine": {"cpu": "x", "cores": 2, "torch": "t", "torch_threads": 2, "devices": ["cpu"]},
        "engine": [], "redraw": [], "heatmap": [], "large": {"n": 1, "error": "e"},
        "drag": {"n": 512, "redraws_per_s": 40.0, "median_ms": 25.0, "gui_cpu_ms": 20.0, "target_per_s": 40.0,
                 "met": True, "undo_steps": 1},
        "startup": {"error": "e"}, "models": rows, "seconds": 1.0})
    assert "Real models: File ▸ Open model… → model view painted" in report


def test_grid_layout_folds_tall_models_into_bands():
    from attnexplorer.models.views import grid_layout

    # SmolLM2 in a 1280×800 window's model view (about 1250 × 700 px): two bands of 15 layers
    # fit at 36 px or more; one band would scroll
    bands, cell = grid_layout(30, 9, 1250, 700, 40, 26, 4, 36, 120)
    assert bands == 2 and cell >= 36
    assert 15 * (cell + 4) + 26 + 4 <= 700 and 2 * (9 * (cell + 4) + 40) + 4 <= 1250
    # MiniLM's 6 × 12 fits in one band, with bigger thumbnails than any fold would give
    bands, cell = grid_layout(6, 12, 1250, 700, 40, 26, 4, 36, 120)
    assert bands == 1 and cell > 80
    # no room at all: the fold stays within the width and the rest scrolls at the smallest size
    bands, cell = grid_layout(30, 9, 500, 200, 40, 26, 4, 36, 120)
    assert (bands, cell) == (1, 36)
