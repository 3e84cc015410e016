"""The rope and translate presets tell the stories their docstrings and the README tell."""

import numpy as np
import pytest

import attnexplorer as ax


def weights(name, **params):
    return ax.compute(ax.build_preset(name, params).session, dtype="float64").weights[0]


def test_rope_is_a_previous_token_head():
    w = weights("rope")
    for i in range(2, 6):
        assert w[i].argmax() == i - 1 and w[i, i - 1] == pytest.approx(0.873, abs=5e-4)
    assert w[1, 0] == pytest.approx(0.932, abs=5e-4)


@pytest.mark.parametrize("offset", [1, 100, 1000])
def test_rope_scores_stay_the_same_under_a_shift(offset):
    s = ax.build_preset("rope").session
    shifted = ax.build_preset("rope", {"offset": offset}).session
    a, b = ax.compute(s, dtype="float64"), ax.compute(shifted, dtype="float64")
    np.testing.assert_allclose(b.scores, a.scores, rtol=1e-9, atol=1e-9)
    assert not np.allclose(b.Q, a.Q)  # the vectors turned; their dot products did not change


def test_rope_off_makes_the_head_blind_to_position():
    w = weights("rope", rope=0)
    for i in range(6):
        np.testing.assert_allclose(w[i, : i + 1], 1.0 / (i + 1), rtol=1e-12)


def test_translate_aligns_across_the_word_order_swap():
    s = ax.build_preset("translate").session
    r = ax.compute(s, dtype="float64")
    assert s.tokens == ("le", "chat", "noir") and r.source_tokens == ("the", "black", "cat")
    w = r.weights[0]
    assert w.shape == (3, 3)
    assert [s.source.tokens[j] for j in w.argmax(axis=1)] == ["the", "cat", "black"]
    assert w[2, 1] == pytest.approx(0.949, abs=5e-4)  # noir → black
    np.testing.assert_allclose(weights("translate", s=0), 1 / 3, rtol=1e-12)
