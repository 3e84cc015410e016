"""The hostile campaign of issue 27, kept: hypothesis over version-2 sessions with extreme stage
settings and numbers, over Llama RoPE configs, and hand-made files through ``export``.

The promise each case holds: never NaN (a result is finite, or the session or the compute is
refused in one AttnExplorerError line), never a silently wrong number (a norm equals its
float64-or-better reference where it is computed), and a model setting the import does not
reproduce is refused, judged against transformers' own reading of the config. A few tens of
seconds in all.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnexplorer as ax
from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.io.session_file import session_from_dict

from test_hostile_campaign import check_export

MAGNITUDES = [0.0, 5e-324, 1e-300, 1e-30, 1e-8, 0.5, 3.0, 300.0, 7e4, 1e20, 1e38, 1e150, 1e300]
SETTINGS = [-1.0, 0.0, 5e-324, 1e-50, 1e-21, 1e-20, 1e-12, 1e-6, 0.5, 1.0, 4.0, 1e4, 1e10, 1e11, 1e300]
few = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def extreme_sessions(draw, stages=("layer", "rms", "rope", "sinusoidal", "none")):
    n, d = draw(st.integers(1, 4)), 2 * draw(st.integers(1, 2))
    scale = draw(st.sampled_from(MAGNITUDES))
    rows = np.array(draw(st.lists(st.sampled_from([-1.0, -0.3, 0.0, 0.7, 1.0]), min_size=n * d, max_size=n * d)))
    data = {"format": "attnexplorer-session", "version": 2, "tokens": [f"t{i}" for i in range(n)],
            "embeddings": (rows.reshape(n, d) * scale).tolist(),
            "heads": [{"W_q": np.eye(d).tolist(), "W_k": np.eye(d).tolist(), "W_v": np.eye(d).tolist()}],
            "mask": draw(st.sampled_from(["none", "causal"]))}
    stage = draw(st.sampled_from(stages))
    value = draw(st.sampled_from(SETTINGS))
    if stage in ("layer", "rms"):
        data["norm"] = {"kind": stage, "weight": [1.0] * d, "eps": value}
        if stage == "layer":
            data["norm"]["bias"] = [0.0] * d
    elif stage == "rope":
        data["positions"] = {"kind": "rope", "theta": value, "offset": draw(st.sampled_from([0, 1000, 1_000_000]))}
    elif stage == "sinusoidal":
        data["positions"] = {"kind": "sinusoidal", "base": value}
    return data, draw(st.sampled_from(["float64", "float32", "float16", "bfloat16"]))


def _reference_norm(kind, rows, eps):
    x = np.asarray(rows, dtype=np.longdouble)
    if kind == "layer":
        x = x - x.mean(-1, keepdims=True)
    return np.asarray(x / np.sqrt((x * x).mean(-1, keepdims=True) + eps), dtype=np.float64)


def _refusal_is_justified(session, dtype, err) -> None:
    """A compute refused as an overflow must really overflow ``dtype``: some number the float64
    engine makes (or the float64 engine itself) is beyond what ``dtype`` holds. A NaN made by
    the arithmetic and reported as an overflow was issue 27's "too large … use float64"."""
    import torch

    assert "too large for" in str(err) or "memory" in str(err), err
    biggest = np.finfo(np.float64).max if dtype == "bfloat16" else float(torch.finfo(getattr(torch, dtype)).max)
    try:
        r = ax.compute(session, dtype="float64")
    except AttnExplorerError:
        return   # float64 overflows too
    made = max(float(np.abs(np.asarray(getattr(r, name))).max(initial=0.0))
               for name in ("E", "X", "Q", "K", "V", "scores", "scaled_scores", "output"))
    limit = float(torch.finfo(torch.bfloat16).max) if dtype == "bfloat16" else biggest
    assert made > limit / 1e3, (dtype, made, str(err))


def _check_case(case):
    data, dtype = case
    try:
        session = session_from_dict(data, "hostile.json")
    except AttnExplorerError as err:
        assert "\n" not in str(err) and ("must be" in str(err) or "expected a number > 0" in str(err)), err
        return
    try:
        result = ax.compute(session, dtype=dtype)
    except AttnExplorerError as err:
        assert "\n" not in str(err)
        _refusal_is_justified(session, dtype, err)
        return
    for name in ("X", "Q", "K", "scores", "weights", "head_outputs", "output"):
        assert np.isfinite(np.asarray(getattr(result, name), dtype=np.float64)).all(), name
    rows = ~result.blocked_rows
    assert np.allclose(result.weights[:, rows].sum(-1), 1.0, atol=1e-2)
    norm = session.norm
    if norm is not None and dtype in ("float64", "float32"):
        held = session.embeddings if dtype == "float64" else \
            np.asarray(session.embeddings, dtype=np.float32).astype(np.float64)   # what float32 holds
        expected = _reference_norm(norm.kind, held, norm.eps)
        tol = 1e-9 if dtype == "float64" else 1e-5
        assert np.allclose(result.X, expected, rtol=tol, atol=tol), (result.X, expected)


@few
@given(extreme_sessions(stages=("layer", "rms")))
def test_a_normed_session_is_right_or_refused_for_a_real_overflow(case):
    _check_case(case)


@few
@given(extreme_sessions(stages=("rope", "sinusoidal", "none")))
def test_a_positioned_session_is_finite_or_refused_naming_the_bound(case):
    _check_case(case)


