"""Session files: round trips, every validation message, hostile files, and a loader fuzz."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from strategies import sessions, small_session

from attnexplorer.core.errors import AttnExplorerError, SessionError
from attnexplorer.core.inputs.session import MAX_HEADS, MAX_TOKEN_CHARS, MAX_TOKENS, Mask, PresetRef, Scale
from attnexplorer.io import session_file as sf
from attnexplorer.io.atomic import WriteError
from attnexplorer.io.session_file import (
    FORMAT, VERSION, dumps_session, load_session, loads_session, save_session, session_from_dict, session_to_dict,
)


def valid_dict():
    """A 3-token, d=4, two-head session file as a dict (d_k = 2, d_v = 3)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "tokens": ["a", "b", "c"],
        "embeddings": [[1, 2, 3, 4], [0.5, -1, 0, 2], [3, 1, 4, 1]],
        "heads": [
            {"W_q": [[1, 0]] * 4, "W_k": [[0, 1]] * 4, "W_v": [[1, 2, 3]] * 4},
            {"W_q": [[0.5, 0]] * 4, "W_k": [[0, 0.5]] * 4, "W_v": [[3, 2, 1]] * 4},
        ],
        "W_o": None,
        "mask": "causal",
        "scale": {"temperature": 0.5},
        "preset": {"name": "random", "params": {"n": 3}},
    }


# -- round trips ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_text_round_trip_is_exact(session):
    text = dumps_session(session)
    back = loads_session(text, "s.json")
    assert back == session
    assert back.extra == session.extra
    assert back.mask == session.mask and back.scale == session.scale and back.preset == session.preset
    # Saving what was loaded gives the same text: nothing drifts on repeated saves.
    assert dumps_session(back) == text


@settings(max_examples=15, deadline=None)
@given(sessions())
def test_file_round_trip(tmp_path_factory, session):
    path = tmp_path_factory.mktemp("rt") / "session.json"
    save_session(session, path)
    assert load_session(path) == session
    assert load_session(str(path)).extra == session.extra


def test_dict_format_is_the_documented_one():
    s = small_session(mask=Mask("window", window=2), w_out=True).replace(
        scale=Scale("temperature", 0.25), preset=PresetRef("sine", {"tau": 0.25}), extra={"view": {"head": 1}})
    d = session_to_dict(s)
    assert list(d)[:9] == ["format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset"]
    assert d["format"] == "attnexplorer-session" and d["version"] == 2
    assert d["heads"][1]["W_k"] == s.w_key[1].tolist()  # x @ W orientation: d rows, d_k columns
    assert len(d["heads"][0]["W_q"]) == s.d and len(d["heads"][0]["W_q"][0]) == s.d_k
    assert d["W_o"] == s.w_out.tolist()
    assert d["mask"] == {"window": 2}
    assert d["scale"] == {"temperature": 0.25}
    assert d["preset"] == {"name": "sine", "params": {"tau": 0.25}}
    assert d["view"] == {"head": 1}
    json.dumps(d, allow_nan=False)  # plain JSON, nothing numpy left in it


@pytest.mark.parametrize("mask, written", [
    (Mask("none"), "none"), (Mask("causal"), "causal"), (Mask("window", window=3), {"window": 3}),
    (Mask("padding", padding=(4, 1)), {"padding": [1, 4]}),
    (Mask("custom", blocked=np.eye(5, dtype=bool)), {"blocked": np.eye(5, dtype=int).tolist()}),
])
def test_every_mask_kind_is_written_as_documented(mask, written):
    s = small_session(mask=mask)
    assert session_to_dict(s)["mask"] == written
    assert loads_session(dumps_session(s)).mask == mask


def test_optional_keys_default_and_unknown_keys_are_kept():
    d = valid_dict()
    for key in ("W_o", "mask", "scale", "preset"):
        del d[key]
    d["view_state"] = {"selected": [0, 1], "zoom": 1.5}
    s = session_from_dict(d, "mine.json")
    assert s.mask == Mask("none") and s.scale == Scale("inv_sqrt_dk") and s.preset is None and s.w_out is None
    assert s.extra == {"view_state": {"selected": [0, 1], "zoom": 1.5}}
    assert json.loads(dumps_session(s))["view_state"] == {"selected": [0, 1], "zoom": 1.5}


