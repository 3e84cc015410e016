"""explain_cell / explain_output: their numbers are the engine's, their text is readable."""

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.reading.explain import explain_cell, explain_output
from attnexplorer.core.numbers.number_text import fmt, fmt_vector
from attnexplorer.core.inputs.session import Mask, Scale, Session

# With W_q = W_k = I the query and key vectors are the embeddings themselves, so the
# pronoun walkthrough's printed vectors can be typed in directly.
TOKENS = ("dog", "ball", "she", "ran")
X = np.array([[2.88, 3.06, 1.89], [2.73, 0.81, 1.52], [2.64, 1.46, 0.94], [0.1, -0.2, 0.3]])


def walk_session(**kw):
    eye = np.eye(3)[None]
    w_value = np.array([[[1.0, 0.0], [0.0, 2.0], [0.5, -1.0]]])
    return Session(tokens=TOKENS, embeddings=X, w_query=eye, w_key=eye, w_value=w_value, **kw)


def random_session(seed=3, **kw):
    rng = np.random.default_rng(seed)
    return Session(tokens=tuple("abcdef"), embeddings=rng.normal(size=(6, 4)), w_query=rng.normal(size=(2, 4, 3)),
                   w_key=rng.normal(size=(2, 4, 3)), w_value=rng.normal(size=(2, 4, 5)), **kw)


def test_walkthrough_line():
    s = walk_session()
    r = compute(s, dtype="float64")
    e = explain_cell(r, 0, 2, 0)
    w = fmt(r.weights[0, 2, 0])
    assert e.lines[0] == f"score(she, dog) = 2.64×2.88 + 1.46×3.06 + 0.94×1.89 = 13.85; ÷√3 = 7.99; weight = {w}"
    assert e.score == pytest.approx(2.64 * 2.88 + 1.46 * 3.06 + 0.94 * 1.89)
    assert "exp(scaled − row max)" in e.text


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask", [Mask(), Mask("causal"), Mask("window", window=2), Mask("padding", padding=(0, 4))])
@pytest.mark.parametrize("scale", [Scale(), Scale("none"), Scale("temperature", 3.0)])
def test_cell_numbers_are_the_results(dtype, mask, scale):
    s = random_session(mask=mask, scale=scale)
    r = compute(s, dtype=dtype)
    tol = 1e-12 if dtype == "float64" else 1e-5
    for h, i, j in [(0, 0, 0), (1, 3, 1), (1, 5, 4), (0, 2, 5)]:
        e = explain_cell(r, h, i, j)
        np.testing.assert_array_equal(e.q, r.Q[h, i])
        np.testing.assert_array_equal(e.k, r.K[h, j])
        np.testing.assert_allclose(e.products, r.Q[h, i].astype(float) * r.K[h, j].astype(float), rtol=1e-15)
        assert e.products.sum() == pytest.approx(r.scores[h, i, j], rel=tol, abs=tol)
        assert e.score == float(r.scores[h, i, j]) and e.scaled_score == float(r.scaled_scores[h, i, j])
        assert e.scale_factor == r.scale_factor
        assert e.masked == bool(r.mask[i, j]) and e.row_blocked == bool(r.blocked_rows[i])
        assert e.weight == float(r.weights[h, i, j])
        visible = ~r.mask[i]
        assert e.row_max == pytest.approx(r.scaled_scores[h, i][visible].max())
        assert e.denominator == pytest.approx(np.exp(r.scaled_scores[h, i][visible].astype(float) - e.row_max).sum(), rel=1e-12)
        assert e.exp_shifted / e.denominator == pytest.approx(e.weight, rel=tol, abs=tol)
        if e.masked:
            assert e.exp_shifted == 0 and e.weight == 0 and "blocked" in e.text
        assert (e.query_token, e.key_token) == (s.tokens[i], s.tokens[j])


def test_scale_text():
    s = random_session(scale=Scale("temperature", 0.5))
    e = explain_cell(compute(s), 0, 1, 1)
    assert "÷τ (τ = 0.5)" in e.lines[0] and e.scale_text == "÷τ (τ = 0.5)"
    s = random_session(scale=Scale("none"))
    assert "no scaling" in explain_cell(compute(s), 0, 1, 1).text


def test_long_vectors_are_cut_in_text_but_kept_in_numbers():
    rng = np.random.default_rng(0)
    s = Session(tokens=("a", "b"), embeddings=rng.normal(size=(2, 20)), w_query=np.eye(20)[None], w_key=np.eye(20)[None],
                w_value=np.eye(20)[None])
    r = compute(s)
    e = explain_cell(r, 0, 0, 1)
    assert e.q.shape == (20,) and "(12 more terms)" in e.lines[0]
    o = explain_output(r, 0, 0)
    assert "(12 more)" in o.lines[-1]


def test_output_terms_sorted_and_summing_to_the_output():
    s = random_session(mask=Mask("causal"))
    r = compute(s, dtype="float64")
    o = explain_output(r, 1, 4)
    assert [t.key for t in o.terms] == sorted(range(5), key=lambda j: -r.weights[1, 4, j])
    for t in o.terms:
        assert t.weight == r.weights[1, 4, t.key]
        np.testing.assert_array_equal(t.value, r.V[1, t.key])
        np.testing.assert_allclose(t.contribution, t.weight * r.V[1, t.key], rtol=1e-15)
    np.testing.assert_allclose(sum(t.contribution for t in o.terms), r.head_outputs[1, 4], rtol=1e-12)
    np.testing.assert_array_equal(o.output, r.head_outputs[1, 4])
    first = o.terms[0]
    assert o.lines[0].startswith(f"out(e) = {fmt(first.weight)} × v({first.token}) + ")
    assert o.omitted == 0 and not o.blocked


