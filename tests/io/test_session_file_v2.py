"""Session files version 2: the stages of a real head round-trip, version 1 still loads as it
always did, and every new problem is named at its place."""

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import stage_sessions

from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source
from attnexplorer.io.session_file import dumps_session, loads_session, session_from_dict, session_to_dict


def v2_dict():
    """3 tokens, d = 4, 4 query heads sharing 2 K/V heads (d_k = 4, d_v = 2), every stage set."""
    return {
        "format": "attnexplorer-session", "version": 2,
        "tokens": ["a", "b", "c"],
        "embeddings": [[1, 2, 3, 4], [0.5, -1, 0, 2], [3, 1, 4, 1]],
        "positions": {"kind": "rope", "theta": 10000, "dims": 4, "layout": "half", "offset": 0},
        "norm": {"kind": "layer", "weight": [1, 1, 2, 1], "bias": [0, 0, 0, 0.5], "eps": 1e-5},
        "heads": [{"W_q": [[1, 0, 0, 0]] * 4, "b_q": [0, 0, 1, 0]} for _ in range(4)],
        "kv_heads": [{"W_k": [[0, 1, 0, 0]] * 4, "b_k": [1, 0, 0, 0], "W_v": [[1, 2]] * 4, "b_v": [0, 1]}
                     for _ in range(2)],
        "source": None,
        "W_o": [[1, 0]] * 8, "b_o": [0.5, -0.5],
        "mask": "causal", "scale": "inv_sqrt_dk", "preset": None,
    }


def cross_dict():
    return {
        "format": "attnexplorer-session", "version": 2,
        "tokens": ["le", "chat"], "embeddings": [[1, 0], [0, 1]],
        "source": {"tokens": ["the", "black", "cat"], "embeddings": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]},
        "heads": [{"W_q": [[1, 0], [0, 1]], "W_k": [[1, 0], [0, 1], [1, 1]], "b_k": [0, 1],
                   "W_v": [[1], [2], [3]]}],
        "mask": {"padding": [2]},
    }


def load(d):
    return session_from_dict(d, "session.json")


def refused(d) -> str:
    with pytest.raises(SessionError) as info:
        load(d)
    return str(info.value).removeprefix("session.json: ")


def test_a_full_v2_file_builds_the_documented_session():
    s = load(v2_dict())
    assert s.heads == 4 and s.kv_heads == 2 and s.kv_head_of.tolist() == [0, 0, 1, 1]
    assert s.b_query.shape == (4, 4) and s.b_key.tolist() == [[1, 0, 0, 0]] * 2 and s.b_value.shape == (2, 2)
    assert s.b_out.tolist() == [0.5, -0.5]
    assert s.norm == Norm("layer", [1, 1, 2, 1], [0, 0, 0, 0.5], 1e-5)
    assert s.positions == Positions("rope", theta=10000, dims=4, layout="half", offset=0)
    c = load(cross_dict())
    assert c.source == Source(("the", "black", "cat"), np.eye(3)) and c.n_keys == 3
    assert c.key_tokens == ("the", "black", "cat") and c.mask.matrix(2, 3)[:, 2].all()


def test_grouped_query_heads_are_written_under_kv_heads_and_read_back():
    s = load(v2_dict())
    d = session_to_dict(s)
    assert d["version"] == 2
    assert list(d["heads"][0]) == ["W_q", "b_q"] and len(d["kv_heads"]) == 2
    assert d["kv_heads"][1] == {"W_k": [[0.0, 1.0, 0.0, 0.0]] * 4, "b_k": [1.0, 0.0, 0.0, 0.0],
                                "W_v": [[1.0, 2.0]] * 4, "b_v": [0.0, 1.0]}
    assert loads_session(dumps_session(s)) == s


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stage_sessions())
def test_every_stage_combination_round_trips_exactly(session):
    text = dumps_session(session)
    back = loads_session(text, "s.json")
    assert back == session
    assert dumps_session(back) == text
    json.loads(text)  # plain JSON