def test_extra_cannot_override_known_keys():
    s = small_session().replace(extra={"tokens": ["evil"], "note": "kept"})
    d = json.loads(dumps_session(s))
    assert d["tokens"] == list(s.tokens) and d["note"] == "kept"


def test_numbers_read_back_bit_for_bit():
    values = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -2.5e-12]
    s = small_session(tokens=("a",)).replace(embeddings=np.array([values]),
                                             w_query=np.ones((1, 5, 1)), w_key=np.ones((1, 5, 1)),
                                             w_value=np.ones((1, 5, 1)))
    back = loads_session(dumps_session(s))
    assert back.embeddings.tobytes() == np.array([values]).tobytes()


# -- validation: exact messages and where-paths --------------------------------------------

def mutate(path, value, base=None):
    """A valid file (``base``, by default ``valid_dict()``) with the value at ``path`` set to
    ``value`` (``DELETE``: removed)."""
    d = valid_dict() if base is None else base
    target = d
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


DELETE = object()

CASES = [
    (("heads", 1, "W_k"), [[0, 1]] * 3, "heads[1].W_k", "heads[1].W_k has 3 rows, expected 4 (the embedding width)"),
    (("heads", 1, "W_q"), [[1, 2, 3]] * 4, "heads[1].W_q", "heads[1].W_q has 3 columns, expected 2 (d_k, as in heads[0].W_q)"),
    (("heads", 0, "W_k"), [[1, 2, 3]] * 4, "heads[0].W_k", "heads[0].W_k has 3 columns, expected 2 (W_q and W_k share d_k)"),
    (("heads", 1, "W_v"), [[1]] * 4, "heads[1].W_v", "heads[1].W_v has 1 column, expected 3 (d_v, as in heads[0].W_v)"),
    (("heads", 0, "W_v"), DELETE, "heads[0]", 'heads[0] has no "W_v"'),
    (("heads", 0, "W_x"), [[1]], "heads[0]", "heads[0] has an unknown key 'W_x' (expected \"W_q\", \"W_k\" and \"W_v\", and optionally \"b_q\", \"b_k\" and \"b_v\")"),
    (("heads", 1), [1, 2], "heads[1]", 'heads[1] is a list, expected an object with "W_q", "W_k" and "W_v"'),
    (("heads",), [], "heads", "heads has 0 heads, expected 1..64"),
    (("heads",), "many", "heads", "heads is 'many', expected a list of {\"W_q\", \"W_k\", \"W_v\"} objects"),
    (("embeddings",), [[1, 2, 3, 4]] * 2, "embeddings", "embeddings has 2 rows, expected 3 (one per token)"),
    (("embeddings", 2), [1, 2, 3], "embeddings[2]", "embeddings[2] has 3 numbers, expected 4 (like row 0)"),
    (("embeddings", 1), 7, "embeddings[1]", "embeddings[1] is 7, expected a list of numbers"),
    (("embeddings", 1, 2), "1.5", "embeddings[1][2]", "embeddings[1][2] is '1.5', expected a number"),
    (("embeddings", 1, 2), True, "embeddings[1][2]", "embeddings[1][2] is true, expected a number"),
    (("embeddings", 1, 2), None, "embeddings[1][2]", "embeddings[1][2] is null, expected a number"),
    (("embeddings", 1, 2), [1.0], "embeddings[1][2]", "embeddings[1][2] is a list, expected a number"),
    (("embeddings", 0, 0), 10 ** 400, "embeddings[0][0]", "embeddings[0][0] is too large; every number must be finite"),
    (("embeddings",), {"a": 1}, "embeddings", "embeddings is an object, expected a list of rows"),
    (("tokens",), "abc", "tokens", "tokens is 'abc', expected a list of strings"),
    (("tokens",), [], "tokens", f"tokens has 0 tokens, expected 1..{MAX_TOKENS}"),
    (("tokens", 1), 5, "tokens[1]", "tokens[1] is 5, expected a string"),
    (("tokens", 2), "x" * (MAX_TOKEN_CHARS + 1), "tokens[2]", f"tokens[2] is longer than {MAX_TOKEN_CHARS} characters"),
    (("tokens", 0), "\ud800", "tokens[0]", "tokens[0] holds an unpaired surrogate character, which is not text"),
    (("W_o",), [[1, 2]] * 5, "W_o", "W_o has 5 rows, expected 6 (heads × d_v)"),
    (("W_o",), [[1] * 1025] * 6, "W_o", "W_o has 1025 columns, expected 1..1024"),
    (("mask",), "diagonal", "mask", 'mask is \'diagonal\', expected "none", "causal" or an object with "window", "padding" or "blocked"'),
    (("mask",), {"window": 2, "padding": [1]}, "mask", "mask is an object with keys ['padding', 'window'], expected "
     '"none", "causal", {"window": w}, {"padding": [j, ...]} or {"blocked": [[0 or 1, ...], ...]}'),
    (("mask",), {"window": 0}, "mask.window", f"mask.window is 0, expected 1..{MAX_TOKENS}"),
    (("mask",), {"window": 2.5}, "mask.window", "mask.window is 2.5, expected a whole number"),
    (("mask",), {"window": True}, "mask.window", "mask.window is true, expected a whole number"),
    (("mask",), {"padding": [0, 3]}, "mask.padding[1]", "mask.padding[1] is 3, expected 0..2"),
    (("mask",), {"padding": 1}, "mask.padding", "mask.padding is 1, expected a list of token positions"),
    (("mask",), {"blocked": [[0, 1], [0, 0]]}, "mask.blocked", "mask.blocked has 2 rows, expected 3 (one row per token)"),
    (("mask",), {"blocked": [[0, 1, 1], [0, 0, 1], [0, 2, 0]]}, "mask.blocked[2][1]", "mask.blocked[2][1] is 2, expected 0 or 1"),
    (("mask",), {"blocked": [[0, 1, 1], [0, 0], [0, 0, 0]]}, "mask.blocked[1]", "mask.blocked[1] has 2 numbers, expected 3 (like row 0)"),
    (("scale",), "sqrt", "scale",
     'scale is \'sqrt\', expected "inv_sqrt_dk", "none", {"temperature": t} or {"factor": f}'),
    (("scale",), {"temperature": 0}, "scale.temperature", "scale.temperature is 0.0, expected a number > 0"),
    (("scale",), {"temperature": -1.5}, "scale.temperature", "scale.temperature is -1.5, expected a number > 0"),
    (("scale",), {"temperature": "hot"}, "scale.temperature", "scale.temperature is 'hot', expected a number"),
    (("preset",), "sine", "preset", 'preset is \'sine\', expected null or {"name": ..., "params": {...}}'),
    (("preset",), {"name": ""}, "preset.name", "preset.name is empty, expected the preset's name"),
    (("preset",), {"name": 3}, "preset.name", "preset.name is 3, expected the preset's name"),
    (("preset",), {"name": "x", "params": []}, "preset.params", "preset.params is a list, expected an object"),
    (("preset",), {"name": "x", "seed": 1}, "preset", "preset has an unknown key 'seed' (expected \"name\" and \"params\")"),
    (("version",), "1", "version", "version is '1', expected a whole number (this attnexplorer reads version 3)"),
    (("version",), 0, "version", "version is 0, which no attnexplorer wrote; this one reads version 3"),
    (("format",), "other", "format", "format is 'other', expected \"attnexplorer-session\""),
    (("tokens",), DELETE, None, 'has no "tokens"'),
    (("format",), DELETE, None, 'is not an attnexplorer session file (no "format": "attnexplorer-session")'),
]


