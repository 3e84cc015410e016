"""Explain with version 3's stages: the soft-capped score, the sink in the softmax's sum and
its share, QK-norm's scale of q and k, RoPE's scaled frequencies; the numbers shown are the
engine's and add up."""

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.reading.explain import explain_cell, explain_output
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.core.inputs.stages import Positions, QKNorm, RopeScaling, rope_angles


def session(**stages):
    rng = np.random.default_rng(3)
    r = lambda *shape: rng.normal(size=shape)  # noqa: E731
    return Session(tokens=("the", "cat", "sat", "on", "it"), embeddings=r(5, 4), w_query=r(2, 4, 4),
                   w_key=r(2, 4, 4), w_value=r(2, 4, 3), mask=Mask("causal"), **stages)


def test_softcap_and_sinks_are_spelled_and_add_up():
    s = session(softcap=1.5, sinks=np.array([0.5, 2.0]), scale=Scale("factor", multiplier=0.25))
    result = compute(s, dtype="float64")
    e = explain_cell(result, 1, 3, 1)
    assert e.weight == pytest.approx(e.exp_shifted / e.denominator, rel=1e-12)
    assert e.sink_share == pytest.approx(float(result.sink_share[1, 3]), rel=1e-12)
    assert e.weight == pytest.approx(float(result.weights[1, 3, 1]), rel=1e-12)
    capped = 1.5 * np.tanh(e.score * 0.25 / 1.5)
    assert e.scaled_score == pytest.approx(capped, rel=1e-12)
    assert "soft-capped at 1.5" in e.text and "1.5·tanh(" in e.text
    assert "× factor 0.25" not in e.lines[0] and "× 0.25, soft-capped at 1.5" in e.lines[0]
    assert "the sink's exp(2 − " in e.text and "not 1" in e.text
    assert f"1 − {e.sink_share:.3g}" in e.text
    out = explain_output(result, 1, 3)
    assert "not 1: head 1's sink takes the rest" in out.text
    assert sum(t.weight for t in out.terms) == pytest.approx(1 - e.sink_share, rel=1e-12)


def test_a_scale_factor_is_named():
    e = explain_cell(compute(session(scale=Scale("factor", multiplier=0.0625)), dtype="float64"), 0, 2, 1)
    assert e.scale_factor == 0.0625 and "× factor 0.0625" in e.text
    assert e.scaled_score == pytest.approx(e.score * 0.0625, rel=1e-12)


@pytest.mark.parametrize("over", ["head", "all"])
def test_qk_norm_shows_q_and_k_before_and_after_with_the_scale(over):
    qk = QKNorm("rms", over, 1e-6, np.full(4 if over == "head" else 8, 2.0), None)
    result = compute(session(qk_norm=qk), dtype="float64")
    e = explain_cell(result, 1, 2, 0)
    line = next(x for x in e.lines if x.startswith("QK-norm") and "q(sat)" in x)
    before = result.Q_unnormed[1, 2] if over == "head" else result.Q_unnormed[:, 2].reshape(-1)
    scale = 1 / np.sqrt((before ** 2).mean() + 1e-6)
    assert f"× {scale:.3g} × weight" in line
    np.testing.assert_allclose(result.Q[1, 2], result.Q_unnormed[1, 2] * scale * 2.0, rtol=1e-12)
    assert any(x.startswith("QK-norm") and "k(the)" in x for x in e.lines)
    assert ("whole projection" in line) == (over == "all")


def test_rope_scaling_names_the_scaled_frequencies_and_yarns_factor():
    scaling = RopeScaling("yarn", factor=4.0, original_max_position_embeddings=2)
    s = session(positions=Positions("rope", theta=100.0, dims=2, scaling=scaling))
    e = explain_cell(compute(s, dtype="float64"), 0, 4, 1)
    omega = rope_angles(1, 2, 100.0, 1, scaling)[0, 0]
    assert f"ω = {omega:.3g}" in e.text
    assert "yarn ×4" in e.text and "YaRN multiplies cos and sin by 1.14" in e.text
    assert "partial rotary: dims 2 … 3 pass unturned" in e.text
