"""The four presets: the walkthroughs' printed numbers, the designed pronoun geometry,
the sine smoother's behaviour, and the parameter handling every preset shares."""

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import PresetError
from attnexplorer.core.inputs.presets import (
    build_preset,
    describe_presets,
    get_preset,
    list_presets,
    parse_assignments,
    reference_curves,
)
from attnexplorer.core.inputs.presets import pronoun, sine
from attnexplorer.core.inputs.session import Mask, Scale
from walkthroughs import DESSERT_OUTPUT, DESSERT_SCORES_2, DESSERT_WEIGHTS_2, DESSERT_X_2

NAMES = ["pronoun", "dessert", "sine", "random", "rope", "translate"]


# -- dessert (walkthrough 001) ---------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dessert_reproduces_the_printed_numbers(dtype):
    s = build_preset("dessert").session
    assert s.tokens == ("Life", "is", "short", "eat", "dessert", "first")
    assert (s.d, s.d_k, s.d_v, s.heads) == (3, 2, 4, 1)
    assert s.mask == Mask("none") and s.scale == Scale("inv_sqrt_dk")
    r = compute(s, dtype=dtype)
    assert r.scale_factor == pytest.approx(1 / math.sqrt(2))
    np.testing.assert_allclose(s.embeddings[1], DESSERT_X_2, atol=2e-4)
    np.testing.assert_allclose(r.scores[0, 1], DESSERT_SCORES_2, atol=2e-4)
    assert r.scores[0, 1, 4] == pytest.approx(1.2903, abs=2e-4)  # omega_24
    np.testing.assert_allclose(r.weights[0, 1], DESSERT_WEIGHTS_2, atol=2e-4)
    np.testing.assert_allclose(r.output[1], [0.5313, 1.3607, 0.7891, 1.3110], atol=2e-4)
    np.testing.assert_allclose(r.output, DESSERT_OUTPUT, atol=2e-4)


