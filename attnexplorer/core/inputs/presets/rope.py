"""The ``rope`` preset: a previous-token head made of RoPE alone, "the cat sat on the mat".

The head ignores what the words are when it scores them: W_q and W_k are zero, and the query
and key of every token are its biases, the same two vectors q₀ = s·[1, 1, 0, 0] and
k₀ = s·[cos 1, cos ½, sin 1, sin ½] (d_k = 4, RoPE over all 4 dimensions, layout ``half``,
θ = 4, so pair (0, 2) turns by 1 radian per position and pair (1, 3) by ½). k₀ is q₀ already
turned by one position, so after RoPE

    score(i, j) = q₀ᵀ R((j − i)·ω) k₀ = s² [cos(j − i + 1) + cos((j − i + 1)/2)]

which depends on j − i only and is largest at j = i − 1: every query looks one word back. With
s = 3 and the causal mask, each query from "sat" on puts about 0.87 of its weight on the word
before it (the values are the embeddings, so the output row is mostly that word's embedding).

Two things to try:

- ``offset`` shifts every position (the sentence starting at position 100 of a document):
  Q and K turn, the scores stay the same to the last digit shown. That is RoPE's
  relative-position property.
- ``rope`` = 0 turns RoPE off: every query and key is the same vector, every score is q₀·k₀,
  and the weights are uniform over the visible words: without positions this head is blind.
"""

from __future__ import annotations

import numpy as np

from ..session import Mask, Scale, Session
from ..stages import Positions
from . import BuiltPreset, Param, Preset

SENTENCE = ("the", "cat", "sat", "on", "the", "mat")
THETA = 4.0  # pair frequencies 1 and 4^(-1/2) = ½ radian per position
# A readable 4-d meaning per word: (is a word of function, is a thing, is an action, is a place)
WORDS = {"the": (1.0, 0.0, 0.0, 0.0), "cat": (0.0, 1.0, 0.0, 0.0), "sat": (0.0, 0.0, 1.0, 0.0),
         "on": (0.5, 0.0, 0.0, 0.5), "mat": (0.0, 0.5, 0.0, 1.0)}
DEFAULTS = {"s": 3.0, "offset": 0, "rope": 1}


def query_and_key(s: float) -> tuple[np.ndarray, np.ndarray]:
    """q₀ and k₀ = q₀ turned by one position (half layout: pairs (0, 2) and (1, 3))."""
    q = s * np.array([1.0, 1.0, 0.0, 0.0])
    k = s * np.array([np.cos(1.0), np.cos(0.5), np.sin(1.0), np.sin(0.5)])
    return q, k


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """Each word's meaning row; a word outside the sentence gets zeros."""
    return np.array([WORDS.get(t, (0.0,) * 4)[:d] + (0.0,) * max(0, d - 4) for t in tokens], dtype=np.float64)


def build(params: dict) -> BuiltPreset:
    s, offset, on = float(params["s"]), int(params["offset"]), int(params["rope"])
    q, k = query_and_key(s)
    d = 4
    session = Session(
        tokens=SENTENCE,
        embeddings=embed(SENTENCE, d, params),
        w_query=np.zeros((1, d, 4)), w_key=np.zeros((1, d, 4)), w_value=np.eye(d)[None],
        b_query=q[None], b_key=k[None],
        positions=Positions("rope", theta=THETA, dims=4, layout="half", offset=offset) if on else None,
        mask=Mask("causal"), scale=Scale("inv_sqrt_dk"),
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="rope",
    title="RoPE: a previous-token head",
    description=(
        "\"the cat sat on the mat\": queries and keys are biases only, and RoPE alone makes each word "
        "attend to the one before it. Shift the positions (offset): the scores stay the same. Turn RoPE "
        "off: the weights go uniform."
    ),
    params=(
        Param("s", "float", DEFAULTS["s"], 0.0, 10.0, label="query/key length s", step=0.1,
              help="Sharper with larger s: the score gap grows with s²."),
        Param("offset", "int", DEFAULTS["offset"], 0, 1000, label="position offset",
              help="Shift every position; the scores do not change."),
        Param("rope", "int", DEFAULTS["rope"], 0, 1, label="RoPE on (1) / off (0)"),
    ),
    build=build,
    embed=embed,
)
