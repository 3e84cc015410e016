"""Fitting through every stage of a real head: biases, norm, positions (sinusoidal, learned,
RoPE, ALiBi), grouped K/V heads and cross-attention.

What is trained must be what is shown: for every allowed combination of stages the fit's loss
equals the loss of the weights ``compute`` shows, and its gradient is checked against finite
differences (``torch.autograd.gradcheck`` in float64, and against compute() itself).
"""

import itertools

import numpy as np
import pytest
import torch

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import SessionError
from attnexplorer.core.fit import Fitter, TargetError, check_target, target_for
from attnexplorer.core.inputs.presets import build_preset, parse_assignments
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source

POSITIONS = {
    "none": None,
    "sinusoidal": Positions("sinusoidal", base=100.0),
    "learned": "learned",  # made per session (it needs d)
    "rope-half": Positions("rope", theta=50.0, layout="half", offset=3),
    "rope-interleaved-2": Positions("rope", theta=10.0, dims=2, layout="interleaved"),
    "alibi": Positions("alibi"),
}
NORMS = {"none": None, "layer": "layer", "rms": "rms"}


def staged_session(positions="none", norm="none", biases=False, kv_heads=2, cross=False, n=4, d=4, d_k=4, heads=2,
                   seed=0, mask=None) -> Session:
    """A small random session with the named stages (SessionError when they are not allowed)."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.normal(size=shape)  # noqa: E731
    d_in, source = d, None
    if cross:
        source = Source(("the", "black", "cat"), r(3, 5))
        d_in = 5
    p = POSITIONS[positions]
    if p == "learned":
        p = Positions("learned", table=r(n + 1, d))
    nm = None
    if norm == "layer":
        nm = Norm("layer", weight=1 + 0.1 * r(d), bias=0.1 * r(d))
    elif norm == "rms":
        nm = Norm("rms", weight=1 + 0.1 * r(d), eps=1e-6)
    if mask is None:
        mask = Mask("padding", padding=(1,)) if cross else Mask("causal")
    return Session(tokens=tuple("abcdefgh"[:n]), embeddings=r(n, d), w_query=r(heads, d, d_k),
                   w_key=r(kv_heads, d_in, d_k), w_value=r(kv_heads, d_in, 3),
                   b_query=r(heads, d_k) if biases else None, b_key=r(kv_heads, d_k) if biases else None,
                   b_value=r(kv_heads, 3) if biases else None, w_out=r(heads * 3, 2) if biases else None,
                   b_out=r(2) if biases else None, norm=nm, positions=p, source=source, mask=mask)


def allowed_combinations(positions=None):
    """(id, session) for every combination of stages the session allows."""
    for kind, norm, biases, kv_heads, cross in itertools.product(POSITIONS, NORMS, (False, True), (2, 1), (False, True)):
        if positions is not None and kind != positions:
            continue
        try:
            s = staged_session(kind, norm, biases, kv_heads, cross)
        except SessionError:
            continue  # e.g. RoPE or ALiBi with a source: refused by the session itself
        yield f"{kind}-{norm}-{'bias' if biases else 'nobias'}-kv{kv_heads}-{'cross' if cross else 'self'}", s


def random_target(s: Session, seed=1):
    return check_target(s, np.random.default_rng(seed).random((s.n, s.n_keys)) + 0.05)


def loss_from_compute(session, targets) -> float:
    """The fit's loss recomputed from the weights the window shows (compute() in float64)."""
    w = compute(session, dtype="float64").weights
    total, rows = 0.0, 0
    for h, target in targets.items():
        r = target.reachable
        cells = r > 0
        kl = np.zeros_like(r)
        kl[cells] = r[cells] * (np.log(r[cells]) - np.log(w[h][cells]))
        total += kl.sum(axis=1)[target.rows].sum()
        rows += int(target.rows.sum())
    return total / rows


def test_every_stage_is_in_the_combinations():
    ids = [name for name, _ in allowed_combinations()]
    assert len(ids) == 108
    for word in ("rope-half", "rope-interleaved-2", "alibi", "learned", "sinusoidal", "layer", "rms", "-bias-",
                 "kv1", "cross"):
        assert any(word in name for name in ids), word
    assert not any(name.startswith(("rope", "alibi")) and name.endswith("cross") for name in ids)  # refused by Session


