"""attend(): the one attention function, run with autograd on, agrees with compute() and differentiates."""

import numpy as np
import pytest
import torch

from attnexplorer.core.kernel.attention import AttentionInputs, attend, join_projections
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.session import Mask, Session


def _session(mask, n=5, d=4, heads=2, d_k=3, d_v=2, seed=1):
    rng = np.random.default_rng(seed)
    return Session(tokens=tuple(f"w{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                   w_query=rng.normal(size=(heads, d, d_k)), w_key=rng.normal(size=(heads, d, d_k)),
                   w_value=rng.normal(size=(heads, d, d_v)), w_out=rng.normal(size=(heads * d_v, 3)), mask=mask)


def _grad_inputs(s):
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    wq = t(s.w_query).requires_grad_()
    wk = t(s.w_key).requires_grad_()
    m = s.mask.matrix(s.n)
    rows = m.all(axis=1)
    inputs = AttentionInputs(x=t(s.embeddings), w_qkv=join_projections(wq, wk, t(s.w_value)), heads=s.heads,
                             d_k=s.d_k, d_v=s.d_v, factor=s.scale.factor(s.d_k),
                             mask=torch.tensor(m) if m.any() else None,
                             blocked_rows=torch.tensor(rows) if rows.any() else None, w_out=t(s.w_out))
    return inputs, wq, wk


# The last mask blocks every key of query 2: its row is 0 and must give a zero, not NaN, gradient.
@pytest.mark.parametrize("mask", [Mask(), Mask("causal"), Mask("custom", blocked=np.eye(5, dtype=bool) | (np.arange(5) == 2)[:, None])])
def test_attend_with_autograd_is_what_compute_shows(mask):
    s = _session(mask)
    shown = compute(s, dtype="float64")
    inputs, wq, wk = _grad_inputs(s)
    out = attend(inputs)
    for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "output"):
        np.testing.assert_allclose(out[name].detach().numpy(), getattr(shown, name), rtol=1e-12, atol=1e-14)
    (out["weights"] * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(wq.grad).all() and torch.isfinite(wk.grad).all()
    assert wq.grad.abs().sum() > 0 and wk.grad.abs().sum() > 0


def test_compute_leaves_no_autograd_state_and_attend_keeps_inputs_intact():
    s = _session(Mask("causal"))
    inputs, wq, _ = _grad_inputs(s)
    before = inputs.w_qkv.detach().clone()
    attend(inputs, wanted=frozenset({"weights"}))  # nothing may be overwritten under autograd
    assert torch.equal(inputs.w_qkv.detach(), before)
    r = compute(s, dtype="float64")
    assert not r.weights.flags.writeable
