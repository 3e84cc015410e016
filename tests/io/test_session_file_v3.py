"""Session files version 3: QK-norm, soft-capping, sinks, a scale factor, RoPE scaling and
float32 angles round-trip; versions 1 and 2 load as they always did; a session without a
version-3 stage is still written as version 2; every bad value is refused naming its field."""

import copy
import json

import numpy as np
import pytest

from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.core.inputs.stages import Positions, QKNorm, RopeScaling
from test_session_file import DELETE, mutate

from attnexplorer.io.session_file import dumps_session, loads_session, session_from_dict, session_to_dict


def v3_dict():
    """A 3-token, d = 4, two-head (one K/V head) version-3 file with every new stage."""
    return {
        "format": "attnexplorer-session", "version": 3,
        "tokens": ["a", "b", "c"],
        "embeddings": [[1, 2, 3, 4], [0.5, -1, 0, 2], [3, 1, 4, 1]],
        "heads": [{"W_q": [[1, 0], [0, 1], [1, 1], [0, 0]]}, {"W_q": [[0.5, 0], [0, 0.5], [1, 0], [0, 1]]}],
        "kv_heads": [{"W_k": [[0, 1], [1, 0], [1, 1], [0, 1]], "W_v": [[1, 2, 3]] * 4}],
        "mask": "causal",
        "scale": {"factor": 0.0625},
        "positions": {"kind": "rope", "theta": 10000, "scaling": {"kind": "llama3", "factor": 8, "low_freq_factor": 1,
                                                                  "high_freq_factor": 4,
                                                                  "original_max_position_embeddings": 8192},
                      "angles": "float32"},
        "qk_norm": {"kind": "rms", "over": "head", "eps": 1e-6, "query_weight": [1.5, 0.5], "key_weight": [1.0, 2.0]},
        "softcap": 50.0,
        "sinks": [0.25, -1.5],
    }


def test_every_new_stage_is_read_and_round_trips():
    s = session_from_dict(v3_dict())
    assert s.scale == Scale("factor", multiplier=0.0625) and s.scale.factor(2) == 0.0625
    assert s.positions.scaling == RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                              original_max_position_embeddings=8192)
    assert s.positions.angles == "float32"
    assert s.qk_norm == QKNorm("rms", "head", 1e-6, np.array([1.5, 0.5]), np.array([1.0, 2.0]))
    assert s.softcap == 50.0 and s.sinks.tolist() == [0.25, -1.5]
    text = dumps_session(s)
    assert json.loads(text)["version"] == 3
    assert loads_session(text) == s
    for scaling in (RopeScaling("linear", factor=2.5),
                    RopeScaling("yarn", factor=32.0, original_max_position_embeddings=4096, truncate=False),
                    RopeScaling("yarn", factor=4.0, original_max_position_embeddings=1024, attention_factor=1.2,
                                beta_fast=16.0, beta_slow=2.0)):
        other = s.replace(positions=Positions("rope", theta=500.0, dims=2, scaling=scaling))
        assert loads_session(dumps_session(other)) == other
    layer = s.replace(qk_norm=QKNorm("layer", "all", 1e-5, np.arange(4.0), np.ones(2), np.ones(4), np.zeros(2)))
    assert loads_session(dumps_session(layer)) == layer


def test_the_lowest_version_that_holds_the_session_is_written():
    s = session_from_dict(v3_dict())
    plain = s.replace(scale=Scale(), positions=Positions("rope"), qk_norm=None, softcap=None, sinks=None)
    d = session_to_dict(plain)
    assert d["version"] == 2 and not {"qk_norm", "softcap", "sinks"} & set(d)
    assert "scaling" not in d["positions"] and "angles" not in d["positions"]
    for change in (dict(scale=Scale("factor", multiplier=0.5)), dict(softcap=30.0), dict(sinks=np.zeros(2)),
                   dict(qk_norm=QKNorm("rms")), dict(positions=Positions("rope", angles="float32")),
                   dict(positions=Positions("rope", scaling=RopeScaling("linear", factor=2.0)))):
        one = plain.replace(**change)
        assert session_to_dict(one)["version"] == 3, change
        assert loads_session(dumps_session(one)) == one, change


def test_older_versions_load_as_they_always_did():
    """A version-1 or -2 file with version 3's names keeps them as extra keys (those versions
    did not know them), and refuses version 3's scale and RoPE keys."""
    d = v3_dict()
    old = {k: d[k] for k in ("format", "tokens", "embeddings", "mask")}
    old["heads"] = [{"W_q": h["W_q"], "W_k": d["kv_heads"][0]["W_k"], "W_v": d["kv_heads"][0]["W_v"]}
                    for h in d["heads"]]
    old.update(softcap=50.0, sinks=[0.25, -1.5], qk_norm="anything")
    for version in (1, 2):
        s = session_from_dict(dict(old, version=version))
        assert s.softcap is None and s.sinks is None and s.qk_norm is None
        assert s.extra == {"softcap": 50.0, "sinks": [0.25, -1.5], "qk_norm": "anything"}
        again = session_to_dict(s)
        assert again["version"] == 2 and again["softcap"] == 50.0   # written back as it came
    with pytest.raises(SessionError, match=r"scale is an object, .* \(a scale factor needs a version-3 file\)"):
        session_from_dict(dict(old, version=2, scale={"factor": 0.5}))
    with pytest.raises(SessionError, match="positions has an unknown key 'scaling'"):
        session_from_dict(dict(old, version=2, positions={"kind": "rope", "scaling": None}))