@pytest.mark.parametrize("path, value, where, message", CASES, ids=[c[3][:50] for c in CASES])
def test_each_problem_is_named_exactly(path, value, where, message):
    with pytest.raises(SessionError) as info:
        session_from_dict(mutate(path, value), "session.json")
    assert str(info.value) == f"session.json: {message}"
    assert info.value.where == where


def test_a_head_is_checked_before_stacking():
    # Head 1 has the wrong width *and* head 2 is missing a key: the first problem is reported.
    d = valid_dict()
    d["heads"].append({"W_q": [[1, 0]] * 4})
    d["heads"][1]["W_k"] = [[0, 1]] * 3
    with pytest.raises(SessionError, match=r"heads\[1\]\.W_k has 3 rows"):
        session_from_dict(d, "session.json")


def test_bounds_are_enforced():
    d = valid_dict()
    d["heads"] = d["heads"] * 40
    with pytest.raises(SessionError, match=f"heads has 80 heads, expected 1..{MAX_HEADS}"):
        session_from_dict(d)
    d = valid_dict()
    d["embeddings"] = [[1.0] * 1025] * 3
    with pytest.raises(SessionError, match=r"embeddings has 1025 columns, expected 1..1024"):
        session_from_dict(d)


@pytest.mark.parametrize("text, message", [
    ('{"format": "attnexplorer-session", "version": 4, "tokens": []}',
     "written by a newer attnexplorer (version 4); this one reads version 3"),
    ('[1, 2]', "the top level is a list, expected an object (a session file)"),
    ('"hello"', "the top level is 'hello', expected an object (a session file)"),
    ('', "is not valid JSON: Expecting value at line 1, column 1 (the file looks truncated)"),
    ('{"format": "attnexplorer-session", "tok', "is not valid JSON: Unterminated string starting at line 1, column 36"
     " (the file looks truncated)"),
    ('{"a": 1} trailing', "is not valid JSON: Extra data at line 1, column 10"),
    ('[' * 100_000 + ']' * 100_000, "nests too deeply to be a session file"),
])
def test_bad_text_is_refused(text, message):
    with pytest.raises(SessionError) as info:
        loads_session(text, "f.json")
    assert str(info.value) == f"f.json: {message}"


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_json_non_finite_tokens_are_refused_with_their_place(token):
    text = json.dumps(valid_dict()).replace('"embeddings": [[1, 2, 3, 4]', f'"embeddings": [[1, {token}, 3, 4]')
    assert token in text
    with pytest.raises(SessionError) as info:
        loads_session(text, "f.json")
    assert str(info.value) == f"f.json: embeddings[0][1] is {token}; every number must be finite"