def _dessert_weights_by_walkthrough_code(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [torch.rand(3, 2), torch.rand(3, 2), torch.rand(3, 4)]


@pytest.mark.parametrize("seed", [123, 7])
def test_dessert_weights_are_the_walkthroughs_draws(seed):
    s = build_preset("dessert", {"seed": seed}).session
    wq, wk, wv = _dessert_weights_by_walkthrough_code(seed)
    np.testing.assert_array_equal(s.w_query[0], wq.numpy())
    np.testing.assert_array_equal(s.w_key[0], wk.numpy())
    np.testing.assert_array_equal(s.w_value[0], wv.numpy())


def test_dessert_seed_parameter_changes_the_start():
    assert build_preset("dessert", {"seed": "7"}).session != build_preset("dessert").session


# -- pronoun (walkthrough 000) ---------------------------------------------------------

SHE, DOG, BALL, WAS, HAPPY = 6, 1, 4, 7, 8


@pytest.fixture(scope="module")
def pronoun_result():
    s = build_preset("pronoun").session
    return s, compute(s, dtype="float64")


def test_pronoun_shape_mask_and_scale(pronoun_result):
    s, r = pronoun_result
    assert s.tokens == tuple("The dog fetched the ball and she was happy".split())
    assert (s.n, s.d, s.d_k, s.d_v, s.heads) == (9, 2, 3, 3, 1)
    assert s.mask == Mask("causal")
    assert r.scale_factor == pytest.approx(1 / math.sqrt(3))


def test_pronoun_printed_vectors_hold_to_two_decimals(pronoun_result):
    _, r = pronoun_result
    np.testing.assert_array_equal(np.round(r.Q[0, SHE], 2), [2.64, 1.46, 0.94])
    np.testing.assert_array_equal(np.round(r.K[0, DOG], 2), [2.88, 3.06, 1.89])
    np.testing.assert_array_equal(np.round(r.K[0, BALL], 2), [2.73, 0.81, 1.52])


def test_pronoun_printed_scores_and_weights(pronoun_result):
    _, r = pronoun_result
    assert round(float(r.scores[0, SHE, DOG]), 1) == 13.8
    assert round(float(r.scores[0, SHE, BALL]), 1) == 9.8
    assert round(float(r.weights[0, SHE, DOG]), 3) == 0.883
    assert round(float(r.weights[0, SHE, BALL]), 3) == 0.087
    # The float32 engine (the window's default) prints the same.
    r32 = compute(build_preset("pronoun").session, dtype="float32")
    assert round(float(r32.weights[0, SHE, DOG]), 3) == 0.883
    assert round(float(r32.weights[0, SHE, BALL]), 3) == 0.087


def test_pronoun_causal_mask_story(pronoun_result):
    s, r = pronoun_result
    expected_first_row = np.zeros(9)
    expected_first_row[0] = 1.0
    np.testing.assert_allclose(r.weights[0, 0], expected_first_row, atol=1e-12)
    assert r.weights[0, SHE, WAS] == 0.0 and r.weights[0, SHE, HAPPY] == 0.0
    unmasked = compute(s.replace(mask=Mask("none")), dtype="float64")
    assert unmasked.weights[0, SHE, WAS] < 0.01
    assert unmasked.weights[0, SHE, HAPPY] < 0.01
    # Lifting the mask barely moves she's attention: the later words were already tiny.
    assert abs(unmasked.weights[0, SHE, DOG] - r.weights[0, SHE, DOG]) < 0.01


def test_pronoun_geometry_she_queries_toward_the_animate_noun(pronoun_result):
    s, r = pronoun_result
    x = s.embeddings
    # score(she, j) = x_j · (W_k q_she): she's query seen in the embedding plane.
    direction = s.w_key[0] @ r.Q[0, SHE]
    np.testing.assert_allclose(x @ direction, r.scores[0, SHE], atol=1e-10)

    def angle(u, v):
        return math.degrees(math.acos(u @ v / np.linalg.norm(u) / np.linalg.norm(v)))

    assert angle(direction, x[DOG]) < 5.0
    assert angle(direction, x[BALL]) > 25.0
    assert int(np.argmax(r.scores[0, SHE])) == DOG
    # Axis 2 reads "is alive": dog and she high, ball and the function words low.
    alive = x[:, 1]
    assert min(alive[DOG], alive[SHE]) > 0.5 > alive[BALL]
    assert all(alive[i] < 0 for i in (0, 3, 5))  # The, the, and
    # Axis 1 reads "is a thing": the two nouns lead.
    assert set(np.argsort(x[:, 0])[-2:]) == {DOG, BALL}
    # she's output is mostly dog's value.
    out = r.output[SHE]
    assert np.linalg.norm(out - r.V[0, DOG]) < np.linalg.norm(out - r.V[0, BALL])


def test_pronoun_embed_keeps_designed_rows_and_places_new_words_near_the_origin():
    rows = pronoun.embed(("she", "cat", "dog", "cat"), 2, {})
    np.testing.assert_array_equal(rows[0], pronoun.EMBEDDINGS["she"])
    np.testing.assert_array_equal(rows[2], pronoun.EMBEDDINGS["dog"])
    np.testing.assert_array_equal(rows[1], rows[3])
    assert np.abs(rows[1]).max() <= 0.15
    np.testing.assert_array_equal(rows[1], pronoun.embed(("cat",), 2, {})[0])  # same in every call
    assert pronoun.embed(("dog", "zebra"), 4, {}).shape == (2, 4)


# -- sine (walkthrough 003) ------------------------------------------------------------

def _rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_sine_scores_are_minus_squared_distance():
    built = build_preset("sine")
    s = built.session
    assert (s.d, s.d_k, s.d_v, s.heads, s.n) == (4, 3, 1, 1, 60)
    assert s.mask == Mask("none") and s.scale == Scale("temperature", 0.004)
    r = compute(s, dtype="float64")
    p = reference_curves(s)["position"]
    np.testing.assert_allclose(r.scores[0], -((p[:, None] - p[None, :]) ** 2), rtol=0, atol=1e-14)
    assert r.scale_factor == pytest.approx(1 / 0.004)
    # Embeddings are [noisy, p, p², 1] and the value is the noisy sample.
    np.testing.assert_array_equal(s.embeddings[:, 0], sine.samples(60, s.preset.params)["noisy"])
    np.testing.assert_array_equal(s.embeddings[:, 1], p)
    np.testing.assert_allclose(s.embeddings[:, 2], p**2)
    np.testing.assert_array_equal(s.embeddings[:, 3], 1.0)
    np.testing.assert_array_equal(r.V[0, :, 0], s.embeddings[:, 0])


def test_sine_reference_curves():
    built = build_preset("sine", {"N": 100})
    sig = reference_curves(built.session)
    assert set(sig) == {"position", "clean"}
    assert sig["position"][0] == 0.0 and sig["position"][-1] == 1.0
    np.testing.assert_allclose(sig["clean"], np.sin(2 * np.pi * sig["position"]))
    noisy = built.session.embeddings[:, 0]
    assert 0.2 < np.std(noisy - sig["clean"]) < 0.4  # sigma = 0.3
    assert built.session.tokens[:3] == ("x0", "x1", "x2") and built.session.n == 100
    quiet = build_preset("sine", {"sigma": 0}).session
    np.testing.assert_array_equal(quiet.embeddings[:, 0], reference_curves(quiet)["clean"])


def test_reference_curves_are_a_function_of_the_session_alone():
    s = build_preset("sine", {"N": 20}).session
    curves = reference_curves(s)
    assert reference_curves(s) is curves  # cached
    assert not curves["clean"].flags.writeable
    # A session that comes back some other way (a file, an undo) gets the same curves.
    from attnexplorer.io.session_file import session_from_dict, session_to_dict

    again = session_from_dict(session_to_dict(s))
    assert again is not s
    np.testing.assert_array_equal(reference_curves(again)["clean"], curves["clean"])
    # Samples keep their place on the curve when tokens move or are deleted.
    moved = s.replace(tokens=s.tokens[::-1], embeddings=s.embeddings[::-1])
    np.testing.assert_array_equal(reference_curves(moved)["position"], curves["position"][::-1])
    # More samples continue the sine; a token that is no sample means no curves at all.
    longer = build_preset("sine", {"N": 20}).session
    assert len(reference_curves(longer.replace(tokens=longer.tokens[:-1] + ("x25",)))["clean"]) == 20
    assert reference_curves(s.replace(tokens=("hello",) + s.tokens[1:])) == {}
    assert reference_curves(build_preset("pronoun").session) == {}
    assert reference_curves(s.replace(preset=None)) == {}


def test_sine_tiny_tau_is_near_identity():
    built = build_preset("sine", {"tau": 1e-6})
    r = compute(built.session, dtype="float64")
    np.testing.assert_allclose(r.weights[0], np.eye(60), atol=1e-9)
    np.testing.assert_allclose(r.output[:, 0], built.session.embeddings[:, 0], atol=1e-9)


def test_sine_huge_tau_is_near_uniform():
    built = build_preset("sine", {"tau": 1000})
    r = compute(built.session, dtype="float64")
    np.testing.assert_allclose(r.weights[0], 1 / 60, rtol=2e-3)
    noisy = built.session.embeddings[:, 0]
    np.testing.assert_allclose(r.output[:, 0], noisy.mean(), atol=2e-3 * np.abs(noisy).max())


def test_sine_default_tau_smooths():
    built = build_preset("sine")
    r = compute(built.session)  # the window's default float32
    clean, noisy = reference_curves(built.session)["clean"], built.session.embeddings[:, 0]
    assert _rmse(r.output[:, 0], clean) < 0.5 * _rmse(noisy, clean)


def test_sine_default_tau_smooths_for_typical_noise_draws():
    ratios = []
    for seed in range(20):
        built = build_preset("sine", {"seed": seed})
        r = compute(built.session, dtype="float64")
        clean, noisy = reference_curves(built.session)["clean"], built.session.embeddings[:, 0]
        ratios.append(_rmse(r.output[:, 0], clean) / _rmse(noisy, clean))
    assert np.mean(ratios) < 0.5
    assert max(ratios) < 0.8


def test_sine_embed_continues_the_signal_for_added_tokens():
    params = {"N": 40, "sigma": 0.3, "tau": 0.004, "seed": 5}
    built = build_preset("sine", params)
    longer = sine.embed(sine.tokens(45), 4, params)
    np.testing.assert_array_equal(longer[:40], built.session.embeddings)
    assert longer[44, 1] == pytest.approx(44 / 39)  # same spacing, beyond p = 1
    assert sine.embed(sine.tokens(3), 6, params).shape == (3, 6)
    np.testing.assert_array_equal(sine.embed(sine.tokens(3), 6, params)[:, 4:], 0.0)


# -- random ----------------------------------------------------------------------------

def test_random_shapes_follow_parameters():
    s = build_preset("random", {"n": 7, "d": 5, "d_k": 2, "d_v": 4, "heads": 3, "seed": 1}).session
    assert (s.n, s.d, s.d_k, s.d_v, s.heads) == (7, 5, 2, 4, 3)
    assert s.tokens == tuple(f"t{i}" for i in range(7))
    bound = 1 / math.sqrt(5)
    for w in (s.w_query, s.w_key, s.w_value):
        assert np.abs(w).max() <= bound
    r = compute(s)
    assert r.output.shape == (7, 12)


def test_random_seed_and_n():
    a = build_preset("random").session
    assert build_preset("random", {"seed": 1}).session != a
    longer = build_preset("random", {"n": 9}).session
    np.testing.assert_array_equal(longer.embeddings[:6], a.embeddings)
    np.testing.assert_array_equal(longer.w_query, a.w_query)


def test_random_allows_long_sequences():
    s = build_preset("random", {"n": 4096}).session
    assert s.n == 4096


# -- shared behaviour -------------------------------------------------------------------

def test_list_and_describe_all_four():
    assert [p.name for p in list_presets()] == NAMES
    text = describe_presets()
    for p in list_presets():
        assert f"{p.name}: {p.title}" in text
        assert p.description in text
        for q in p.params:
            assert f"--set {q.name}=" in text
    assert "2147483647" in text  # whole-number bounds are printed in full


@pytest.mark.parametrize("name,seed_file", [("pronoun", "000"), ("dessert", "001"), ("sine", "003")])
def test_descriptions_cite_their_walkthrough(name, seed_file):
    p = get_preset(name)
    assert p.title and f"seed {seed_file}" in p.description
    assert len(p.description) < 300


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_and_recorded(name):
    a, b = build_preset(name), build_preset(name)
    assert a.session == b.session
    ca, cb = reference_curves(a.session), reference_curves(b.session)
    assert ca.keys() == cb.keys()
    for key in ca:
        np.testing.assert_array_equal(ca[key], cb[key])
    assert a.session.preset.name == name
    assert dict(a.session.preset.params) == get_preset(name).defaults()


@pytest.mark.parametrize("name", NAMES)
def test_embed_regenerates_the_presets_own_rows(name):
    preset = get_preset(name)
    s = build_preset(name).session
    rows = preset.embed(s.tokens, s.d, dict(s.preset.params))
    np.testing.assert_array_equal(rows, s.embeddings)
    wider = preset.embed(s.tokens + ("new",), s.d + 1, dict(s.preset.params))
    assert wider.shape == (s.n + 1, s.d + 1)


def test_set_assignments_build_a_preset():
    values = parse_assignments(["N=80", " tau = 0.01 ", "sigma=0"])
    assert values == {"N": "80", "tau": "0.01", "sigma": "0"}
    s = build_preset("sine", values).session
    assert s.n == 80 and s.scale == Scale("temperature", 0.01)
    assert s.preset.params == {"N": 80, "sigma": 0.0, "tau": 0.01, "seed": 1}
    assert parse_assignments(["label=a=b"]) == {"label": "a=b"}


@pytest.mark.parametrize("item", ["tau", "=3", " =3", ""])
def test_bad_assignments(item):
    with pytest.raises(PresetError, match="--set expects KEY=VALUE"):
        parse_assignments([item])


def test_unknown_preset_names_the_choices():
    with pytest.raises(PresetError, match=r"unknown preset 'cake'; choose one of pronoun, dessert, sine, random, rope, translate"):
        build_preset("cake")


@pytest.mark.parametrize(
    "name,params,text",
    [
        ("sine", {"temperature": 1}, r"preset 'sine' has no parameter 'temperature' \(parameters: N, sigma, tau, seed\)"),
        ("pronoun", {"seed": 1}, r"preset 'pronoun' has no parameter 'seed' \(parameters: none\)"),
        ("sine", {"N": "abc"}, r"parameter N: expected a whole number, got 'abc'"),
        ("sine", {"N": "7"}, r"parameter N: 7 is outside 8\.\.4096"),
        ("sine", {"N": 60.5}, r"parameter N: expected a whole number"),
        ("sine", {"tau": "0"}, r"parameter tau: 0\.0 is outside 1e-06\.\.1000"),
        ("sine", {"tau": "nan"}, r"parameter tau: expected a finite number"),
        ("sine", {"sigma": True}, r"parameter sigma: expected a number"),
        ("random", {"heads": 65}, r"parameter heads: 65 is outside 1\.\.64"),
        ("random", {"d": 0}, r"parameter d: 0 is outside 1\.\.1024"),
        ("dessert", {"seed": -1}, r"parameter seed: -1 is outside 0\.\.2147483647"),
    ],
)
def test_bad_parameters_are_refused_clearly(name, params, text):
    with pytest.raises(PresetError, match=text):
        build_preset(name, params)


def test_importing_presets_pulls_in_neither_qt_nor_torch():
    code = (
        "import sys; import attnexplorer.core.inputs.presets as p; p.list_presets(); p.describe_presets(); "
        "p.build_preset('pronoun'); p.build_preset('sine'); p.build_preset('random'); "
        "bad = [m for m in ('torch', 'PySide6', 'pyqtgraph') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_walkthrough_presets_open_on_the_walkthroughs_query():
    pronoun = build_preset("pronoun").session
    view = pronoun.extra["view"]
    assert (pronoun.tokens[view["query"]], pronoun.tokens[view["key"]]) == ("she", "dog")
    assert build_preset("dessert").session.extra["view"]["query"] == 1  # "the second token"
