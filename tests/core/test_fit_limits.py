"""Fitting refuses what it cannot do honestly (issue 27, items 4 and 7): a target whose rows
overflowed when summed was renormalised to zeros and reported as fitted ("loss 0"), and a fit of
16,384 tokens allocated 21.8 GB and was killed, where ``compute`` and ``export`` refuse up front."""

import numpy as np
import pytest

from attnexplorer import cli
from attnexplorer.core.fit import Fitter, check_target
from attnexplorer.core.fit.settings import FitError, check_fit_memory, fit_bytes
from attnexplorer.core.inputs.presets import build_preset


def _random(**params):
    base = {"n": 4, "d": 4, "d_k": 2, "heads": 1}
    base.update(params)
    return build_preset("random", base).session


def test_huge_target_rows_are_normalised_not_zeroed():
    s = _random()
    t = np.array([[1e308, 1e308, 0, 0], [1.0, 0, 0, 0], [1e308, 1e308, 1e308, 1e308], [5e-324, 0, 0, 5e-324]])
    target = check_target(s, t)
    expected = np.array([[0.5, 0.5, 0, 0], [1, 0, 0, 0], [0.25] * 4, [0.5, 0, 0, 0.5]])
    assert np.isfinite(target.matrix).all()
    np.testing.assert_allclose(target.matrix, expected, rtol=1e-12)
    np.testing.assert_allclose(target.matrix.sum(axis=1), 1.0)


def test_a_fit_toward_huge_rows_does_not_report_a_false_match():
    from attnexplorer.core.compute.engine import compute

    s = _random()
    fitter = Fitter(s, {0: check_target(s, np.full((4, 4), 1e308))}, steps=1)
    _loss, max_error = fitter.loss_and_max_error()
    shown = compute(s, dtype="float32").weights[0]
    assert max_error == pytest.approx(np.abs(shown - 0.25).max(), abs=1e-6) and max_error > 0.01


def test_the_fit_estimate_grows_with_the_square_of_the_tokens():
    small, large = fit_bytes(_random(n=64), 1), fit_bytes(_random(n=128), 1)
    assert 3.5 < large / small < 4.1


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_any_work(monkeypatch):
    from attnexplorer.core.compute import memory

    s = _random(n=256)
    with pytest.raises(FitError, match=r"needs about .* more than the limit of 1 MB"):
        check_fit_memory(s, 1, limit=10**6)
    monkeypatch.setattr(memory, "memory_limit", lambda: fit_bytes(s, 1) - 1)
    with pytest.raises(FitError, match="more than the limit"):
        Fitter(s, {0: check_target(s, np.eye(256))}, steps=1)


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path, capsys, monkeypatch):
    from attnexplorer.core.compute import memory

    monkeypatch.setattr(memory, "memory_limit", lambda: 500 * 10**6)
    out = tmp_path / "fitted.json"
    code = cli.main(["fit", "--preset", "random", "--set", "n=4096", "--set", "d=8", "--set", "d_k=4", "--set", "heads=1",
                     "--target", "uniform", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err, err
    assert "needs about 1.8 GB of memory" in err and "4,096 × 4,096" in err
    assert not out.exists()
