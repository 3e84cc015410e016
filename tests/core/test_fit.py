"""Fitting W_q and W_k toward a target: targets, the gradient, convergence, divergence, plateaus."""

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.fit import Fitter, TargetError, check_target, make_target, target_for
from attnexplorer.core.fit import FitError
from attnexplorer.core.inputs.presets import build_preset, parse_assignments
from attnexplorer.core.inputs.session import Mask


def random_session(n=8, d=8, d_k=4, heads=1, seed=0, mask="causal"):
    s = build_preset("random", parse_assignments([f"n={n}", f"d={d}", f"d_k={d_k}", f"heads={heads}", f"seed={seed}"])).session
    return s.replace(mask=Mask(mask))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_previous_token_is_learned_within_500_steps_and_shown_by_the_engine(seed):
    s = random_session(seed=seed)
    target = target_for(s, "previous-token")
    before = compute(s).weights[0]
    assert np.abs(before - target.matrix).max() > 0.3  # a random start is far from it
    fit = Fitter(s, {0: target}, steps=500)  # Adam, default learning rate
    progress = fit.run()
    assert progress.status == "converged" and progress.step <= 500
    fitted = fit.session()
    shown = compute(fitted).weights[0]
    assert np.abs(shown - target.matrix).max() < 0.01
    # Only W_q and W_k moved.
    assert not np.array_equal(fitted.w_query, s.w_query) and not np.array_equal(fitted.w_key, s.w_key)
    assert fitted.w_value is s.w_value and fitted.embeddings is s.embeddings


def _loss_through_compute(session, target):
    """The loss recomputed from what the window shows (compute() in float64): mean KL over rows."""
    w = compute(session, dtype="float64").weights[0]
    r = target.reachable
    rows = target.rows
    cells = r > 0  # blocked cells have weight 0 and no target: they add nothing
    kl = np.zeros_like(r)
    kl[cells] = r[cells] * (np.log(r[cells]) - np.log(w[cells]))
    kl = kl.sum(axis=1)
    return kl[rows].mean()


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_gradient_matches_finite_differences_of_what_is_shown(mask):
    s = random_session(n=6, d=5, d_k=3, seed=3, mask=mask)
    target = check_target(s, np.random.default_rng(1).random((6, 6)) + 0.05)
    fit = Fitter(s, {0: target}, dtype="float64")
    grad = fit.gradient()
    eps = 1e-6
    for name, field in (("W_q", "w_query"), ("W_k", "w_key")):
        base = getattr(s, field)
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            numeric[idx] = (_loss_through_compute(s.replace(**{field: plus}), target)
                            - _loss_through_compute(s.replace(**{field: minus}), target)) / (2 * eps)
        np.testing.assert_allclose(grad[name], numeric, rtol=1e-5, atol=1e-8)
    assert fit.loss_and_max_error()[0] == pytest.approx(_loss_through_compute(s, target), rel=1e-12)


def test_only_the_targeted_head_moves():
    s = random_session(heads=2)
    fit = Fitter(s, {1: target_for(s, "first-token", head=1)}, steps=30, tolerance=0)
    fit.run()
    fitted = fit.session()
    np.testing.assert_array_equal(fitted.w_query[0], s.w_query[0])
    np.testing.assert_array_equal(fitted.w_key[0], s.w_key[0])
    assert not np.array_equal(fitted.w_query[1], s.w_query[1])


def test_one_target_per_head():
    s = random_session(heads=2, seed=4)
    targets = {0: target_for(s, "self"), 1: target_for(s, "previous-token", head=1)}
    fit = Fitter(s, targets, steps=500)
    assert fit.run().status == "converged"
    w = compute(fit.session()).weights
    assert np.abs(w[0] - targets[0].matrix).max() < 0.01 and np.abs(w[1] - targets[1].matrix).max() < 0.01


def test_divergence_stops_and_keeps_the_last_good_weights():
    s = random_session(seed=1)
    fit = Fitter(s, {0: target_for(s, "previous-token")}, optimizer="sgd", lr=1e30, steps=100)
    progress = fit.run()
    assert progress.status == "diverged"
    assert "diverged" in progress.message and "learning rate" in progress.message
    fitted = fit.session()
    assert np.isfinite(fitted.w_query).all() and np.isfinite(fitted.w_key).all()
    loss, _ = fit.loss_and_max_error()
    assert np.isfinite(loss) and progress.loss == pytest.approx(loss)


def test_a_loss_growing_100_times_is_a_divergence():
    s = random_session(seed=1)
    target = target_for(s, "previous-token")
    near = Fitter(s, {0: target}, steps=500)
    near.run()
    start = near.session()
    fit = Fitter(start, {0: target}, optimizer="sgd", lr=1e4, steps=100, tolerance=0)
    progress = fit.run()
    assert progress.status == "diverged" and "more than 100×" in progress.message
    # The last good weights are the start's: its loss, not the blown-up one.
    np.testing.assert_array_equal(fit.session().w_query, start.w_query)
    assert progress.loss < 1e-2


def test_a_target_on_masked_cells_plateaus_and_says_why():
    s = random_session()
    m = np.eye(8)
    m[np.arange(7), np.arange(1, 8)] = 1.0  # half on self, half on the next (masked) token
    target = check_target(s, m)
    assert "rows renormalised to sum to 1" in target.notes
    assert any("masked cells" in note for note in target.notes)
    assert target.best_max_error == pytest.approx(0.5)
    progress = Fitter(s, {0: target}, steps=2000).run()
    assert progress.status == "plateau"
    assert "masked cells" in progress.message and "0.5" in progress.message