def test_a_v1_file_loads_unchanged_and_v2_names_in_it_stay_extras():
    v1 = {"format": "attnexplorer-session", "version": 1, "tokens": ["a"], "embeddings": [[1.0, 2.0]],
          "heads": [{"W_q": [[1.0], [0.0]], "W_k": [[1.0], [0.0]], "W_v": [[0.0], [1.0]]}],
          # Version 1 did not know these names: they were (and stay) the writer's own keys.
          "positions": "my notes", "norm": [1, 2]}
    s = load(v1)
    assert s.positions is None and s.norm is None and s.extra == {"positions": "my notes", "norm": [1, 2]}
    # A bias in a version-1 head was never allowed, and still is not.
    bad = copy.deepcopy(v1)
    bad["heads"][0]["b_q"] = [1.0]
    assert "unknown key 'b_q'" in refused(bad)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["heads"][2].update(b_q=[1, 2, 3]), "heads[2].b_q has 3 numbers, expected d_k = 4"),
    (lambda d: d["kv_heads"][1].update(b_k=[1, 2, 3]), "kv_heads[1].b_k has 3 numbers, expected d_k = 4"),
    (lambda d: d["kv_heads"][0].update(b_v=[1, "x"]), "kv_heads[0].b_v[1] is 'x', expected a number"),
    (lambda d: d.update(kv_heads=d["kv_heads"] + d["kv_heads"][:1]), "kv_heads: 3 does not divide 4 query heads"),
    (lambda d: d["heads"][0].update(W_k=[[1, 0, 0, 0]] * 4), "heads[0] has 'W_k', but kv_heads gives the keys and values"),
    (lambda d: d.update(positions={"kind": "rope", "dims": 6}), "positions.dims 6 must be even and at most d_k = 4"),
    (lambda d: d.update(positions={"kind": "rope", "dims": 5}), "positions.dims 5 must be even and at most d_k = 4"),
    (lambda d: d.update(positions={"kind": "rope", "layout": "zigzag"}), "positions.layout is 'zigzag', expected \"half\" or \"interleaved\""),
    (lambda d: d.update(positions={"kind": "rope", "offset": -1}), "positions.offset is -1, expected 0..1000000"),
    (lambda d: d.update(positions={"kind": "alibi", "slopes": [1, 2]}), "positions.slopes has 2 numbers, expected one per head (4)"),
    (lambda d: d.update(positions={"kind": "learned", "table": [[0] * 4] * 2}), "positions.table has 2 rows, fewer than the 3 tokens"),
    (lambda d: d.update(positions={"kind": "learned", "table": [[0] * 3] * 3}), "positions.table has 3 columns, expected d = 4 (the embedding width)"),
    (lambda d: d.update(positions={"kind": "sinusoidal", "base": 0}), "positions.base is 0.0, expected a number > 0"),
    (lambda d: d.update(positions={"kind": "spiral"}), "positions.kind is 'spiral', expected null or an object with \"kind\": \"sinusoidal\", \"learned\", \"rope\" or \"alibi\""),
    (lambda d: d.update(positions={"kind": "alibi", "theta": 3}), "positions has an unknown key 'theta' (expected \"kind\", \"slopes\")"),
    (lambda d: d.update(norm={"kind": "rms", "weight": [1, 1, 1], "eps": 1e-6}), "norm.weight has 3 numbers, expected d = 4"),
    (lambda d: d.update(norm={"kind": "rms", "bias": [0, 0, 0, 0]}), "norm.bias is given, but RMSNorm has no bias"),
    (lambda d: d.update(norm={"kind": "layer", "eps": 0}), "norm.eps is 0.0, expected a number > 0"),
    (lambda d: d.update(norm={"kind": "batch"}), "norm.kind is 'batch', expected \"layer\" or \"rms\""),
    (lambda d: d.update(b_o=[1, 2, 3]), "b_o has 3 numbers, expected d_out = 2"),
    (lambda d: d.update(W_o=None), "b_o is given, but there is no W_o for it to follow"),
])
def test_each_v2_problem_is_named_exactly(edit, message):
    d = v2_dict()
    edit(d)
    assert refused(d) == message


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(mask="causal"), "mask causal needs one sequence (query i sees keys up to i), but with a source "
                                        "the keys are another sequence; use none, padding or a custom mask"),
    (lambda d: d.update(mask={"window": 2}), "mask window needs one sequence"),
    (lambda d: d.update(mask={"padding": [3]}), "mask.padding[0] is 3, expected 0..2"),
    (lambda d: d.update(mask={"blocked": [[0, 0], [0, 0]]}), "mask.blocked has 2 columns, expected 3 (one column per source token)"),
    (lambda d: d.update(positions={"kind": "rope"}), "positions rope encodes the distance between a query and a key in one "
                                                     "sequence, but with a source the keys are another sequence"),
    (lambda d: d.update(positions={"kind": "alibi"}), "positions alibi encodes the distance"),
    (lambda d: d["heads"][0].update(W_k=[[1, 0]] * 2), "heads[0].W_k has 2 rows, expected 3 (the source embedding width)"),
    (lambda d: d["source"].update(embeddings=[[1, 0, 0]] * 2), "source.embeddings has 2 rows, expected 3 (one per source token)"),
    (lambda d: d["source"].update(tokens=[]), "source.tokens has 0 tokens, expected 1..16384"),
    (lambda d: d.update(source={"tokens": ["x"]}), "source has no \"embeddings\""),
])
def test_cross_attention_refusals_say_why(edit, message):
    d = cross_dict()
    edit(d)
    assert refused(d).startswith(message)


