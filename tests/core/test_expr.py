"""Cell arithmetic: what a person may type, and what is refused with a reason."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.numbers.expr import format_compact, format_full, parse_number


@pytest.mark.parametrize("text, value", [
    ("0.5", 0.5),
    ("  -1/3 ", -1 / 3),
    ("1e-3", 1e-3),
    ("2*pi", 2 * math.pi),
    ("sqrt(2)", math.sqrt(2)),
    ("(1 + 2) * 3", 9.0),
    ("2**-1", 0.5),
    ("2^3", 8.0),
    ("−4 × 2 ÷ 8", -1.0),
    ("exp(log(3))", 3.0),
    ("e", math.e),
    ("-(-(2))", 2.0),
    ("7", 7.0),
    (".25", 0.25),
    ("-" * 150 + "1", 1.0),
])
def test_accepts_numbers_and_simple_arithmetic(text, value):
    assert parse_number(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("   ", "empty"),
    ("abc", "unknown name"),
    ("nan", "not a finite"),
    ("inf", "not a finite"),
    ("-inf", "not a finite"),
    ("1e400", "not a finite"),
    ("10**400", "too large"),
    ("1e200 * 1e200", "too large"),
    ("9" * 199 + "." + "9" * 150 + "**2", "longer than"),
    ("2**2**2**2**2", "too large"),
    ("exp(1000)", "too large"),
    ("1/0", "division by zero"),
    ("sqrt(-1)", "math error"),
    ("__import__('os')", "unknown function"),
    ("(1).real", "use numbers"),
    ("[1, 2]", "use numbers"),
    ("'3'", "not a number"),
    ("True", "not a number"),
    ("1 if 1 else 2", "use numbers"),
    ("sqrt(2, 3)", "exactly one argument"),
    ("1 +", "use numbers"),
    ("3j", "not a number"),
    ("x" * 300, "longer than"),
])
def test_refuses_with_a_reason(text, why):
    with pytest.raises(AttnExplorerError, match=why):
        parse_number(text)


def test_never_evaluates_code(monkeypatch):
    # If anything reached eval, this would raise a different error.
    import builtins

    monkeypatch.setattr(builtins, "eval", lambda *a, **k: (_ for _ in ()).throw(AssertionError("eval used")))
    assert parse_number("1+1") == 2.0


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_full_format_round_trips(value):
    assert parse_number(format_full(value)) == value


def test_compact_format_is_short_and_has_no_negative_zero():
    assert format_compact(1 / 3) == "0.3333"
    assert format_compact(-0.0) == "0"
    assert format_compact(123456.0) == "1.235e+05"
