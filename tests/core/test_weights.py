"""Weight helpers: init kinds (seeded like the walkthroughs), nn.Linear / Conv1D import, split, resize."""

import numpy as np
import pytest
import torch

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Session
from attnexplorer.core.inputs.weights import INIT_KINDS, from_conv1d, from_linear, init_weight, resize, split_heads
from walkthroughs import DESSERT_SCORES_2, DESSERT_WEIGHTS_2


def test_init_kinds_have_labels():
    kinds = [k for k, _ in INIT_KINDS]
    assert kinds == ["rand", "linear", "identity", "zeros"]
    assert all(isinstance(label, str) and label for _, label in INIT_KINDS)


def test_rand_is_the_walkthroughs_torch_rand_stream():
    w = init_weight("rand", 3, 2, heads=3, seed=123)
    assert w.shape == (3, 3, 2) and w.dtype == np.float64
    torch.manual_seed(123)
    expected = [torch.rand(3, 2) for _ in range(3)]
    for h in range(3):
        np.testing.assert_array_equal(w[h], expected[h].double().numpy())


def test_rand_reproduces_the_dessert_walkthrough_scores():
    # The walkthrough: manual_seed(123); nn.Embedding(50_000, 3); manual_seed(123); W_q, W_k = rand(3, 2) twice.
    torch.manual_seed(123)
    embed = torch.nn.Embedding(50_000, 3)
    x = embed(torch.tensor([0, 4, 5, 2, 1, 3])).detach().double().numpy()
    w = init_weight("rand", 3, 2, heads=2, seed=123)
    s = Session(tokens=tuple("Life is short eat dessert first".split()), embeddings=x,
                w_query=w[:1], w_key=w[1:], w_value=np.ones((1, 3, 1)))
    r = compute(s, dtype="float64")
    np.testing.assert_allclose(r.scores[0, 1], DESSERT_SCORES_2, atol=2e-4)
    np.testing.assert_allclose(r.weights[0, 1], DESSERT_WEIGHTS_2, atol=2e-4)


def test_linear_is_nn_linear_transposed():
    w = init_weight("linear", 5, 3, heads=2, seed=7)
    torch.manual_seed(7)
    layers = [torch.nn.Linear(5, 3, bias=False) for _ in range(2)]
    for h in range(2):
        np.testing.assert_array_equal(w[h], layers[h].weight.detach().double().numpy().T)
    assert np.abs(w).max() <= 1 / np.sqrt(5)


def test_seeded_kinds_leave_the_global_generator_alone():
    torch.manual_seed(5)
    state = torch.get_rng_state()
    init_weight("rand", 4, 4, heads=2, seed=1)
    init_weight("linear", 4, 4, seed=2)
    assert torch.equal(torch.get_rng_state(), state)


def test_seeds_matter_and_repeat():
    a = init_weight("rand", 4, 3, seed=1)
    np.testing.assert_array_equal(a, init_weight("rand", 4, 3, seed=1))
    assert not np.array_equal(a, init_weight("rand", 4, 3, seed=2))


def test_identity_and_zeros():
    np.testing.assert_array_equal(init_weight("identity", 3, 3, heads=2), np.stack([np.eye(3)] * 2))
    np.testing.assert_array_equal(init_weight("zeros", 2, 5, heads=3), np.zeros((3, 2, 5)))
    w = init_weight("identity", 2, 2, heads=2)
    w[0, 0, 0] = 5  # the heads are separate arrays, not views of one eye
    assert w[1, 0, 0] == 1


@pytest.mark.parametrize("args,kwargs,where,match", [
    (("identity", 3, 2), {}, "init", "as many columns as rows, got 3×2"),
    (("gaussian", 3, 2), {}, "init", "unknown initialisation 'gaussian'; choose one of rand, linear, identity, zeros"),
    (("rand", 0, 2), {}, "rows", "1..1024, got 0"),
    (("rand", 3, 2.0), {}, "columns", "got 2.0"),
    (("rand", 3, 2), {"heads": 65}, "heads", "1..64, got 65"),
    (("rand", 3, 2), {"seed": -1}, "seed", "got -1"),
    (("rand", 3, 2), {"seed": "1"}, "seed", "got '1'"),
])
def test_bad_init_arguments(args, kwargs, where, match):
    with pytest.raises(SessionError, match=match) as info:
        init_weight(*args, **kwargs)
    assert info.value.where == where


def test_from_linear_gives_the_same_products_as_the_layer():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3, bias=False)
    x = torch.randn(5, 4)
    w = from_linear(layer.weight)
    assert w.shape == (4, 3)
    np.testing.assert_allclose(x.double().numpy() @ w, layer(x).detach().double().numpy(), rtol=1e-6, atol=1e-6)


def test_from_conv1d_keeps_in_by_out():
    w = np.arange(6.0).reshape(2, 3)  # GPT-2 Conv1D: (in, out), y = x @ w
    out = from_conv1d(w)
    np.testing.assert_array_equal(out, w)
    out[0, 0] = 9
    assert w[0, 0] == 0  # a copy
    np.testing.assert_array_equal(from_conv1d([[1, 2]]), [[1.0, 2.0]])


@pytest.mark.parametrize("helper", [from_linear, from_conv1d])
@pytest.mark.parametrize("bad,match", [
    (np.zeros(3), "2-dimensional, got shape \\(3,\\)"),
    (np.zeros((2, 2, 2)), "2-dimensional"),
    (np.zeros((0, 3)), "empty"),
    ([[1.0, np.nan]], r"non-finite number at \[0, 1\]"),
    ([["a", "b"]], "numbers only"),
    ([[1, 2], [3]], "equal length"),
])
def test_import_refuses_bad_weights(helper, bad, match):
    with pytest.raises(SessionError, match=match):
        helper(bad)


def test_split_heads_matches_multihead_layout():
    m = np.arange(12.0).reshape(2, 6)
    s = split_heads(m, 3)
    assert s.shape == (3, 2, 2)
    np.testing.assert_array_equal(s[1], m[:, 2:4])
    with pytest.raises(SessionError, match="6 columns do not split into 4 equal heads"):
        split_heads(m, 4)


def test_resize_keeps_what_fits_and_pads_with_zeros():
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(resize(m, 3, 2), [[0, 1], [3, 4], [0, 0]])
    np.testing.assert_array_equal(resize(m, 2, 4), [[0, 1, 2, 0], [3, 4, 5, 0]])
    np.testing.assert_array_equal(resize(m, 2, 3), m)
    stack = np.ones((2, 2, 2))
    np.testing.assert_array_equal(resize(stack, 1, 3), np.tile([[1.0, 1.0, 0.0]], (2, 1, 1)))
    assert resize(m, 1, 1) is not m


@pytest.mark.parametrize("args,match", [((np.zeros(3), 2, 2), "at least 2-dimensional"), ((np.zeros((2, 2)), 0, 2), "rows"),
                                        ((np.zeros((2, 2)), 2, 1025), "columns"), (([["a"]], 1, 1), "numbers only")])
def test_resize_refuses_bad_input(args, match):
    with pytest.raises(SessionError, match=match):
        resize(*args)