# One test per positional scheme, each looping over the other stages: 108 test items would
# spend longer in the suite's per-test garbage collection than in the checks.
@pytest.mark.parametrize("positions", list(POSITIONS))
def test_gradient_through_every_allowed_stage_combination(positions):
    for name, session in allowed_combinations(positions):
        targets = {0: random_target(session)}
        fit = Fitter(session, targets, train=("q", "k", "biases"), dtype="float64")
        f, inputs = fit.loss_function()
        assert [tuple(x.shape) for x in inputs] == [session.w_query.shape, session.w_key.shape,
                                                    (session.heads, session.d_k), (session.kv_heads, session.d_k)], name
        # The fit's loss is the loss of what compute() shows ...
        shown = loss_from_compute(session, targets)
        assert float(f(*inputs).detach()) == pytest.approx(shown, rel=1e-10, abs=1e-12), name
        # ... and its autograd gradient agrees with finite differences of it (fast mode: along
        # a random direction, which a wrong entry anywhere fails too; the full Jacobian of all
        # 108 combinations took minutes, and the test below compares every entry for three).
        assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True), name


@pytest.mark.parametrize("stages", [
    dict(positions="rope-half", norm="rms", biases=True, kv_heads=1),
    dict(positions="alibi", norm="layer", biases=False, kv_heads=2),
    dict(positions="learned", norm="none", biases=True, kv_heads=1, cross=True),
])
def test_gradient_matches_finite_differences_of_what_compute_shows(stages):
    s = staged_session(**stages, n=3, d=3, d_k=2, heads=2, seed=5)
    targets = {1: random_target(s, seed=2)}
    fit = Fitter(s, targets, train=("q", "k", "biases"), dtype="float64")
    grad = fit.gradient()
    assert torch.autograd.gradcheck(*fit.loss_function(), eps=1e-6, atol=1e-6, rtol=1e-4)  # every entry
    eps = 1e-6
    zeros = {"b_query": np.zeros((s.heads, s.d_k)), "b_key": np.zeros((s.kv_heads, s.d_k))}
    for name, field in (("W_q", "w_query"), ("W_k", "w_key"), ("b_q", "b_query"), ("b_k", "b_key")):
        base = getattr(s, field) if getattr(s, field) is not None else zeros[field]
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            numeric[idx] = (loss_from_compute(s.replace(**{field: plus}), targets)
                            - loss_from_compute(s.replace(**{field: minus}), targets)) / (2 * eps)
        np.testing.assert_allclose(grad[name], numeric, rtol=1e-5, atol=1e-8, err_msg=name)


