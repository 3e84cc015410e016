"""Embedding generators shared by the presets: the dessert walkthrough's recipe.

The dessert walkthrough (seed 001) embeds a sentence like this::

    dc = {s: i for i, s in enumerate(sorted(sentence.replace(',', '').split()))}
    torch.manual_seed(123)
    embed = torch.nn.Embedding(50_000, 3)
    embedded_sentence = embed(torch.tensor([dc[s] for s in words])).detach()

``vocabulary`` and ``seeded_embeddings`` reproduce that bit for bit (float32 values, returned
as float64), for any width ``d``, without touching torch's global random state.

Why not just build the ``nn.Embedding``: its table is ``vocab_size × d`` normal numbers, about
200 MB and a quarter of a second at d = 1024, while a sentence only uses its first few rows.
torch's CPU ``normal_`` fills a tensor with uniform numbers from the generator in order and
then turns each block of 16 into normals (Box-Muller within the block); only the last 16
numbers of a tensor whose size is not a multiple of 16 are drawn again. So the first ``m``
numbers of a shorter tensor (rounded up to a whole block, and staying clear of the big
table's last 16) are the same as the big table's first ``m``. The tests check this against
a real ``nn.Embedding`` for several widths; where the shortcut does not apply (a tiny table)
we draw the whole table.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import PresetError
from .session import MAX_DIM

_BLOCK = 16  # torch's normal_ transforms uniforms in blocks of this many numbers


def vocabulary(tokens: Iterable[str]) -> dict[str, int]:
    """Map each distinct token to its index in the sorted list of distinct tokens.

    Sorting is Python's (code-point order: capitals before lower case), as in the dessert
    walkthrough: ``Life is short eat dessert first`` gives ``{'Life': 0, 'dessert': 1,
    'eat': 2, 'first': 3, 'is': 4, 'short': 5}``. A repeated token gets one index.
    """
    return {token: i for i, token in enumerate(sorted(set(tokens)))}


def _normal_table_prefix(rows: int, d: int, seed: int, vocab_size: int):
    """The first ``rows`` rows of ``nn.Embedding(vocab_size, d)`` after ``manual_seed(seed)``."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    total = vocab_size * d
    wanted = rows * d
    prefix = -(-wanted // _BLOCK) * _BLOCK  # round up to whole blocks
    if total % _BLOCK and prefix > total - _BLOCK:
        prefix = total  # the table's last block is redrawn: only the full table is exact
    if total < _BLOCK:
        prefix = total  # tiny tensors take torch's one-by-one path
    table = torch.empty(prefix, dtype=torch.float32).normal_(generator=generator)
    return table[:wanted].view(rows, d)


def seeded_embeddings(tokens, d: int, seed: int = 123, vocab_size: int = 50_000) -> np.ndarray:
    """Embeddings (n, d), float64: rows of a seeded ``nn.Embedding(vocab_size, d)``.

    Row i is the table row at ``vocabulary(tokens)[tokens[i]]``, exactly as the dessert
    walkthrough computes it after ``torch.manual_seed(seed)``. The same token list, ``d`` and
    seed always give the same numbers; a token's row depends on where it sorts among the
    distinct tokens of the list, so adding a word can move other words' rows (that is the
    walkthrough's recipe). Raises PresetError for a width outside 1..MAX_DIM, a bad seed, or
    more distinct tokens than ``vocab_size``. torch's global random state is left alone.
    """
    tokens = tuple(tokens)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= MAX_DIM:
        raise PresetError(f"embedding width d must be a whole number in 1..{MAX_DIM}, got {d!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise PresetError(f"seed must be a whole number >= 0, got {seed!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise PresetError(f"vocab_size must be a whole number >= 1, got {vocab_size!r}")
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise PresetError(f"tokens[{i}] must be a string, got {type(token).__name__}")
    vocab = vocabulary(tokens)
    if len(vocab) > vocab_size:
        raise PresetError(f"{len(vocab)} distinct tokens do not fit a vocabulary of {vocab_size}")
    if not tokens:
        return np.zeros((0, int(d)))
    table = _normal_table_prefix(len(vocab), int(d), int(seed), int(vocab_size))
    rows = [vocab[t] for t in tokens]
    return table.numpy().astype(np.float64)[rows]


def word_embeddings(tokens, d: int, seed: int = 123) -> np.ndarray:
    """Embeddings (n, d), float64, in which each distinct word has a fixed N(0, 1) vector.

    This is the window's "seeded random" source for tokens the user types. Like a row of an
    ``nn.Embedding`` (initialised N(0, 1)) looked up through a fixed vocabulary, a word's
    vector depends only on the word, ``d`` and ``seed``: typing a new word never gives it the
    vector of another word, and retyping a sentence gives the same rows. (The sentence-local
    sorted vocabulary of ``seeded_embeddings`` would renumber words as the sentence changes.)
    Each word's numbers come from ``torch.randn`` on a generator seeded by a 63-bit hash of
    (seed, word), so they are the same on every machine and in every session.
    """
    import hashlib

    import torch

    tokens = tuple(tokens)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= MAX_DIM:
        raise PresetError(f"embedding width d must be a whole number in 1..{MAX_DIM}, got {d!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise PresetError(f"seed must be a whole number >= 0, got {seed!r}")
    rows: dict[str, np.ndarray] = {}
    out = np.zeros((len(tokens), int(d)))
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise PresetError(f"tokens[{i}] must be a string, got {type(token).__name__}")
        if token not in rows:
            digest = hashlib.blake2b(f"{int(seed)}\x00{token}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
            generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
            rows[token] = torch.randn(int(d), generator=generator, dtype=torch.float32).numpy().astype(np.float64)
        out[i] = rows[token]
    return out