def test_a_custom_cross_mask_is_rectangular_and_round_trips():
    d = cross_dict()
    d["mask"] = {"blocked": [[0, 1, 0], [1, 0, 0]]}
    s = load(d)
    assert s.mask.matrix(2, 3).tolist() == [[False, True, False], [True, False, False]]
    assert loads_session(dumps_session(s)) == s


def test_session_checks_the_same_things_when_built_in_python():
    s = load(v2_dict())
    with pytest.raises(SessionError, match=r"^kv_heads: 3 does not divide 4 query heads$"):
        s.replace(w_key=np.zeros((3, 4, 4)), w_value=np.zeros((3, 4, 2)), b_key=None, b_value=None)
    with pytest.raises(SessionError, match=r"^positions.dims: 6 must be even and at most d_k = 4$"):
        s.replace(positions=Positions("rope", dims=6))
    with pytest.raises(SessionError, match=r"^b_k: has 3 numbers per head, expected d_k = 4$"):
        s.replace(b_key=np.zeros((2, 3)))
    with pytest.raises(SessionError, match=r"^mask.blocked: blocked is 2×3, expected 3×3"):
        s.replace(mask=Mask("custom", blocked=np.zeros((2, 3))))
    with pytest.raises(SessionError, match=r"^positions: rope needs an even d_k|^positions.dims: RoPE rotates pairs"):
        Session(("a",), np.ones((1, 3)), np.ones((1, 3, 3)), np.ones((1, 3, 3)), np.ones((1, 3, 1)),
                positions=Positions("rope"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False, allow_infinity=False) |
    st.sampled_from(["rope", "alibi", "layer", "rms", "half", "interleaved", "learned", "sinusoidal"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["kind", "dims", "slopes", "table", "weight", "bias", "eps", "tokens", "embeddings", "W_k",
                         "b_k", "W_v", "b_v", "offset", "layout", "theta", "base"]), inner, max_size=4),
    max_leaves=10)


