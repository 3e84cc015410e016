"""The sentence rule: words and punctuation."""

import pytest

from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.inputs.session import MAX_TOKENS
from attnexplorer.core.inputs.tokenize import detokenize, tokenize


def test_words_and_punctuation():
    assert tokenize("Life is short, eat dessert first") == (
        "Life", "is", "short", ",", "eat", "dessert", "first")
    assert tokenize("The dog chased the ball. She was happy!") == (
        "The", "dog", "chased", "the", "ball", ".", "She", "was", "happy", "!")


def test_apostrophes_and_numbers_stay_inside():
    assert tokenize("don't pay 3.14 or 1,000 (she's)") == (
        "don't", "pay", "3.14", "or", "1,000", "(", "she's", ")")


def test_whitespace_is_dropped_and_case_kept():
    assert tokenize("  The\tthe\n") == ("The", "the")


def test_empty_and_oversized_are_refused():
    with pytest.raises(AttnExplorerError, match="no tokens"):
        tokenize("   ")
    with pytest.raises(AttnExplorerError, match="more than the limit"):
        tokenize("a " * (MAX_TOKENS + 1))
    with pytest.raises(AttnExplorerError, match="longer than"):
        tokenize("x" * 500)


def test_detokenize_reads_back_the_same_tokens():
    sentence = "Life is short, eat dessert first."
    assert detokenize(tokenize(sentence)) == sentence
    assert tokenize(detokenize(("a", "(", "b", ")", "!"))) == ("a", "(", "b", ")", "!")
