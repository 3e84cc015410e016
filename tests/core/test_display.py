"""Number formats and tick-label placement: the arithmetic the panels draw, without Qt."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnexplorer.core.numbers import display


def test_numbers_always_have_a_leading_zero():
    for widths in ([4], [5], [6], [8, 6, 4]):
        found = display.cell_texts(np.array([0.0434, -0.247, 0.13, 0.1772]), widths)
        if found is None:
            continue
        texts, _ = found
        assert not any(t.startswith(".") or t.startswith("-.") for t in texts), texts


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=12),
       st.lists(st.integers(2, 9), min_size=1, max_size=4))
def test_auto_texts_fit_and_share_one_style(values, widths):
    widths = sorted(widths, reverse=True)
    found = display.cell_texts(np.array(values), widths)
    if found is None:
        return
    texts, index = found
    assert max(len(t) for t in texts) <= widths[index]
    assert not any(t.startswith((".", "-.")) for t in texts)
    decimals = {len(t.split(".")[1]) if "." in t else 0 for t in texts}
    fixed = all("." in t for t in texts) and len(decimals) == 1
    small = 0 < max(abs(v) for v in values) < display.SMALL_BLOCK
    # significant digits need an exponent only in a block of small numbers ("5.13e-5"), and
    # then every nonzero number has one
    assert fixed or all("e" not in t for t in texts) or (small and all("e" in t for t in texts if t != "0"))


@pytest.mark.parametrize("fmt, expected", [
    ("fixed4", ["3.4707", "0.6870", "-0.6004", "0.0386", "0.0000"]),
    ("fixed3", ["3.471", "0.687", "-0.600", "0.039", "0.000"]),
    ("fixed2", ["3.47", "0.69", "-0.60", "0.04", "0.00"]),
])
def test_fixed_decimals_are_exactly_that(fmt, expected):
    values = np.array([3.4707, 0.6870, -0.6004, 0.0386, -1e-9])
    texts, index = display.cell_texts(values, [12, 7, 5], fmt)
    assert texts == expected
    assert index == next(k for k, w in enumerate([12, 7, 5]) if max(map(len, expected)) <= w)
    assert display.cell_texts(values, [3], fmt) is None  # too narrow: nothing, never another format


def test_blocked_cells_get_no_text_and_unknown_formats_are_refused():
    texts, _ = display.cell_texts(np.array([0.5, np.nan]), [6], "fixed2")
    assert texts == ["0.50", None]
    with pytest.raises(ValueError, match="unknown number format"):
        display.cell_texts(np.array([1.0]), [6], "fixed9")


def test_format_number():
    assert display.format_number(0.883121, "auto", 3) == "0.883"
    assert display.format_number(3.47071, "fixed4") == "3.4707"
    assert display.format_number(-0.00001, "fixed2") == "0.00"
    assert display.format_number(float("nan")) == "—"
    assert display.format_number(1.5e-7) == "1.5e-7"


# -- tick labels ----------------------------------------------------------------------------------
def test_every_label_up_to_32_tokens_however_narrow():
    for n in (5, 9, 20, 32):
        for pixels in (6.0, 12.0, 30.0, 80.0):
            for bottom in (True, False):
                plan = display.label_plan(n, pixels, widest_px=45.0, along_bottom=bottom)
                assert plan.step == 1
                assert display.MIN_LABEL_FONT_PX <= plan.font_px <= display.LABEL_FONT_PX
                assert display.label_indices(0, n - 1, plan.step) == list(range(n))


def test_bottom_labels_turn_upright_only_when_they_do_not_fit_side_by_side():
    wide = display.label_plan(9, 60.0, widest_px=45.0, along_bottom=True)
    assert wide == display.LabelPlan(1, display.LABEL_FONT_PX, False)
    narrow = display.label_plan(9, 35.0, widest_px=45.0, along_bottom=True)
    assert narrow.rotated and narrow.step == 1 and narrow.font_px == display.LABEL_FONT_PX
    tight = display.label_plan(30, 9.5, widest_px=45.0, along_bottom=True)
    assert tight.rotated and tight.font_px == display.MIN_LABEL_FONT_PX
    left = display.label_plan(9, 35.0, widest_px=45.0, along_bottom=False)
    assert not left.rotated and left.step == 1


def test_beyond_32_labels_are_evenly_spaced_and_keep_the_selection():
    plan = display.label_plan(2129, 0.3, widest_px=30.0, along_bottom=True)
    assert plan.step > 1
    shown = display.label_indices(0, 2128, plan.step, always=(1001, 7))
    assert 1001 in shown and 7 in shown
    gaps = np.diff(shown)
    assert gaps.min() >= 1
    regular = [i for i in shown if i not in (1001, 7)]
    assert all(i % plan.step == 0 for i in regular)
    assert all(abs(i - a) >= plan.step for i in regular for a in (1001, 7))  # nothing overlaps them
    # the same labels while the view pans
    assert [i for i in display.label_indices(3, 40, 4) if i >= 8] == [i for i in display.label_indices(8, 40, 4)]
    assert display.label_indices(5, 4, 2) == []
    assert display.label_indices(0, 10, 3, always=(None, 99)) == [0, 3, 6, 9]


def test_a_block_of_small_numbers_shows_significant_digits_not_zeros():
    # A long sentence's weights (about 5e-5) read "0.000" in every zoomed cell.
    import numpy as np

    from attnexplorer.core.numbers.display import cell_texts

    values = np.array([5.13e-5, 4.87e-5, 1.2e-4, 0.0, 3.3e-5])
    for width in (8, 6, 4):
        texts, _ = cell_texts(values, [width])
        assert all(len(t) <= width for t in texts)
        assert texts[3] == "0"
        for value, text in zip(values, texts):
            if value:
                assert text != "0.000" and float(text) != 0
                assert abs(float(text) - value) <= 0.5 * value  # one significant digit at worst
                assert ("e" in text) == ("e" in texts[0])  # one style for the block
    texts, _ = cell_texts(values, [8])
    assert texts[:2] == ["5.13e-5", "4.87e-5"]
    # next to a large number a tiny one still reads as zero, in the block's decimals
    assert cell_texts(np.array([0.883, 4.4e-7]), [8])[0] == ["0.883", "0.000"]


def test_one_row_is_one_row():
    # "has 1 rows" read wrong in the window's refusals and the undo history.
    import numpy as np

    from attnexplorer.core.errors import SessionError
    from attnexplorer.core.inputs.presets import build_preset

    assert display.counted(1, "row") == "1 row" and display.counted(0, "row") == "0 rows"
    session = build_preset("pronoun").session
    with pytest.raises(SessionError) as refused:
        session.replace(embeddings=np.zeros((1, session.d)))
    assert "has 1 row, expected 9" in str(refused.value)
