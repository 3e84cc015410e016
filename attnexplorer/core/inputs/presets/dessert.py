"""The ``dessert`` preset: "Life is short eat dessert first", as in walkthrough 001.

The walkthrough embeds the six words (comma stripped) with ``torch.manual_seed(123)`` and
``nn.Embedding(50_000, 3)`` over the sorted vocabulary, seeds 123 again and draws
``W_q = rand(3, 2)``, ``W_k = rand(3, 2)``, ``W_v = rand(3, 4)``; one head, no mask, scores
÷√2. With the default seed this preset reproduces every number it prints. The ``seed``
parameter replays the same recipe with another seed, for a different random start.
"""

from __future__ import annotations

import numpy as np

from ..embeddings import seeded_embeddings
from ..session import Mask, Scale, Session
from . import BuiltPreset, Param, Preset

SENTENCE = "Life is short, eat dessert first"
D, D_K, D_V = 3, 2, 4
DEFAULT_SEED = 123


def tokens() -> tuple[str, ...]:
    """The walkthrough's tokens: the sentence with its comma removed, split on spaces."""
    return tuple(SENTENCE.replace(",", "").split())


def _seed(params: dict) -> int:
    return int(params.get("seed", DEFAULT_SEED))


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """The walkthrough's recipe for any token list and width: seeded nn.Embedding rows."""
    return seeded_embeddings(tokens, d, seed=_seed(params))


def build(params: dict) -> BuiltPreset:
    import torch

    seed = _seed(params)
    words = tokens()
    x = embed(words, D, params)
    # A private generator seeded like torch.manual_seed(seed) gives the same three draws
    # as the walkthrough without disturbing a notebook user's global random state.
    generator = torch.Generator().manual_seed(seed)
    w_query = torch.rand(D, D_K, generator=generator)
    w_key = torch.rand(D, D_K, generator=generator)
    w_value = torch.rand(D, D_V, generator=generator)
    session = Session(
        tokens=words,
        embeddings=x,
        w_query=w_query.numpy().astype(np.float64)[None],
        w_key=w_key.numpy().astype(np.float64)[None],
        w_value=w_value.numpy().astype(np.float64)[None],
        mask=Mask("none"),
        scale=Scale("inv_sqrt_dk"),
        # Open where the walkthrough looks: the second token's query, row 1.
        extra={"view": {"head": 0, "query": 1, "key": None}},
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="dessert",
    title="Life is short, eat dessert first",
    description=(
        "One head over six words with seeded random embeddings (d=3) and weights (d_k=2, d_v=4), "
        "reproducing every number printed in the dessert walkthrough (seed 001)."
    ),
    params=(
        Param("seed", "int", DEFAULT_SEED, 0, 2**31 - 1, label="random seed",
              help="123 gives the walkthrough's numbers; other seeds replay its recipe."),
    ),
    build=build,
    embed=embed,
)
