"""Bad values found by hostile testing (issue 11, items 6, 7, 9 and 13): each is refused with
an ``AttnExplorerError`` naming it, never a NaN, an OverflowError or a silent coercion."""

import json
import math

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import AttnExplorerError, EngineError
from attnexplorer.core.inputs.presets import build_preset, preset_ref
from attnexplorer.core.inputs.session import Mask, PresetRef, Scale, Session
from attnexplorer.io.session_file import dumps_session, load_session, loads_session, save_session, session_to_dict


def small(**changes):
    s = Session(tokens=("a", "b", "c"), embeddings=np.zeros((3, 2)), w_query=np.ones((1, 2, 2)),
                w_key=np.ones((1, 2, 2)), w_value=np.ones((1, 2, 2)))
    return s.replace(**changes) if changes else s


def file_text(**changes):
    obj = session_to_dict(small())
    obj.update(changes)
    return json.dumps(obj)


# -- item 6: a tiny temperature never makes NaN ---------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("tau", [1e-39, 1e-300, 1e-30])
def test_tiny_temperature_on_zero_scores_is_an_overflow_not_nan(dtype, tau):
    s = small(scale=Scale("temperature", tau))
    try:
        r = compute(s, dtype=dtype)
    except EngineError as err:
        assert "too large for " + dtype in str(err) and "float64" in str(err)
    else:
        assert np.isfinite(r.weights).all() and np.isfinite(r.output).all()


def test_tiny_temperature_in_float64_is_exact():
    r = compute(small(scale=Scale("temperature", 1e-300)), dtype="float64")
    assert np.allclose(r.weights, 1 / 3)


# -- item 7: preset parameters are checked where the file is read ----------------------------

BAD_PARAMS = [{"N": "abc"}, {"N": None}, {"N": [1]}, {"N": 1e308}, {"seed": 3000000000}, {"seed": 2**63},
              {"N": 2.5}, {"N": True}, {"tau": 0.0}, {"tau": 1e300}, {"nope": 1}, {"N": "64"}]


@pytest.mark.parametrize("params", BAD_PARAMS, ids=repr)
def test_bad_preset_parameters_are_refused_on_load(params):
    with pytest.raises(AttnExplorerError) as err:
        loads_session(file_text(preset={"name": "sine", "params": params}), "f.json")
    key = next(iter(params))
    assert str(err.value).startswith(f"f.json: preset.params.{key} ")
    assert "\n" not in str(err.value)


def test_huge_literal_preset_parameter_is_refused_on_load():
    text = file_text(preset={"name": "sine", "params": {}}).replace('"params": {}', '"params": {"N": 1e400}')
    with pytest.raises(AttnExplorerError, match="preset.params.N"):
        loads_session(text, "f.json")


def test_good_preset_parameters_load_as_checked_numbers():
    s = loads_session(file_text(preset={"name": "sine", "params": {"N": 64.0, "tau": 1, "seed": 2**31 - 1}}))
    assert s.preset.params == {"N": 64, "tau": 1.0, "seed": 2**31 - 1}
    assert type(s.preset.params["N"]) is int and type(s.preset.params["tau"]) is float
    # An unknown preset is kept as a label (nothing is built from it).
    s = loads_session(file_text(preset={"name": "mine", "params": {"x": [1, "y"]}}))
    assert s.preset == PresetRef("mine", {"x": [1, "y"]})


def test_a_preset_record_made_by_hand_is_checked_where_it_leaves():
    # PresetRef checks its shape only (core/inputs/session cannot import the presets that import it);
    # a known preset's parameters out of bounds are no preset's curves, and cannot be saved.
    from attnexplorer.core.inputs.presets import reference_curves

    s = small(preset=PresetRef("sine", {"N": 5}))
    assert s.preset.params == {"N": 5}
    assert dict(reference_curves(s)) == {}
    with pytest.raises(AttnExplorerError, match=r"^cannot save: preset\.params\.N: 5 is outside 8\.\.4096$"):
        dumps_session(s)
    assert preset_ref("sine", {"N": 64.0}).params == {"N": 64}


# -- item 9: the Python API raises only AttnExplorerError ------------------------------------