def test_output_top_cuts_and_reports_the_rest():
    s = walk_session()
    r = compute(s, dtype="float64")
    o = explain_output(r, 0, 2, top=2)
    assert [t.token for t in o.terms] == ["dog", "she"]  # q(she) points at dog, then at itself (9.98 > 9.8 for ball)
    assert o.omitted == 2
    assert o.omitted_weight == pytest.approx(r.weights[0, 2, [1, 3]].sum())
    assert o.lines[0] == (f"out(she) = {fmt(r.weights[0, 2, 0])} × v(dog) + {fmt(r.weights[0, 2, 2])} × v(she) + "
                          f"… (2 more, total weight {fmt(o.omitted_weight)})")
    assert o.lines[-1].startswith(f"= {fmt_vector(r.head_outputs[0, 2])}")


def test_fully_blocked_row_attends_to_nothing():
    blocked = np.zeros((4, 4), dtype=bool)
    blocked[1] = True
    s = walk_session(mask=Mask("custom", blocked=blocked))
    r = compute(s)
    o = explain_output(r, 0, 1)
    assert o.blocked and o.terms == () and not o.output.any()
    assert "attends to nothing" in o.text and "= [0, 0]" in o.text
    e = explain_cell(r, 0, 1, 2)
    assert e.row_blocked and e.weight == 0 and e.denominator == 0 and "attends to nothing" in e.text


@pytest.mark.parametrize("call,match", [
    (lambda s, r: explain_cell(r, 1, 0, 0), "head 1 is outside 0..0"),
    (lambda s, r: explain_cell(r, 0, 4, 0), "query 4 is outside 0..3"),
    (lambda s, r: explain_cell(r, 0, 0, -1), "key -1 is outside"),
    (lambda s, r: explain_output(r, 0, True), "query True"),
    (lambda s, r: explain_output(r, 0, 0, top=0), "top must be"),
])
def test_bad_indices(call, match):
    s = walk_session()
    with pytest.raises(AttnExplorerError, match=match):
        call(s, compute(s))


def test_needs_the_intermediates():
    s = walk_session()
    r = compute(s, keep=("weights",))
    with pytest.raises(AttnExplorerError, match="computed without Q, K"):
        explain_cell(r, 0, 0, 0)
    with pytest.raises(AttnExplorerError, match="computed without V"):
        explain_output(r, 0, 0)



def test_the_mask_and_scale_named_are_those_of_the_result_session():
    # The text reads the session the result was computed from, not some other current one.
    s = walk_session().replace(mask=Mask("causal"), scale=Scale("none"))
    r = compute(s)
    e = explain_cell(r, 0, 0, 1)
    assert r.session is s and "causal mask" in e.text and "no scaling" in e.text


@pytest.mark.parametrize("x,text", [
    (13.8474, "13.85"), (7.9948, "7.99"), (0.88312, "0.883"), (0.087, "0.087"), (2.6, "2.6"), (1.0, "1"),
    (0.0, "0"), (-0.0, "0"), (-1.26, "-1.26"), (123.456, "123.5"), (4321.2, "4321"), (123456.0, "1.23e+05"),
    (0.000123, "0.000123"), (1.234e-6, "1.23e-06"),
])
def test_number_format(x, text):
    assert fmt(x) == text


@pytest.mark.parametrize("mask", [Mask(), Mask("causal"), Mask("padding", padding=(0, 1, 2, 3, 4))])
def test_explains_from_q_k_v_alone_as_from_the_full_result(mask):
    """A big session's window keeps only Q, K, V for the Explain panel: the rows it needs are
    then worked out from them, and must tell the same story as the full result."""
    s = random_session().replace(mask=mask)
    full = compute(s, dtype="float64")
    lean = compute(s, dtype="float64", keep=("Q", "K", "V"))
    for i in range(s.n):
        for j in (0, s.n - 1):
            a, b = explain_cell(full, 1, i, j), explain_cell(lean, 1, i, j)
            assert a.lines == b.lines
            np.testing.assert_allclose([b.score, b.scaled_score, b.weight, b.denominator],
                                       [a.score, a.scaled_score, a.weight, a.denominator], rtol=1e-12, atol=1e-15)
        oa, ob = explain_output(full, 1, i), explain_output(lean, 1, i)
        assert oa.lines == ob.lines
        np.testing.assert_allclose(ob.output, oa.output, rtol=1e-12, atol=1e-15)


def test_tiny_temperature_with_a_custom_mask_warns_of_nothing_and_quotes_tokens():
    # "she" may not see "dog", whose score is far above the others: at τ = 0.0001 the blocked
    # key's exp(scaled − row max) would overflow if it were computed (warnings are errors here).
    blocked = np.zeros((4, 4), dtype=bool)
    blocked[2, 0] = True
    s = walk_session(mask=Mask("custom", blocked=blocked), scale=Scale("temperature", temperature=0.0001))
    r = compute(s, dtype="float64")
    e = explain_cell(r, 0, 2, 0)
    assert e.weight == 0 and e.exp_shifted == 0
    assert "'dog' is blocked for 'she' by the custom mask" in e.text
    for key in range(4):
        explain_cell(r, 0, 2, key)
    explain_output(r, 0, 2)
