"""JSON text by orjson (io/json_text.py): the values ``json`` writes and reads, every float to the
last bit, NaN refused as before; and the writers that use it make no Python object per number."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.io import json_text, session_file
from attnexplorer.io.json_text import array_json, parse_strict, rows_json, write_array
from attnexplorer.io.session_file import dumps_session, loads_session, session_to_dict

NUMBER = re.compile(r"-?[0-9][0-9.eE+-]*")
any_float = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _same(text: str, value) -> None:
    """``text`` holds ``value`` in ``json.dumps``'s layout but for how each number is spelt.
    Compared through ``json.dumps`` (``repr``), so floats match to the bit (-0.0 too) and
    1 stays apart from 1.0."""
    expected = json.dumps(value)
    assert json.dumps(json.loads(text)) == expected
    assert NUMBER.sub("#", text) == NUMBER.sub("#", expected)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=any_float))
def test_every_float64_reads_back_to_the_same_bits(a):
    _same(array_json(a), a.tolist())


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 12), elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
def test_float32_is_written_as_json_writes_its_python_floats(a):
    # tolist() widens float32 to Python floats; so must we, or 0.1f would read as 0.1.
    _same(array_json(a), a.tolist())


def test_the_hard_cases_of_float_text():
    values = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e-05, 1e16, 1e22, 0.1,
              1 / 3, 123456789012345678.0, -2.5e-7]
    _same(array_json(np.array(values)), values)


def test_integers_booleans_and_strings():
    _same(array_json(np.arange(-3, 4, dtype=np.int8).reshape(7, 1)), [[v] for v in range(-3, 4)])
    assert array_json(np.array([True, False])) == "[true, false]"
    assert array_json(np.array(2 ** 62, dtype=np.uint64)[None]) == f"[{2 ** 62}]"
    assert array_json(np.array(["a", "é"])) == '["a", "é"]'
    assert array_json(np.zeros((2, 0))) == "[[], []]"
    assert array_json(np.float64(0.5)) == "0.5"


def test_nan_and_infinity_are_refused_as_json_refuses_them():
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            array_json(np.array([1.0, bad]))
    assert array_json(np.array([[1.0, np.nan]]), allow_nan=True) == "[[1.0, null]]"
    with pytest.raises(ValueError):
        array_json(np.array([np.inf, np.nan]), allow_nan=True)


def test_rows_one_per_line():
    assert rows_json(np.array([[1.0, 2.0], [3.0, 4.5]]), "  ") == "[\n    [1.0, 2.0],\n    [3.0, 4.5]\n  ]"
    assert rows_json(np.zeros((0, 3)), "") == "[]"


@pytest.mark.parametrize("shape", [(5,), (4, 3), (3, 4, 5), (2, 9, 2), (7, 1)])
def test_pieces_join_to_the_whole(shape):
    a = np.arange(np.prod(shape), dtype=float).reshape(shape) / 7
    parts: list[str] = []
    write_array(a, parts.append, piece_numbers=4)
    assert "".join(parts) == array_json(a)
    assert len(parts) > 3 or a.ndim == 1  # it really went in pieces (a vector is one piece)


def _strict(text):
    def unique(pairs):
        if len({k for k, _ in pairs}) != len(pairs):
            raise KeyError("twice")
        return dict(pairs)

    return json.loads(text, parse_constant=lambda c: ("constant", c), object_pairs_hook=unique)


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 80), 2 ** 80) | any_float | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_parsing_gives_what_the_strict_parse_gives_types_included(value):
    text = json.dumps(value, ensure_ascii=False)
    got, expected = parse_strict(text, _strict), _strict(text)
    # json.dumps tells 1 from 1.0 and keeps key order: equal text is equal values and types.
    assert json.dumps(got) == json.dumps(expected)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True))
def test_any_number_text_parses_to_the_same_value(number):
    text = f"[{number}]"
    try:
        expected = _strict(text)
    except ValueError:
        return
    got = parse_strict(text, _strict)
    assert json.dumps(got) == json.dumps(expected)  # 1e400 reads as inf either way


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"a": 1, "b": {}, "a": 2}}', "[NaN]", "[1, 2",
                                  "[" * 3000 + "]" * 3000, '{"v": 123456789012345678901234567890}',
                                  "123456789012345678901234567890", '"\\ud800"', "[1e400]"])
def test_what_orjson_would_read_otherwise_goes_to_the_strict_parse(text):
    try:
        expected = ("value", json.dumps(_strict(text)))
    except (KeyError, ValueError, RecursionError) as err:
        expected = ("error", type(err))
    try:
        got = ("value", json.dumps(parse_strict(text, _strict)))
    except (KeyError, ValueError, RecursionError) as err:
        got = ("error", type(err))
    assert got == expected


def test_a_session_file_is_the_json_an_earlier_version_reads(tmp_path):
    session = build_preset("random", {"n": 64, "d": 32, "d_k": 8, "d_v": 8, "heads": 3}).session
    text = dumps_session(session)
    # Plain json (all an earlier version used) reads exactly the session's numbers.
    assert json.loads(text) == session_to_dict(session)
    assert loads_session(text) == session
    assert "\n    [" in text  # one matrix row per line, as before


def test_writing_a_session_makes_no_python_object_per_number(monkeypatch):
    """A structural guard: the writer hands whole arrays to orjson. Writing a matrix row by row
    through ``json.dumps`` (and ``tolist()``) took 3.7 s for one MiniLM layer."""
    session = build_preset("random", {"n": 512, "d": 64, "d_k": 16, "d_v": 16, "heads": 4}).session
    calls = []
    real = json.dumps
    monkeypatch.setattr(session_file.json, "dumps", lambda *a, **k: calls.append(1) or real(*a, **k))
    orjson_calls = []
    real_orjson = json_text.orjson.dumps
    monkeypatch.setattr(json_text.orjson, "dumps", lambda *a, **k: orjson_calls.append(1) or real_orjson(*a, **k))
    text = dumps_session(session)
    rows = session.n + 3 * session.heads * session.d
    assert len(calls) < 60, "json.dumps called per row or per number"
    assert len(orjson_calls) <= 20, "arrays not handed to orjson whole"
    assert text.count("\n") > rows  # still one row per line
