"""Sentence → tokens, by one simple documented rule.

``tokenize(sentence)`` splits a sentence into words and punctuation:

- Whitespace separates tokens and is dropped.
- A *word* is a run of letters, digits and underscores; an apostrophe between letters stays
  inside the word (``don't``, ``she's``), and so does a decimal point or comma between digits
  (``3.14``, ``1,000``).
- Every other character (``, . ! ? ; : " ( )`` …) is a token of its own.
- Case is kept: ``The`` and ``the`` are different tokens.

So ``"Life is short, eat dessert first"`` gives
``("Life", "is", "short", ",", "eat", "dessert", "first")``. This is a teaching tokenizer,
not a subword (BPE) one: each token is something a person can point at. Tokens can be
edited one by one in the token table afterwards.
"""

from __future__ import annotations

import re

from ..errors import AttnExplorerError
from .session import MAX_TOKEN_CHARS, MAX_TOKENS

_TOKEN = re.compile(
    r"\d+(?:[.,]\d+)*"            # numbers: 3, 3.14, 1,000
    r"|\w+(?:['’]\w+)*"           # words, with inner apostrophes: don't, she's
    r"|[^\w\s]",                  # any other single character
    re.UNICODE,
)


def tokenize(sentence: str) -> tuple[str, ...]:
    """The tokens of ``sentence`` (see the module docstring for the rule).

    Raises ``AttnExplorerError`` when there is no token at all, more than ``MAX_TOKENS``, or
    a token longer than ``MAX_TOKEN_CHARS`` characters.
    """
    if not isinstance(sentence, str):
        raise AttnExplorerError(f"a sentence must be text, got {type(sentence).__name__}")
    tokens = tuple(m.group(0) for m in _TOKEN.finditer(sentence))
    if not tokens:
        raise AttnExplorerError("the sentence has no tokens; type at least one word")
    if len(tokens) > MAX_TOKENS:
        raise AttnExplorerError(f"the sentence has {len(tokens)} tokens, more than the limit of {MAX_TOKENS}")
    for i, t in enumerate(tokens):
        if len(t) > MAX_TOKEN_CHARS:
            raise AttnExplorerError(f"token {i + 1} is longer than {MAX_TOKEN_CHARS} characters")
    return tokens


def detokenize(tokens) -> str:
    """A readable sentence for the sentence box: spaces between words, none before punctuation."""
    out = ""
    for t in tokens:
        if out and not (len(t) == 1 and t in ",.!?;:)]}%") and not out.endswith(("(", "[", "{")):
            out += " "
        out += t
    return out