@st.composite
def mutated_v2(draw):
    d = draw(st.sampled_from([v2_dict, cross_dict]))()
    for _ in range(draw(st.integers(1, 3))):
        target, key = d, draw(st.sampled_from(sorted(d)))
        while key in target and isinstance(target[key], (dict, list)) and target[key] and draw(st.booleans()):
            target = target[key]
            key = draw(st.sampled_from(sorted(target))) if isinstance(target, dict) else \
                draw(st.integers(0, len(target) - 1))
        action = draw(st.sampled_from(["replace", "delete", "number"]))
        if action == "delete" and isinstance(target, dict):
            target.pop(key, None)
        elif action == "number":
            target[key] = draw(st.sampled_from([0, -1, 1e308, 2 ** 63, True, 0.5, 3, 5, 70000]))
        else:
            target[key] = draw(json_values)
    return d


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_v2())
def test_fuzz_mutated_v2_files_raise_only_session_error(d):
    try:
        s = loads_session(json.dumps(d), "f.json")
    except SessionError as err:
        assert str(err).startswith("f.json: ") and "\n" not in str(err)
    else:
        assert loads_session(dumps_session(s)) == s


def test_a_kind_that_is_not_a_string_is_refused_in_one_line(tmp_path):
    # Found by the fuzz above: {"kind": []} reached a dict lookup and raised TypeError.
    from attnexplorer.core.errors import SessionError
    from attnexplorer.io.session_file import session_from_dict

    for kind in ([], {}, 3, None):
        d = {"format": "attnexplorer-session", "version": 2, "tokens": ["a", "b"],
             "embeddings": [[1.0, 0.0], [0.0, 1.0]],
             "heads": [{"W_q": [[1, 0], [0, 1]], "W_k": [[1, 0], [0, 1]], "W_v": [[1, 0], [0, 1]]}],
             "positions": {"kind": kind}}
        with pytest.raises(SessionError) as err:
            session_from_dict(d, "f.json")
        assert "positions" in str(err.value) and "\n" not in str(err.value)


def _as_arrays(value):
    """The dict with every list of numbers as a float32 numpy array, as a real model's layer is built."""
    if isinstance(value, dict):
        return {k: _as_arrays(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        return np.asarray(value, dtype=np.float32)
    if isinstance(value, list) and value and all(isinstance(r, list) for r in value):
        return np.asarray(value, dtype=np.float32)
    if isinstance(value, list):
        return [_as_arrays(v) for v in value]
    return value


def test_numpy_arrays_in_the_dict_build_the_same_session_as_lists():
    from_lists = session_from_dict(v2_dict())
    built = _as_arrays(v2_dict())
    assert isinstance(built["embeddings"], np.ndarray) and isinstance(built["heads"][0]["b_q"], np.ndarray)
    from_arrays = session_from_dict(built)
    assert session_to_dict(from_arrays) == session_to_dict(from_lists)
    # the session owns its numbers: changing the caller's array afterwards changes nothing
    built["embeddings"][0, 0] = 99.0
    assert from_arrays.embeddings[0, 0] == 1.0


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["embeddings"].__setitem__((1, 2), np.nan), "embeddings[1][2] is nan; every number must be finite"),
    (lambda d: d.__setitem__("embeddings", d["embeddings"][:2]), "embeddings has 2 rows, expected 3 (one per token)"),
    (lambda d: d["heads"][1].__setitem__("W_q", d["heads"][1]["W_q"][:, :3]),
     "heads[1].W_q has 3 columns, expected 4"),
    (lambda d: d["norm"].__setitem__("weight", d["norm"]["weight"][:3]), "norm.weight has 3 numbers, expected d = 4"),
    (lambda d: d["norm"]["bias"].__setitem__(1, np.inf), "norm.bias[1] is inf; every number must be finite"),
])
def test_numpy_arrays_are_checked_by_the_same_rules(edit, message):
    d = _as_arrays(v2_dict())
    edit(d)
    with pytest.raises(SessionError) as err:
        session_from_dict(d)
    assert message in str(err.value)
