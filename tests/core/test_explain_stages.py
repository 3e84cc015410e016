"""Explain spells out the stages of a real head with the engine's numbers."""

import numpy as np
import pytest

import attnexplorer as ax
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions


def test_rope_angles_per_pair_and_the_relative_position():
    s = ax.build_preset("rope").session
    r = ax.compute(s, dtype="float64")
    text = ax.explain_cell(r, head=0, query=3, key=2).text
    assert "RoPE turns each pair of q(on) by position 3 × ω and of k(sat) by 2 × ω" in text
    assert "pair 0 (dims 0, 2), ω = 1: q turned 3 rad, k turned 2 rad, difference -1 rad" in text
    assert "pair 1 (dims 1, 3), ω = 0.5: q turned 1.5 rad, k turned 1 rad, difference -0.5 rad" in text
    assert "the bias [3, 3, 0, 0] is added" in text and "weight = 0.873" in text


def test_norm_mean_and_scale_alibi_term_and_shared_heads():
    s = Session(("a", "b", "c"), np.array([[1.0, 3.0], [0.5, 2.0], [2.0, 2.0]]), np.ones((4, 2, 2)),
                np.ones((2, 2, 2)), np.ones((2, 2, 1)), norm=Norm("layer", eps=1e-5),
                positions=Positions("alibi", slopes=[0.5, 0.25, 0.125, 1.0]), mask=Mask("causal"))
    r = ax.compute(s, dtype="float64")
    c = ax.explain_cell(r, head=3, query=2, key=0)
    # Row c = [2, 2]: mean 2, variance 0, so the scale is 1/√eps.
    assert "LayerNorm of c's row: mean 2, scale 1/√(variance + eps) = 1/√(0 + 1e-05) = 316" in c.text
    assert "query head 3 reads K/V head 1, shared by query heads 2, 3" in c.text
    assert "ALiBi −1×|2−0|" in c.text
    assert c.scaled_score == pytest.approx(c.score * r.scale_factor - 2.0)
    rms = s.replace(norm=Norm("rms", eps=1e-6), positions=None)
    r = ax.compute(rms, dtype="float64")
    text = ax.explain_cell(r, head=0, query=1, key=1).text
    assert "RMSNorm of b's row: scale 1/√(mean(row²) + eps) = 1/√(2.12 + 1e-06) = 0.686" in text


def test_cross_attention_names_the_source_key():
    s = ax.build_preset("translate").session
    r = ax.compute(s)
    cell = ax.explain_cell(r, head=0, query=2, key=1)
    assert cell.key_token == "black" and "k(black) from source row 1" in cell.text
    out = ax.explain_output(r, head=0, query=2, top=1)
    assert out.terms[0].token == "black"


def test_a_result_kept_small_explains_alibi_the_same():
    """The window keeps only what its panels read: without position_bias and the n×n
    matrices, the ALiBi term comes from the session and the numbers do not change."""
    rng = np.random.default_rng(2)
    s = Session(tuple("abcde"), rng.normal(size=(5, 3)), rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3, 2)),
                rng.normal(size=(2, 3, 2)), positions=Positions("alibi"), mask=Mask("causal"))
    full = ax.compute(s, dtype="float64")
    small = ax.compute(s, dtype="float64", keep=("Q", "K", "V"))
    assert small.position_bias is None and small.scaled_scores is None
    a, b = ax.explain_cell(full, 1, 4, 1), ax.explain_cell(small, 1, 4, 1)
    assert b.scaled_score == pytest.approx(a.scaled_score, rel=1e-12) and b.weight == pytest.approx(a.weight, rel=1e-12)
    assert "ALiBi" in b.text


def test_norm_statistics_match_torch_layer_and_rms_norm():
    torch = pytest.importorskip("torch")
    from attnexplorer.core.inputs.stages import norm_statistics

    x = np.random.default_rng(3).normal(size=(5, 6)) * 3 + 1
    mean, scale = norm_statistics("layer", x, 1e-5)
    want = torch.nn.functional.layer_norm(torch.tensor(x), (6,), eps=1e-5).numpy()
    assert np.allclose((x - mean[:, None]) * scale[:, None], want, rtol=1e-12, atol=1e-12)
    none, scale = norm_statistics("rms", x, 1e-6)
    want = torch.nn.functional.rms_norm(torch.tensor(x), (6,), eps=1e-6).numpy()
    assert none is None and np.allclose(x * scale[:, None], want, rtol=1e-12, atol=1e-12)


def test_a_negative_mean_is_added_the_diagonal_alibi_term_names_its_slope_and_b_v_is_named():
    s = Session(("a", "b"), np.array([[-1.0, -3.0], [0.5, 2.0]]), np.ones((2, 2, 2)), np.ones((2, 2, 2)),
                np.ones((2, 2, 1)), b_value=np.array([[0.5], [-2.0]]), norm=Norm("layer"),
                positions=Positions("alibi", slopes=[0.5, 0.25]))
    r = ax.compute(s, dtype="float64")
    text = ax.explain_cell(r, head=1, query=0, key=0).text
    assert "X(a) = (row + 2) ×" in text and "− −" not in text
    assert "ALiBi −0.25×|0−0|" in text
    assert "the bias [-2] is added to every value" in ax.explain_output(r, head=1, query=0).text