def rope_session(seed):
    s = build_preset("random", parse_assignments(["n=8", "d=8", "d_k=4", "heads=1", f"seed={seed}"])).session
    return s.replace(mask=Mask("causal"), positions=Positions("rope", theta=100.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_previous_token_with_rope_and_trained_biases_within_500_steps(seed):
    s = rope_session(seed)
    assert s.b_query is None and s.b_key is None
    target = target_for(s, "previous-token")
    fit = Fitter(s, {0: target}, train=("q", "k", "biases"), steps=500)
    progress = fit.run()
    assert progress.status == "converged" and progress.step <= 500, progress.message
    fitted = fit.session()
    assert np.abs(compute(fitted).weights[0] - target.matrix).max() < 0.01
    # The biases were added (they started at zero, as absent biases are) and trained.
    assert fitted.b_query.shape == (1, 4) and fitted.b_key.shape == (1, 4)
    assert np.abs(fitted.b_query).max() > 0
    assert fitted.positions == s.positions and fitted.b_value is None and fitted.w_value is s.w_value


def test_biases_alone_can_train_and_heads_without_a_target_keep_zero_biases():
    s = staged_session("rope-half", heads=2, kv_heads=2, mask=Mask("causal"))
    fit = Fitter(s, {1: target_for(s, "self", head=1)}, train=("biases",), steps=50, tolerance=0)
    fit.run()
    fitted = fit.session()
    np.testing.assert_array_equal(fitted.w_query, s.w_query)
    np.testing.assert_array_equal(fitted.w_key, s.w_key)
    np.testing.assert_array_equal(fitted.b_query[0], 0.0)
    np.testing.assert_array_equal(fitted.b_key[0], 0.0)
    assert np.abs(fitted.b_query[1]).max() > 0 and np.abs(fitted.b_key[1]).max() > 0  # RoPE turns b_k by position


def test_existing_biases_are_kept_when_only_the_weights_train():
    s = staged_session(biases=True)
    fitted = Fitter(s, {0: random_target(s)}, steps=5, tolerance=0)
    fitted.run()
    out = fitted.session()
    assert out.b_query is s.b_query and out.b_key is s.b_key and out.b_value is s.b_value


def test_grouped_query_trains_the_shared_kv_head_and_says_which_heads_change():
    s = staged_session(heads=4, kv_heads=2, mask=Mask("causal"), seed=3)
    fit = Fitter(s, {1: target_for(s, "previous-token", head=1)}, steps=500)
    assert fit.notes == ("query heads 0 and 1 share K/V head 0: fitting head 1 trains that K/V head's W_k, "
                         "so the weights of head 0 change too",)
    assert fit.run().status == "converged"
    fitted = fit.session()
    # Head 1's W_q and K/V head 0's W_k moved; the other query heads' W_q and K/V head 1 did not.
    assert not np.array_equal(fitted.w_query[1], s.w_query[1])
    assert not np.array_equal(fitted.w_key[0], s.w_key[0])
    for h in (0, 2, 3):
        np.testing.assert_array_equal(fitted.w_query[h], s.w_query[h])
    np.testing.assert_array_equal(fitted.w_key[1], s.w_key[1])
    before, after = compute(s).weights, compute(fitted).weights
    assert not np.allclose(after[0], before[0])  # head 0 shares the trained K/V head
    np.testing.assert_array_equal(after[2:], before[2:])
    # Training W_q alone touches nothing shared.
    assert Fitter(s, {1: target_for(s, "self", head=1)}, train=("q",)).notes == ()


def test_cross_attention_targets_are_queries_by_source_keys():
    s = build_preset("translate", {}).session
    assert (s.n, s.n_keys) == (3, 3) and s.source is not None
    with pytest.raises(TargetError, match="previous-token needs one sequence"):
        target_for(s, "previous-token")
    with pytest.raises(TargetError, match="window needs one sequence"):
        target_for(s, "window:2")
    wide = s.replace(source=Source(("the", "black", "cat", "."), np.vstack([s.source.embeddings, np.zeros(4)])))
    with pytest.raises(TargetError, match=r"must be 3×4 \(a row per token, a column per source token\), got 3×3"):
        check_target(wide, np.eye(3))
    # Undo the translation: every French word to "the".
    target = target_for(s, "first-token")
    np.testing.assert_array_equal(target.matrix[:, 0], 1.0)
    fit = Fitter(s, {0: target}, steps=500)
    assert fit.run().status == "converged"
    assert np.abs(compute(fit.session()).weights[0] - target.matrix).max() < 0.01


def test_shared_rows_with_absolute_positions_are_not_blamed():
    # Equal embeddings at different positions differ once P is added: not a reason to plateau.
    s = build_preset("random", parse_assignments(["n=6", "d=6", "d_k=3", "heads=1"])).session
    x = np.array(s.embeddings)
    x[3] = x[1]
    plain = s.replace(embeddings=x, mask=Mask("causal"))
    with_positions = plain.replace(positions=Positions("sinusoidal", base=10.0))
    assert "share an embedding" in Fitter(plain, {0: target_for(plain, "previous-token")}, steps=3000).run().message
    progress = Fitter(with_positions, {0: target_for(with_positions, "previous-token")}, steps=3000).run()
    assert "share an embedding" not in progress.message


def test_weights_the_window_shows_are_checked_at_the_first_step_not_at_construction():
    # The window hands over the weights it shows, so that Start does not compute them again
    # on the GUI thread; the fit compares its own with them on its first step instead.
    from attnexplorer.core.fit import FitError

    s = rope_session(0)
    target = target_for(s, "previous-token")
    shown = compute(s).weights
    fit = Fitter(s, {0: target}, shown_weights=shown)
    assert fit.step().step == 1
    wrong = Fitter(s, {0: target}, shown_weights=np.zeros_like(shown))  # constructing does not look
    with pytest.raises(FitError, match="differ from what the window shows"):
        wrong.step()
    kept = wrong.session()  # nothing trained (float32 round trip)
    assert np.allclose(kept.w_query, s.w_query, atol=1e-6) and np.allclose(kept.w_key, s.w_key, atol=1e-6)