def test_a_target_needing_more_dimensions_plateaus_and_says_why():
    s = random_session(d_k=1, mask="none")
    target = check_target(s, np.random.default_rng(0).random((8, 8)) ** 8)
    fit = Fitter(s, {0: target}, steps=5000)
    progress = fit.run()
    assert progress.status == "plateau" and progress.step < 5000
    assert "rank at most min(d, d_k) = 1" in progress.message
    assert progress.max_error > 0.05
    # The weights kept are the best reached, and the message reports them.
    assert fit.loss_and_max_error()[0] == pytest.approx(fit.best_loss)


def test_tokens_sharing_an_embedding_are_named():
    s = random_session()
    x = np.array(s.embeddings)
    x[3] = x[1]
    s = s.replace(embeddings=x)
    progress = Fitter(s, {0: target_for(s, "previous-token")}, steps=3000).run()
    assert progress.status == "plateau" and "share an embedding" in progress.message


def test_built_in_targets():
    s = random_session(n=5, mask="causal")
    np.testing.assert_array_equal(make_target(s, "previous-token")[[0, 1, 4]], [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 0]])
    assert (make_target(s, "first-token")[:, 0] == 1).all()
    np.testing.assert_array_equal(make_target(s, "self"), np.eye(5))
    uniform = target_for(s, "uniform").matrix
    np.testing.assert_allclose(uniform[2], [1 / 3, 1 / 3, 1 / 3, 0, 0])
    band = target_for(s, "window:2").matrix
    np.testing.assert_allclose(band[0], [1, 0, 0, 0, 0])
    np.testing.assert_allclose(band[3], [0, 0, 0.5, 0.5, 0])
    s2 = random_session(n=5, heads=2)
    np.testing.assert_allclose(target_for(s2, "head:1", head=0).matrix, compute(s2, dtype="float64").weights[1])


@pytest.mark.parametrize("spec, message", [
    ("next-token", "unknown target"), ("window:x", "whole number"), ("window:0", "W >= 1"),
    ("head:7", "heads 0..0"), ("head:0", "the head being fitted"), ("self:3", "takes no parameter"),
])
def test_bad_target_names_are_refused(spec, message):
    with pytest.raises(TargetError, match=message):
        target_for(random_session(n=4), spec)


@pytest.mark.parametrize("matrix, message", [
    (np.ones((3, 3)), "must be 4×4"), (np.full((4, 4), np.nan), "NaN"), (-np.eye(4), "cannot be negative"),
    (np.diag([1.0, 1.0, 0.0, 1.0]), "row 2 .* is all zero"), ("abc", "not a matrix"),
])
def test_bad_target_matrices_are_refused(matrix, message):
    with pytest.raises(TargetError, match=message):
        check_target(random_session(n=4), matrix)


def test_rows_wholly_on_masked_cells_are_left_out_and_a_target_with_none_left_is_refused():
    s = random_session(n=4)
    upper = np.triu(np.ones((4, 4)), 1)
    upper[3, 0] = 1.0  # under the causal mask only the last row's target is visible
    target = check_target(s, upper)
    assert target.rows.tolist() == [False, False, False, True]
    assert any("cannot be trained" in note for note in target.notes)
    padded = s.replace(mask=Mask("padding", padding=(1,)))
    on_key_1 = np.zeros((4, 4))
    on_key_1[:, 1] = 1.0
    with pytest.raises(TargetError, match="no query row can be trained"):
        check_target(padded, on_key_1)


@pytest.mark.parametrize("kw, message", [
    ({"train": ()}, "nothing to train"), ({"train": ("v",)}, "cannot train 'v'"),
    ({"optimizer": "rmsprop"}, "unknown optimizer"), ({"lr": 0.0}, "learning rate"), ({"lr": float("nan")}, "learning rate"),
    ({"steps": 0}, "steps"), ({"steps": 2.5}, "steps"), ({"dtype": "float16"}, "float32 or float64"),
    ({"device": "tpu"}, "not available"),
])
def test_bad_settings_are_refused_before_any_work(kw, message):
    s = random_session(n=4)
    with pytest.raises(AttnExplorerError, match=message):
        Fitter(s, {0: target_for(s, "self")}, **kw)


def test_bad_heads_are_refused():
    s = random_session(n=4)
    with pytest.raises(FitError, match="head 3 does not exist"):
        Fitter(s, {3: target_for(s, "self")})
    with pytest.raises(FitError, match="no target"):
        Fitter(s, {})


def test_a_session_the_fit_would_compute_differently_from_the_engine_is_refused():
    # The window passes the weights it shows (shown_weights); weights that the fit's inputs
    # do not reproduce stand for an engine stage the fit does not carry (here: the weights
    # of the same session without its causal mask). The first step refuses the session.
    s = random_session()
    unmasked = compute(random_session(mask="none")).weights
    fit = Fitter(s, {0: target_for(s, "previous-token")}, shown_weights=unmasked)
    with pytest.raises(FitError, match="differ from what the window shows"):
        fit.step()
    # the weights the window really shows pass the same check, and the fit steps
    progress = Fitter(s, {0: target_for(s, "previous-token")}, shown_weights=compute(s).weights).step()
    assert progress.step == 1