@pytest.mark.parametrize("path,value,where", [
    (("softcap",), -1.0, "softcap"),
    (("softcap",), 0, "softcap"),
    (("softcap",), "50", "softcap"),
    (("softcap",), True, "softcap"),
    (("sinks",), [0.0], "sinks"),
    (("sinks",), [0.0, "x"], "sinks[1]"),
    (("sinks",), 1.0, "sinks"),
    (("scale",), {"factor": 0}, "scale.factor"),
    (("scale",), {"factor": -0.5}, "scale.factor"),
    (("scale",), {"factor": 0.5, "temperature": 1}, "scale"),
    (("qk_norm", "kind"), "batch", "qk_norm.kind"),
    (("qk_norm", "over"), "heads", "qk_norm.over"),
    (("qk_norm", "eps"), 0.0, "qk_norm.eps"),
    (("qk_norm", "eps"), 1e11, "qk_norm.eps"),
    (("qk_norm", "query_weight"), [1.0, 2.0, 3.0], "qk_norm.query_weight"),
    (("qk_norm", "key_weight"), [1.0, 2.0, 3.0, 4.0], "qk_norm.key_weight"),   # 1 K/V head × d_k = 2
    (("qk_norm", "query_bias"), [1.0, 2.0], "qk_norm.query_bias"),            # RMSNorm has no bias
    (("qk_norm", "weight"), [1.0, 2.0], "qk_norm"),
    (("positions", "angles"), "float16", "positions.angles"),
    (("positions", "scaling", "kind"), "dynamic", "positions.scaling.kind"),
    (("positions", "scaling", "factor"), 0, "positions.scaling.factor"),
    (("positions", "scaling", "factor"), -8, "positions.scaling.factor"),
    (("positions", "scaling", "factor"), DELETE, "positions.scaling"),
    (("positions", "scaling", "high_freq_factor"), 0.5, "positions.scaling.high_freq_factor"),
    (("positions", "scaling", "original_max_position_embeddings"), 8192.5,
     "positions.scaling.original_max_position_embeddings"),
    (("positions", "scaling", "beta_fast"), 32, "positions.scaling"),          # not a llama3 key
])
def test_every_bad_value_is_refused_naming_its_field(path, value, where):
    with pytest.raises(SessionError) as err:
        session_from_dict(mutate(path, value, v3_dict()), "s.json")
    assert err.value.where == where, str(err.value)
    assert str(err.value).startswith(f"s.json: {where} ")


def test_non_finite_numbers_are_refused_in_the_text_too():
    text = json.dumps(v3_dict()).replace('"softcap": 50.0', '"softcap": NaN')
    with pytest.raises(SessionError, match="softcap"):
        loads_session(text, "s.json")
    d = copy.deepcopy(v3_dict())
    d["positions"]["scaling"] = {"kind": "yarn", "factor": 4, "original_max_position_embeddings": 1024,
                                 "attention_factor": 1e400}
    with pytest.raises(SessionError, match="positions.scaling.attention_factor"):
        loads_session(json.dumps(d).replace("Infinity", "1e400"), "s.json")


def test_the_session_and_the_file_refuse_the_same_things():
    """The window builds the values directly; the file reader goes through them: one rule."""
    s = session_from_dict(v3_dict())
    cases = [(dict(softcap=-2.0), -2.0), (dict(sinks=np.array([1.0])), [1.0]),
             (dict(qk_norm=QKNorm("rms", "all", 1e-6, np.ones(2))),
              {"kind": "rms", "over": "all", "eps": 1e-6, "query_weight": [1.0, 1.0]})]
    for change, in_file in cases:
        key = next(iter(change))
        with pytest.raises(SessionError) as direct:
            s.replace(**change)
        with pytest.raises(SessionError) as from_file:
            session_from_dict(dict(v3_dict(), **{key: in_file}))
        assert direct.value.where == from_file.value.where == (key if key != "qk_norm" else "qk_norm.query_weight")


def test_a_mask_window_per_layer_is_still_the_window_mask():
    d = v3_dict()
    d["mask"] = {"window": 2}
    assert session_from_dict(d).mask == Mask("window", window=2)
    assert isinstance(session_from_dict(d), Session)