def test_overflowing_literal_and_non_finite_elsewhere():
    text = json.dumps(valid_dict()).replace('"temperature": 0.5', '"temperature": 1e999')
    with pytest.raises(SessionError, match=r"scale.temperature is inf; every number must be finite"):
        loads_session(text, "f.json")
    d = valid_dict()
    text = json.dumps(d)[:-1] + ', "view": {"zoom": [1, NaN]}}'
    with pytest.raises(SessionError, match=r"view.zoom\[1\] is NaN; every number must be finite"):
        loads_session(text, "f.json")


def test_deep_extra_is_refused_but_moderate_nesting_kept():
    d = valid_dict()
    deep = inner = {}
    for _ in range(sf.MAX_NESTING + 5):
        inner["x"] = {}
        inner = inner["x"]
    d["view"] = deep
    with pytest.raises(SessionError, match=f"nests deeper than {sf.MAX_NESTING} levels"):
        session_from_dict(d, "f.json")
    d["view"] = {"a": [[[1, 2]]]}
    assert session_from_dict(d).extra["view"] == {"a": [[[1, 2]]]}


def test_not_utf8_and_bom(tmp_path):
    p = tmp_path / "latin1.json"
    p.write_bytes('{"tokens": ["caf\xe9"]}'.encode("latin-1"))
    with pytest.raises(SessionError, match=r"latin1.json: is not UTF-8 text \(byte 0xe9 at offset 16\)"):
        load_session(p)
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(valid_dict()).encode())
    assert load_session(p).tokens == ("a", "b", "c")


def test_huge_file_refused_before_reading(tmp_path):
    p = tmp_path / "huge.json"
    with open(p, "wb") as f:
        f.truncate(sf.MAX_FILE_BYTES + 1)  # sparse: costs nothing on disk
    with pytest.raises(SessionError) as info:
        load_session(p)
    assert str(info.value) == f"{p}: is {sf.MAX_FILE_BYTES + 1:,} bytes, more than the limit of {sf.MAX_FILE_BYTES:,}"


