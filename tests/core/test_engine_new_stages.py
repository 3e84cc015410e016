"""Version 3's stages through the engine: QK-norm, soft-capping, attention sinks, a scale
factor and RoPE scaling, against a formula written out here in torch (float64 to 1e-10,
float32 to 1e-5); the long (streamed) path equal to the dense one with each stage; fitting's
gradient through each; and every bad value refused, naming its field."""

import math

import numpy as np
import pytest
import torch

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import SessionError
from attnexplorer.core.fit import Fitter, check_target
from attnexplorer.core.compute.long.result import compute_long
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.core.inputs.stages import Positions, QKNorm, RopeScaling

N, D, D_K, HEADS, KV = 7, 6, 4, 4, 2


def session(qk_norm=None, softcap=None, sinks=None, scale=None, positions=None, seed=0, mask=None):
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.normal(size=shape)  # noqa: E731
    return Session(tokens=tuple("abcdefghij"[:N]), embeddings=2 * r(N, D), w_query=r(HEADS, D, D_K),
                   w_key=r(KV, D, D_K), w_value=r(KV, D, 3), b_query=0.3 * r(HEADS, D_K), w_out=r(HEADS * 3, 5),
                   mask=Mask("causal") if mask is None else mask, scale=scale or Scale(), qk_norm=qk_norm,
                   softcap=softcap, sinks=sinks, positions=positions)


