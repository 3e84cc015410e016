"""The ``random`` preset: a small seeded random start for the user's own experiments.

Embeddings are standard normal, like ``nn.Embedding``'s initial table; the weights are
uniform in ±1/√d, which is ``nn.Linear``'s default initialisation for a layer with d inputs
(so Q, K and V start with entries of order one). Both come from numpy's seeded generator
(``default_rng``), on separate streams: the same parameters always give the same session,
and changing n keeps the weights and the first rows of the embeddings.
"""

from __future__ import annotations

import math

import numpy as np

from ..session import MAX_DIM, MAX_HEADS, MAX_TOKENS, Mask, Scale, Session
from . import BuiltPreset, Param, Preset

DEFAULTS = {"n": 6, "d": 4, "d_k": 3, "d_v": 3, "heads": 2, "seed": 0}
_EMBEDDINGS_STREAM, _WEIGHTS_STREAM = 0, 1


def _get(params: dict, name: str) -> int:
    return int(params.get(name, DEFAULTS[name]))


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream])


def tokens(n: int) -> tuple[str, ...]:
    return tuple(f"t{i}" for i in range(n))


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """Standard normal rows (n, d): row i depends only on i, d and the seed."""
    return _rng(_get(params, "seed"), _EMBEDDINGS_STREAM).standard_normal((len(tokens), d))


def build(params: dict) -> BuiltPreset:
    n, d, d_k, d_v, heads = (_get(params, k) for k in ("n", "d", "d_k", "d_v", "heads"))
    words = tokens(n)
    rng = _rng(_get(params, "seed"), _WEIGHTS_STREAM)
    bound = 1.0 / math.sqrt(d)
    w_query = rng.uniform(-bound, bound, size=(heads, d, d_k))
    w_key = rng.uniform(-bound, bound, size=(heads, d, d_k))
    w_value = rng.uniform(-bound, bound, size=(heads, d, d_v))
    session = Session(
        tokens=words,
        embeddings=embed(words, d, params),
        w_query=w_query,
        w_key=w_key,
        w_value=w_value,
        mask=Mask("none"),
        scale=Scale("inv_sqrt_dk"),
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="random",
    title="Random start",
    description=(
        "Seeded random embeddings and heads of any size, a blank page for your own experiments "
        "(not from a walkthrough): normal embeddings, weights initialised like nn.Linear."
    ),
    params=(
        Param("n", "int", DEFAULTS["n"], 1, MAX_TOKENS, label="tokens", help="Number of tokens t0, t1, …"),
        Param("d", "int", DEFAULTS["d"], 1, MAX_DIM, label="embedding width d"),
        Param("d_k", "int", DEFAULTS["d_k"], 1, MAX_DIM, label="query/key width d_k"),
        Param("d_v", "int", DEFAULTS["d_v"], 1, MAX_DIM, label="value width d_v"),
        Param("heads", "int", DEFAULTS["heads"], 1, MAX_HEADS, label="heads"),
        Param("seed", "int", DEFAULTS["seed"], 0, 2**31 - 1, label="random seed"),
    ),
    build=build,
    embed=embed,
)