def test_missing_and_unreadable(tmp_path):
    with pytest.raises(SessionError, match=r"nope.json: cannot be read: No such file or directory"):
        load_session(tmp_path / "nope.json")
    with pytest.raises(SessionError, match=r"is not a regular file \(a folder\)"):
        load_session(tmp_path)


def test_no_code_is_ever_run(tmp_path, monkeypatch):
    import builtins
    import pickle

    def forbidden(*a, **k):
        raise AssertionError("the loader ran code")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    d = valid_dict()
    d["tokens"] = ["__import__('os').system('false')", "b", "c"]
    d["view"] = {"__reduce__": "os.system"}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    assert load_session(p).tokens[0] == "__import__('os').system('false')"


def test_save_is_atomic_and_failure_keeps_old_file(tmp_path, monkeypatch):
    p = tmp_path / "s.json"
    first = small_session()
    save_session(first, p)
    old = p.read_bytes()

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    import attnexplorer.io.atomic as atomic

    monkeypatch.setattr(atomic.os, "replace", broken)
    with pytest.raises(WriteError) as info:
        save_session(small_session(mask=Mask("causal")), p)
    assert str(info.value) == f"cannot write {p}: No space left on device"
    assert p.read_bytes() == old
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.json"]


def test_unsavable_extra_is_refused_clearly():
    s = small_session().replace(extra={"view": {"zoom": float("nan")}})
    with pytest.raises(SessionError) as info:
        dumps_session(s)
    assert str(info.value) == "cannot save: view.zoom is nan; every number must be finite"
    assert info.value.where == "view.zoom"
    s = small_session().replace(extra={"view": object()})
    with pytest.raises(SessionError) as info:
        dumps_session(s)
    assert str(info.value) == "cannot save: view is a Python object, which a session file cannot hold"


def test_error_family():
    with pytest.raises(AttnExplorerError):
        loads_session("{", "x")
    assert issubclass(SessionError, ValueError)


# -- fuzzing --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def _load_or_refuse(text):
    try:
        s = loads_session(text, "fuzz.json")
    except SessionError as err:
        assert str(err).startswith("fuzz.json: ")
        assert "\n" not in str(err)
        return None
    # Whatever loads is a valid session that saves and loads back the same.
    assert loads_session(dumps_session(s)) == s
    return s


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_fuzz_random_json_raises_only_session_error(value):
    _load_or_refuse(json.dumps(value))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_fuzz_random_bytes_raise_only_session_error(data):
    _load_or_refuse(data)


KEYS = ["format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset", "extra_key"]


@st.composite
def mutated_files(draw):
    d = valid_dict()
    for _ in range(draw(st.integers(1, 3))):
        # Walk a random path into the document, then replace, delete or duplicate there.
        target, key = d, draw(st.sampled_from(KEYS))
        while key in target and isinstance(target[key], (dict, list)) and target[key] and draw(st.booleans()):
            target = target[key]
            key = draw(st.sampled_from(sorted(target))) if isinstance(target, dict) else \
                draw(st.integers(0, len(target) - 1))
        action = draw(st.sampled_from(["replace", "delete", "number"]))
        if action == "delete" and isinstance(target, dict):
            target.pop(key, None)
        elif action == "number":
            target[key] = draw(st.sampled_from([0, -1, 1e308, 2 ** 63, True, 0.5, 9, 70000]))
        else:
            target[key] = draw(json_values)
    return d


@settings(max_examples=200, deadline=None)
@given(mutated_files())
def test_fuzz_mutated_sessions_raise_only_session_error(d):
    _load_or_refuse(json.dumps(d))


@settings(max_examples=60, deadline=None)
@given(sessions(max_n=3, max_d=3, max_heads=2), st.data())
def test_fuzz_truncated_and_corrupted_files(session, data):
    text = dumps_session(session)
    cut = data.draw(st.integers(0, len(text) - 1))
    _load_or_refuse(text[:cut])
    pos = data.draw(st.integers(0, len(text) - 1))
    _load_or_refuse(text[:pos] + data.draw(st.sampled_from(["x", "]", "}", ",", "NaN", "1e999", '"', "-"])) + text[pos + 1:])