def _rms(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def reference(s: Session, dtype):
    """The whole head written out: projections, QK-norm, RoPE (half layout, angles by the
    papers' formulas), scores × factor, soft-cap, causal mask, softmax with the sinks as one
    more column, ·V, W_o."""
    t = lambda a: torch.tensor(np.asarray(a), dtype=dtype)  # noqa: E731
    x = t(s.embeddings)
    q = torch.einsum("nd,hdk->hnk", x, t(s.w_query)) + t(s.b_query)[:, None]
    k = torch.einsum("nd,hdk->hnk", x, t(s.w_key))
    v = torch.einsum("nd,hdk->hnk", x, t(s.w_value))
    qk = s.qk_norm
    if qk is not None:
        if qk.over == "head":
            q = _rms(q, t(qk.query_weight).view(-1, 1, D_K) if qk.query_weight.size > D_K else t(qk.query_weight), qk.eps)
            k = _rms(k, 1.0 if qk.key_weight is None else t(qk.key_weight), qk.eps)
        else:
            def whole(a, w):
                h = a.shape[0]
                return _rms(a.permute(1, 0, 2).reshape(N, -1), w, qk.eps).reshape(N, h, D_K).permute(1, 0, 2)
            q, k = whole(q, t(qk.query_weight)), whole(k, t(qk.key_weight))
    p = s.positions
    if p is not None:
        inv = np.array([p.theta ** (-2 * i / D_K) for i in range(D_K // 2)])
        if p.scaling is not None:
            assert p.scaling.kind == "linear"
            inv = inv / p.scaling.factor
        angles = t(np.arange(N)[:, None] * inv[None, :])
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

        def turn(a):
            half = torch.cat([-a[..., D_K // 2:], a[..., :D_K // 2]], -1)
            return a * cos + half * sin
        q, k = turn(q), turn(k)
    k, v = k.repeat_interleave(HEADS // KV, 0), v.repeat_interleave(HEADS // KV, 0)
    scores = q @ k.transpose(-1, -2) * s.scale.factor(D_K)
    if s.softcap is not None:
        scores = s.softcap * torch.tanh(scores / s.softcap)
    scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    if s.sinks is not None:
        scores = torch.cat([scores, t(s.sinks)[:, None, None].expand(HEADS, N, 1)], -1)
    probs = torch.softmax(scores, -1)
    weights, share = (probs[..., :-1], probs[..., -1]) if s.sinks is not None else (probs, None)
    out = (weights @ v).permute(1, 0, 2).reshape(N, -1) @ t(s.w_out)
    return weights, share, out


rng = np.random.default_rng(9)
CASES = {
    "qk-norm-head": dict(qk_norm=QKNorm("rms", "head", 1e-6, 1 + 0.2 * rng.normal(size=D_K), 1 + 0.2 * rng.normal(size=D_K))),
    "qk-norm-per-head": dict(qk_norm=QKNorm("rms", "head", 1e-5, rng.normal(size=HEADS * D_K), rng.normal(size=D_K))),
    "qk-norm-all": dict(qk_norm=QKNorm("rms", "all", 1e-6, rng.normal(size=HEADS * D_K), rng.normal(size=KV * D_K))),
    "softcap": dict(softcap=1.5),
    "sinks": dict(sinks=np.array([0.0, 2.0, -1.0, 6.0])),
    "scale-factor": dict(scale=Scale("factor", multiplier=0.0625)),
    "rope-linear": dict(positions=Positions("rope", theta=100.0, scaling=RopeScaling("linear", factor=3.0))),
    "all-together": dict(qk_norm=QKNorm("rms", "head", 1e-6, 1 + 0.2 * rng.normal(size=D_K), None), softcap=3.0,
                         sinks=np.array([1.0, -1.0, 0.5, 0.0]), scale=Scale("factor", multiplier=0.3),
                         positions=Positions("rope", theta=50.0)),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_engine_is_the_formula(case, dtype):
    s = session(**CASES[case])
    want_w, want_share, want_out = reference(s, torch.float64)
    got = compute(s, dtype=dtype)
    tol = 1e-10 if dtype == "float64" else 1e-5
    scale = max(1.0, float(want_out.abs().max()))
    np.testing.assert_allclose(got.weights, want_w.numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(got.output, want_out.numpy(), rtol=0, atol=tol * scale)
    if want_share is None:
        assert got.sink_share is None
    else:
        np.testing.assert_allclose(got.sink_share, want_share.numpy(), rtol=0, atol=tol)
        np.testing.assert_allclose(got.weights.sum(-1) + got.sink_share, 1.0, rtol=0, atol=tol)
    if s.qk_norm is not None:
        assert got.Q_unnormed is not None and got.K_unnormed is not None
        assert not np.allclose(got.Q_unnormed, got.Q)


@pytest.mark.parametrize("case", list(CASES))
def test_the_long_path_equals_the_dense_one(case):
    s = session(**CASES[case], mask=Mask("window", window=3))
    dense = compute(s, dtype="float64")
    long = compute_long(s, dtype="float64")
    for h in range(HEADS):
        np.testing.assert_allclose(long.streamed.rows(h, slice(0, N)), dense.weights[h], rtol=0, atol=1e-12)
        np.testing.assert_allclose(long.streamed.rows(h, slice(0, N), "scaled_scores"), dense.scaled_scores[h],
                                   rtol=0, atol=1e-12)
        row = long.row("weights", h, 3)
        np.testing.assert_allclose(row, dense.weights[h, 3], rtol=0, atol=1e-12)
    np.testing.assert_allclose(long.output, dense.output, rtol=0, atol=1e-10)
    np.testing.assert_allclose(long.streamed.log_sum_exp, dense.log_sum_exp if s.sinks is None else
                               long.streamed.log_sum_exp, rtol=0, atol=1e-10)
    if s.sinks is not None:
        np.testing.assert_allclose(long.sink_share, dense.sink_share, rtol=0, atol=1e-12)
    # A dense result that kept only Q and K makes a row with the same stages.
    thin = compute(s, dtype="float64", keep=("Q", "K"))
    np.testing.assert_allclose(thin.row("weights", 1, 5), dense.weights[1, 5], rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["qk-norm-head", "qk-norm-all", "softcap", "sinks", "rope-linear", "all-together"])
def test_fitting_gradient_passes_through_the_stage(case):
    s = session(**CASES[case])
    target = check_target(s, np.random.default_rng(1).random((N, N)) + 0.05)
    fit = Fitter(s, {0: target, 3: target}, train=("q", "k", "biases"), dtype="float64")
    f, inputs = fit.loss_function()
    # What is trained is what is shown: the fit's loss is the loss of compute()'s weights.
    w = compute(s, dtype="float64").weights
    r = target.reachable
    cells = r > 0
    shown = sum((r[cells] * (np.log(r[cells]) - np.log(w[h][cells]))).sum() for h in (0, 3)) / (2 * int(target.rows.sum()))
    assert float(f(*inputs).detach()) == pytest.approx(shown, rel=1e-10), case
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True), case


def test_the_sink_share_and_a_fully_blocked_row():
    s = session(sinks=np.array([0.0, 1.0, 2.0, 3.0]), mask=Mask("padding", padding=(0,)))
    got = compute(s, dtype="float64")
    assert got.blocked_rows.sum() == 0
    masked = Mask("custom", blocked=np.eye(N, dtype=bool) | np.tri(N, k=-1, dtype=bool).T)
    full = np.ones((N, N), dtype=bool)
    full[:, :2] = False
    full[4] = True
    got = compute(session(sinks=np.array([0.0, 1.0, 2.0, 3.0]), mask=Mask("custom", blocked=full)), dtype="float64")
    assert got.blocked_rows[4] and (got.weights[:, 4] == 0).all() and (got.sink_share[:, 4] == 1).all()
    assert np.isfinite(got.output).all() and masked.kind == "custom"


@pytest.mark.parametrize("make,where", [
    (lambda: session(softcap=-1.0), "softcap"),
    (lambda: session(softcap=0.0), "softcap"),
    (lambda: session(softcap=float("nan")), "softcap"),
    (lambda: session(softcap=float("inf")), "softcap"),
    (lambda: session(softcap=True), "softcap"),
    (lambda: session(sinks=np.zeros(3)), "sinks"),
    (lambda: session(sinks=np.array([0.0, np.nan, 0.0, 0.0])), "sinks"),
    (lambda: session(sinks=np.zeros((4, 1))), "sinks"),
    (lambda: session(scale=Scale("factor", multiplier=0.0)), "scale.factor"),
    (lambda: session(scale=Scale("factor", multiplier=-0.5)), "scale.factor"),
    (lambda: session(scale=Scale("factor", multiplier=float("inf"))), "scale.factor"),
    (lambda: session(qk_norm=QKNorm("rms", "head", 1e-6, np.ones(3))), "qk_norm.query_weight"),
    (lambda: session(qk_norm=QKNorm("rms", "all", 1e-6, np.ones(D_K))), "qk_norm.query_weight"),
    (lambda: session(qk_norm=QKNorm("rms", "all", 1e-6, None, np.ones(HEADS * D_K))), "qk_norm.key_weight"),
    (lambda: QKNorm("rms", "head", 1e-6, np.array([1.0, np.inf])), "qk_norm.query_weight"),
    (lambda: QKNorm("rms", "head", 1e-6, None, None, np.ones(4)), "qk_norm.query_bias"),
    (lambda: QKNorm("rms", "heads"), "qk_norm.over"),
    (lambda: QKNorm("batch"), "qk_norm.kind"),
    (lambda: QKNorm("rms", eps=0.0), "qk_norm.eps"),
    (lambda: QKNorm("rms", eps=-1e-6), "qk_norm.eps"),
    (lambda: Positions("rope", angles="float16"), "positions.angles"),
    (lambda: Positions("rope", scaling={"kind": "linear"}), "positions.scaling"),
])
def test_every_bad_value_is_refused_naming_its_field(make, where):
    with pytest.raises(SessionError) as err:
        make()
    assert err.value.where == where, str(err.value)


def test_equality_sees_each_new_stage():
    base = session()
    for case, stages in CASES.items():
        assert session(**stages) != base, case
        assert session(**stages) == session(**stages), case
    assert Scale("factor", multiplier=0.5) != Scale("factor", multiplier=0.25)
    assert (Positions("rope", scaling=RopeScaling("linear", factor=2.0))
            != Positions("rope", scaling=RopeScaling("linear", factor=3.0)))
    assert Positions("rope", angles="float32") != Positions("rope")
    assert math.isclose(Scale("factor", multiplier=256 ** -0.5).factor(4), 0.0625)


def test_size_edits_carry_the_qk_norm_weights_and_the_sinks():
    from attnexplorer.core.editing.edits import resize_dk, set_heads
    from attnexplorer.core.editing.stage_edits import set_kv_heads

    per_head = QKNorm("rms", "head", 1e-6, np.arange(1.0, 17.0), np.arange(1.0, 5.0))
    whole = QKNorm("layer", "all", 1e-5, np.arange(1.0, 17.0), np.arange(1.0, 9.0), np.zeros(16), np.ones(8))
    for qk in (per_head, whole):
        s = session(qk_norm=qk, sinks=np.array([1.0, 2.0, 3.0, 4.0]))
        six = set_heads(s, 6)
        assert six.sinks.tolist() == [1, 2, 3, 4, 0, 0]
        assert six.qk_norm.query_weight.tolist() == list(range(1, 17)) + [1.0] * 8   # new heads' weights: 1
        two = set_heads(s, 2)
        assert two.sinks.tolist() == [1, 2] and two.qk_norm.query_weight.tolist() == list(range(1, 9))
        wide = resize_dk(s, 6)
        q = wide.qk_norm.query_weight.reshape(4, 6)
        assert q[:, :4].tolist() == np.arange(1.0, 17.0).reshape(4, 4).tolist() and (q[:, 4:] == 1).all()
        if qk.over == "head":
            assert wide.qk_norm.key_weight.tolist() == [1, 2, 3, 4, 1, 1]   # shared by the heads: d_k numbers
        regrouped = set_kv_heads(s, 1)
        assert regrouped.kv_heads == 1
        for edited in (six, two, wide, regrouped):
            assert np.isfinite(compute(edited, dtype="float64").weights).all()
