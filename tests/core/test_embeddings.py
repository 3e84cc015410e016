"""The dessert walkthrough's embedding recipe, and the shortcut that avoids the full table."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from walkthroughs import DESSERT_X

from attnexplorer.core.inputs.embeddings import seeded_embeddings, vocabulary
from attnexplorer.core.errors import PresetError

WORDS = "Life is short eat dessert first".split()

# Printed by walkthrough 001 after torch.manual_seed(123); nn.Embedding(50_000, 3).
PRINTED_EMBEDDINGS = DESSERT_X


def walkthrough_recipe(tokens, d, seed=123, vocab_size=50_000):
    """The walkthrough's own code, run on torch's global generator (restored afterwards)."""
    vocab = {s: i for i, s in enumerate(sorted(set(tokens)))}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        embed = torch.nn.Embedding(vocab_size, d)
        return embed(torch.tensor([vocab[t] for t in tokens])).detach().numpy().astype(np.float64)


def test_vocabulary_matches_the_walkthrough():
    assert vocabulary(WORDS) == {"Life": 0, "dessert": 1, "eat": 2, "first": 3, "is": 4, "short": 5}
    assert [vocabulary(WORDS)[w] for w in WORDS] == [0, 4, 5, 2, 1, 3]


def test_vocabulary_deduplicates_before_numbering():
    assert vocabulary(["b", "a", "b", "c", "a"]) == {"a": 0, "b": 1, "c": 2}


def test_reproduces_the_printed_embeddings():
    x = seeded_embeddings(WORDS, 3)
    assert x.shape == (6, 3) and x.dtype == np.float64
    np.testing.assert_allclose(x, PRINTED_EMBEDDINGS, atol=6e-5)


@pytest.mark.parametrize("d", [1, 2, 3, 5, 16, 64, 1024])
def test_equals_a_real_nn_embedding_for_many_widths(d):
    tokens = WORDS + ["the", "cake", "is", "a", "lie"]
    np.testing.assert_array_equal(seeded_embeddings(tokens, d, seed=7), walkthrough_recipe(tokens, d, seed=7))


@pytest.mark.parametrize("vocab_size,d", [(3, 5), (7, 3), (8, 2), (6, 3), (11, 3)])
def test_small_tables_where_the_shortcut_cannot_apply(vocab_size, d):
    # Tables under 16 numbers, or whose redrawn last block overlaps the rows we need.
    tokens = [f"w{i}" for i in range(min(vocab_size, 6))]
    got = seeded_embeddings(tokens, d, seed=3, vocab_size=vocab_size)
    np.testing.assert_array_equal(got, walkthrough_recipe(tokens, d, seed=3, vocab_size=vocab_size))


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.lists(st.sampled_from(["a", "b", "The", "the", "ü", "", "x y", "42"]), min_size=1, max_size=12),
    d=st.integers(1, 40),
    extra_vocab=st.integers(0, 60),
    seed=st.integers(0, 2**31 - 1),
)
def test_any_tokens_width_and_seed_match_the_recipe(tokens, d, extra_vocab, seed):
    vocab_size = len(set(tokens)) + extra_vocab
    got = seeded_embeddings(tokens, d, seed=seed, vocab_size=vocab_size)
    np.testing.assert_array_equal(got, walkthrough_recipe(tokens, d, seed=seed, vocab_size=vocab_size))


def test_repeated_tokens_share_a_row():
    x = seeded_embeddings(["dog", "cat", "dog"], 4)
    np.testing.assert_array_equal(x[0], x[2])
    assert not np.array_equal(x[0], x[1])


def test_leaves_torch_global_random_state_alone():
    before = torch.get_rng_state().clone()
    seeded_embeddings(WORDS, 8, seed=5)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"d": 0}, "width d"),
        ({"d": 1025}, "width d"),
        ({"d": 2.5}, "width d"),
        ({"d": 3, "seed": -1}, "seed"),
        ({"d": 3, "vocab_size": 4}, "6 distinct tokens do not fit a vocabulary of 4"),
        ({"d": 3, "vocab_size": 0}, "vocab_size"),
    ],
)
def test_bad_arguments_are_refused_clearly(kwargs, text):
    with pytest.raises(PresetError, match=text):
        seeded_embeddings(WORDS, **kwargs)


def test_non_string_token_is_named():
    with pytest.raises(PresetError, match=r"tokens\[1\] must be a string"):
        seeded_embeddings(["a", 3], 2)


def test_word_embeddings_depend_only_on_the_word_seed_and_width():
    from attnexplorer.core.inputs.embeddings import word_embeddings

    a = word_embeddings(("Life", "is", "short", "eat", "dessert", "first"), 4, seed=7)
    b = word_embeddings(("cake", "is", "Life"), 4, seed=7)
    np.testing.assert_array_equal(a[0], b[2])  # "Life" keeps its vector in another sentence
    np.testing.assert_array_equal(a[1], b[1])
    # a new word never takes another word's vector (the sorted-vocabulary recipe would)
    assert not any(np.array_equal(b[0], row) for row in a)
    repeated = word_embeddings(("the", "dog", "the"), 3)
    np.testing.assert_array_equal(repeated[0], repeated[2])
    assert not np.array_equal(word_embeddings(("dog",), 3, seed=1), word_embeddings(("dog",), 3, seed=2))
    assert word_embeddings(("x",), 1024).shape == (1, 1024)


def test_word_embeddings_refuse_bad_arguments():
    from attnexplorer.core.inputs.embeddings import word_embeddings

    with pytest.raises(PresetError, match="width d"):
        word_embeddings(("a",), 0)
    with pytest.raises(PresetError, match="seed"):
        word_embeddings(("a",), 2, seed=-1)
    with pytest.raises(PresetError, match=r"tokens\[1\]"):
        word_embeddings(("a", 3), 2)