@pytest.mark.parametrize("make", [
    lambda: Mask("window", window=2**63),
    lambda: Mask("window", window=np.int64(2**62)),
    lambda: Mask("padding", padding=(2**70,)),
    lambda: Scale("temperature", 10**400),
    lambda: Scale("temperature", np.float64("nan")),
    lambda: build_preset("sine", {"N": math.nan}),
    lambda: build_preset("sine", {"N": math.inf}),
    lambda: build_preset("sine", {"tau": 10**400}),
    lambda: build_preset("sine", {"N": np.float32("nan")}),
    lambda: PresetRef(5, {}),
    lambda: PresetRef("", {}),
    lambda: PresetRef("sine", {1: 2}),
    lambda: PresetRef("sine", [("N", 8)]),
    lambda: preset_ref("sine", {"N": 5}),
    lambda: preset_ref("sine", {1: 2}),
    lambda: small(extra={1: "x"}),
    lambda: small(tokens=("a", "b\x00", "c")),
    lambda: small(tokens=("a", "\x1b[31m", "c")),
    lambda: small(tokens=("a", "b\nc", "c")),
    lambda: small(tokens=("a", "\x7f", "c")),
])
def test_bad_api_values_raise_attnexplorer_error(make):
    with pytest.raises(AttnExplorerError):
        make()


def test_window_mask_wider_than_the_text_computes(tmp_path):
    s = small(mask=Mask("window", window=8192))
    assert np.array_equal(compute(s).mask, Mask("causal").matrix(3))


def test_paths_with_nul_are_refused_plainly(tmp_path):
    with pytest.raises(AttnExplorerError, match="NUL"):
        load_session(str(tmp_path / "a\x00b.json"))
    with pytest.raises(AttnExplorerError, match="NUL"):
        save_session(small(), str(tmp_path / "a\x00b.json"))


def test_deep_extra_data_is_refused_on_save_not_a_recursion_error():
    deep = []
    for _ in range(500):
        deep = [deep]
    with pytest.raises(AttnExplorerError, match="nests deeper"):
        dumps_session(small(extra={"deep": deep}))
    with pytest.raises(AttnExplorerError, match="nests deeper"):
        dumps_session(small(preset=PresetRef("mine", {"deep": deep})))


def test_non_string_extra_keys_are_refused():
    with pytest.raises(AttnExplorerError, match="extra"):
        small(extra={("a",): 1})


@pytest.mark.parametrize("text", [
    '{"format": "attnexplorer-session", "format": "x", "version": 1}',
    '{"format": "attnexplorer-session", "version": 1, "tokens": ["a"], "tokens": ["b"]}',
])
def test_duplicate_json_keys_are_refused(text):
    with pytest.raises(AttnExplorerError, match="twice"):
        loads_session(text, "f.json")


def test_duplicate_keys_deep_inside_are_refused():
    text = file_text(view={"head": 0}).replace('"head": 0', '"head": 0, "head": 1')
    with pytest.raises(AttnExplorerError, match=r"f.json: .*'head' twice"):
        loads_session(text, "f.json")


# -- item 13: one rule for control characters in tokens ---------------------------------------

@pytest.mark.parametrize("token", ["a\x00", "\x01", "x\x1by", "tab\there", "\r", "\x7f", "\x85", "\x9f"])
def test_control_characters_in_tokens_are_refused_everywhere(token):
    with pytest.raises(AttnExplorerError, match=r"tokens\[1\].*control character"):
        small(tokens=("a", token, "c"))
    text = file_text(tokens=["a", token, "c"])
    with pytest.raises(AttnExplorerError, match=r"f.json: tokens\[1\] .*control character"):
        loads_session(text, "f.json")


def test_other_unusual_characters_in_tokens_are_kept():
    tokens = ("ü→", "\u200b", "日本", "=SUM(A1)", " ", "")
    s = Session(tokens=tokens, embeddings=np.zeros((6, 1)), w_query=np.ones((1, 1, 1)),
                w_key=np.ones((1, 1, 1)), w_value=np.ones((1, 1, 1)))
    assert loads_session(dumps_session(s)).tokens == tokens


# -- item 15: CSV cells a spreadsheet would run are written as text ---------------------------

def test_formula_like_labels_are_written_as_text_and_numbers_stay_numbers():
    import csv
    import io

    from attnexplorer.io.matrices import matrix_to_csv

    labels = ["=SUM(A1)", "+1", "-2", "@x", "\tt", "\rr", "plain", "a=b"]
    a = -np.arange(16.0).reshape(8, 2)
    text = matrix_to_csv(a, labels, ["=c", "d"])
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == ["", "'=c", "d"]
    assert [r[0] for r in rows[1:]] == ["'=SUM(A1)", "'+1", "'-2", "'@x", "'\tt", "'\rr", "plain", "a=b"]
    assert rows[2][1:] == ["-2.0", "-3.0"]  # negative numbers stay numbers


def test_csv_never_raises_on_control_characters_in_labels():
    # Python 3.10's csv writer raises "need to escape" for NUL; such labels are shown as ␀.
    from attnexplorer.io.matrices import matrix_to_csv

    text = matrix_to_csv(np.zeros((2, 1)), ["a\x00", "\x01\x1b"], ["\x00"])
    assert "\x00" not in text and "\x01" not in text
    assert text.splitlines()[1].startswith("a\u2400,")