# -- RoPE configs against transformers' reading of them ---------------------------------------

ROPE_TYPES = [None, "default", "linear", "dynamic", "yarn", "llama3", "longrope"]
ROPE_KEYS = {"factor": 2.0, "partial_rotary_factor": 0.5, "original_max_position_embeddings": 16,
             "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@st.composite
def rope_configs(draw):
    def table():
        out = {}
        kind = draw(st.sampled_from(ROPE_TYPES))
        if kind is not None:
            out[draw(st.sampled_from(["rope_type", "type"]))] = kind
        if draw(st.booleans()):
            out["rope_theta"] = draw(st.sampled_from([500.0, 10000.0]))
        for key in draw(st.lists(st.sampled_from(sorted(ROPE_KEYS)), max_size=2, unique=True)):
            out[key] = ROPE_KEYS[key]
        return out

    config = {"model_type": "llama", "hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 2,
              "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 64}
    for name in ("rope_parameters", "rope_scaling"):
        if draw(st.booleans()):
            config[name] = table()
    if draw(st.booleans()):
        config["rope_theta"] = draw(st.sampled_from([500.0, 10000.0]))
    if draw(st.booleans()):
        config["partial_rotary_factor"] = draw(st.sampled_from([1.0, 0.5]))
    return config


def _transformers_rope(config: dict):
    """(rope_type, θ, partial factor, scaling factor) as transformers reads the config, or None if it refuses it."""
    import warnings

    from transformers import LlamaConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = LlamaConfig(**{k: v for k, v in config.items() if k != "model_type"})
    except Exception:
        return None
    params = dict(c.rope_parameters or {})
    partial = params.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0)) or 1.0
    return params.get("rope_type", "default"), params.get("rope_theta"), float(partial), params.get("factor")


@pytest.mark.skipif(__import__("sys").version_info < (3, 11), reason="transformers 5.24+ needs Python 3.11+")
@few
@given(rope_configs())
def test_a_rope_config_is_imported_only_as_transformers_reads_it(config):
    """Whatever a config says about RoPE (in rope_parameters, rope_scaling or at the top), what
    the import takes is what transformers runs: the same θ, the same scaling and factor, a full
    rotation; anything else is refused in one line."""
    from attnexplorer.models.families import family_for, layer_rope
    from attnexplorer.models.native import ModelConfig
    from attnexplorer.models.sources import ModelError

    ours = ModelConfig(json.loads(json.dumps(config)))
    try:
        family_for(ours)
        positions = layer_rope(ours, 0)
    except ModelError as err:
        assert "\n" not in str(err)
        return
    theirs = _transformers_rope(config)
    assert theirs is not None, config
    kind, their_theta, partial, factor = theirs
    scaling = positions["scaling"]
    assert kind == (scaling["kind"] if scaling else "default") and partial == 1.0, (config, theirs)
    assert positions["theta"] == their_theta, (config, positions, theirs)
    if scaling:
        assert scaling["factor"] == factor, (config, scaling, theirs)


# -- hand-made files through export -----------------------------------------------------------

def _file(tmp_path, **stage):
    data = {"format": "attnexplorer-session", "version": 2, "tokens": ["a", "b", "c"],
            "embeddings": [[0.0, 0.0], [1e20, -1e20], [0.5, 2.0]],
            "heads": [{"W_q": [[1, 0], [0, 1]], "W_k": [[1, 0], [0, 1]], "W_v": [[1, 0], [0, 1]]}], **stage}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    return path


HAND_MADE = {
    "layer norm eps 1e-50": {"norm": {"kind": "layer", "weight": [1, 1], "bias": [0, 0], "eps": 1e-50}},
    "rms norm eps 1e-50": {"norm": {"kind": "rms", "weight": [1, 1], "eps": 1e-50}},
    "rms norm on 1e20": {"norm": {"kind": "rms", "weight": [1, 1], "eps": 1e-6}},
    "layer norm on 1e20": {"norm": {"kind": "layer", "weight": [1, 1], "bias": [0, 0], "eps": 1e-5}},
    "rope theta denormal": {"norm": {"kind": "rms", "eps": 1e-6}, "positions": {"kind": "rope", "theta": 5e-324}},
    "sinusoidal base denormal": {"positions": {"kind": "sinusoidal", "base": 5e-324}},
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_hand_made_files_export_finite_tables_or_one_line(tmp_path, name, dtype):
    path = _file(tmp_path, **HAND_MADE[name])
    rc, stderr = check_export(tmp_path, ["--session", str(path)], ["--matrices", "csv,npz", "--dtype", dtype])
    if rc == 0:
        for table in (tmp_path / "out" / "csv").glob("*.csv"):
            assert "nan" not in table.read_text().lower(), table
        norm = HAND_MADE[name].get("norm")
        if norm is not None and dtype == "float32":
            with np.load(tmp_path / "out" / "attention.npz") as z:
                held = z["E"].astype(np.float32).astype(np.float64)
                expected = _reference_norm(norm["kind"], held, norm["eps"])
                assert np.allclose(z["X"], expected, rtol=1e-5, atol=1e-5), (z["X"], expected)
    else:
        assert "must be" in stderr or "> 0" in stderr or "too large for float16" in stderr, stderr
