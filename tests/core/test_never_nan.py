"""The norms cannot overflow and nothing makes NaN (issue 27, items 2 and 3): a float32 row of
1e20 through RMSNorm came out as zeros, float16 rows near 300 76 % off, and θ = 5e-324,
eps = 1e-50 or float16's default eps on a zero row put NaN into results and CSV tables."""

import numpy as np
import pytest

import attnexplorer as ax
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.stages import Norm, Positions, norm_statistics
from attnexplorer.io.session_file import session_from_dict


def _session(rows, norm, positions=None):
    rows = np.asarray(rows, dtype=np.float64)
    n, d = rows.shape
    eye = np.eye(d)[None]
    return ax.Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rows, w_query=eye, w_key=eye,
                      w_value=eye, norm=norm, positions=positions)


def _reference_norm(kind, rows, eps):
    x = np.asarray(rows, dtype=np.longdouble)
    if kind == "layer":
        x = x - x.mean(-1, keepdims=True)
    return np.asarray(x / np.sqrt((x * x).mean(-1, keepdims=True) + eps), dtype=np.float64)


ROWS = {
    "huge": [[1e20, -3e20, 2e20, 5e19], [1.0, 2.0, 3.0, 4.0]],
    "float16-ordinary": [[300.0, -250.0, 280.0, 310.0], [0.5, 1.0, -2.0, 3.0]],
    "zero": [[0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 2.0, 0.0]],
    "tiny": [[1e-30, -2e-30, 3e-30, 1e-30], [1.0, 2.0, 3.0, 4.0]],
}


CASES = [(rows, kind, dtype) for rows in sorted(ROWS) for kind in ("rms", "layer")
         for dtype in ("float32", "float16", "float64") if (rows, dtype) != ("huge", "float16")]


def test_a_row_float16_cannot_hold_is_refused_as_an_overflow():
    with pytest.raises(ax.AttnExplorerError, match="too large for float16"):
        ax.compute(_session(ROWS["huge"], Norm("rms", eps=1e-6)), dtype="float16")


@pytest.mark.parametrize("rows, kind, dtype", CASES)
def test_the_norm_is_right_and_finite_on_every_row(rows, kind, dtype):
    eps = 1e-5 if kind == "layer" else 1e-6
    s = _session(ROWS[rows], Norm(kind, eps=eps))
    r = ax.compute(s, dtype=dtype)
    expected = _reference_norm(kind, ROWS[rows], eps)
    tol = {"float64": 1e-12, "float32": 1e-6, "float16": 2e-3}[dtype]
    assert np.isfinite(r.X).all() and np.isfinite(r.weights).all() and np.isfinite(r.output).all()
    assert np.allclose(r.X, expected, rtol=tol, atol=tol), (r.X, expected)


def test_the_norm_statistics_cannot_overflow():
    mean, scale = norm_statistics("rms", [[1e200, -1e200]], 1e-6)
    assert mean is None and np.isclose(scale[0], 1e-200)
    mean, scale = norm_statistics("layer", [[1e200, -1e200]], 1e-5)
    assert mean[0] == 0 and np.isclose(scale[0], 1e-200)


@pytest.mark.parametrize("make, where", [
    (lambda: Positions("rope", theta=5e-324), "positions.theta"),
    (lambda: Positions("rope", theta=0.5), "positions.theta"),
    (lambda: Positions("sinusoidal", base=5e-324), "positions.base"),
    (lambda: Norm("rms", eps=1e-50), "norm.eps"),
    (lambda: Norm("layer", eps=1e-50), "norm.eps"),
    (lambda: Norm("layer", eps=1e300), "norm.eps"),
])
def test_settings_that_make_nan_are_refused_naming_the_bound(make, where):
    with pytest.raises(SessionError, match=f"{where}.*must be") as err:
        make()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("stage, where", [
    ({"norm": {"kind": "rms", "weight": [1, 1], "eps": 1e-50}}, "norm.eps"),
    ({"norm": {"kind": "layer", "weight": [1, 1], "bias": [0, 0], "eps": 1e-50}}, "norm.eps"),
    ({"positions": {"kind": "rope", "theta": 5e-324}}, "positions.theta"),
    ({"positions": {"kind": "sinusoidal", "base": 5e-324}}, "positions.base"),
])
def test_a_session_file_with_such_a_setting_is_refused_in_one_line(stage, where):
    data = {"format": "attnexplorer-session", "version": 2, "tokens": ["a", "b"],
            "embeddings": [[0.0, 0.0], [1.0, 2.0]],
            "heads": [{"W_q": [[1, 0], [0, 1]], "W_k": [[1, 0], [0, 1]], "W_v": [[1, 0], [0, 1]]}], **stage}
    with pytest.raises(SessionError, match=where) as err:
        session_from_dict(data, "s.json")
    assert "\n" not in str(err.value) and "must be" in str(err.value)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_smallest_eps_allowed_on_a_zero_row_is_finite(dtype):
    for kind in ("rms", "layer"):
        s = _session(ROWS["zero"], Norm(kind, eps=1e-20))
        r = ax.compute(s, dtype=dtype)
        assert np.isfinite(r.X).all() and (r.X[0] == 0).all()
