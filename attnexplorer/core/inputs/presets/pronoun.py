"""The ``pronoun`` preset: "The dog fetched the ball and she was happy" (walkthrough 000).

The walkthrough shows its embeddings and weights only as pictures, so the numbers here were
designed to make every number it prints come out at the precision it prints them:

- q(she) = [2.64, 1.46, 0.94], k(dog) = [2.88, 3.06, 1.89], k(ball) = [2.73, 0.81, 1.52];
- score(she, dog) = 13.8 and score(she, ball) = 9.8;
- with the causal mask and scores ÷√3, she's weights are 0.883 on dog and 0.087 on ball;
- without the mask, she's weights on "was" and "happy" are already below 0.002.

How they were designed. The 2-D embedding plane has two readable axes: x₁ "is a thing"
(nouns high, function words below zero) and x₂ "is alive" (dog and she high, ball low).
dog = (0.80, 0.90) and ball = (1.00, 0.25) were placed by hand; W_k then follows from the two
printed keys (a 2×2 solve per key column), so W_k's second row is the "alive" direction of
key space. she = (0.20, 0.72) with W_q's first row fixed at (0.5, 0.3, 0.2) gives W_q's
second row from the printed query. Because score(she, j) = x_j · (W_k q_she), she's query
acts in the embedding plane as the direction a = W_k q_she ≈ (7.68, 8.54), which points
within half a degree of dog's embedding and 34° away from ball's: she looks for the animate
noun. The printed scores leave one degree of freedom that the printed weights pin down:
0.883 / 0.087 needs score(dog) − score(ball) in about 4.003..4.025, a hair below the
4.029 the printed (rounded) vectors give, so the designed q(she) and k(dog) sit a few
thousandths below their printed values (still rounding to them). The rest of she's weight
(0.030) is shared by she herself and "fetched"; a small grid search over their positions
(0.01 steps) put the two weights in the middle of their rounding intervals after rounding
the embeddings to 2 decimals and W_q, W_k to 3 (0.88303 and 0.08697). The tests assert all
of these properties on the stored numbers.

W_v = [[1, 0, 0.5], [0, 1, 0.5]] copies "thing" and "alive" into the value, plus their sum
halved, so she's output is visibly mostly dog's meaning (a thing that is alive).
"""

from __future__ import annotations

import zlib

import numpy as np

from ..session import Mask, Scale, Session
from . import BuiltPreset, Preset

SENTENCE = "The dog fetched the ball and she was happy"

# (is a thing, is alive) for each word of the sentence.
EMBEDDINGS = {
    "The": (-0.35, -0.25),
    "dog": (0.80, 0.90),
    "fetched": (0.10, 0.46),
    "the": (-0.30, -0.25),
    "ball": (1.00, 0.25),
    "and": (-0.40, -0.10),
    "she": (0.20, 0.72),
    "was": (-0.10, 0.05),
    "happy": (-0.20, 0.45),
}

W_QUERY = ((0.500, 0.300, 0.200),
           (3.528, 1.939, 1.250))
W_KEY = ((2.482, -0.051, 1.280),
         (0.993, 3.444, 0.961))
W_VALUE = ((1.0, 0.0, 0.5),
           (0.0, 1.0, 0.5))

# Words the user adds that the design does not know sit near the origin, like function
# words, so they neither steal she's attention nor look meaningful.
_UNKNOWN_RADIUS = 0.15


def tokens() -> tuple[str, ...]:
    return tuple(SENTENCE.split())


def _unknown_row(token: str, d: int) -> np.ndarray:
    # crc32, not hash(): Python salts str hashes per process, and a typed word must get
    # the same row in every session.
    rng = np.random.default_rng(zlib.crc32(token.encode("utf-8")))
    return rng.uniform(-_UNKNOWN_RADIUS, _UNKNOWN_RADIUS, size=d)


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """Designed rows for the walkthrough's words; small fixed rows near 0 for any other word.

    For d > 2 the designed words get zeros in the extra columns; for d = 1 only "is a thing".
    """
    out = np.zeros((len(tokens), d))
    for i, token in enumerate(tokens):
        if token in EMBEDDINGS:
            row = np.array(EMBEDDINGS[token])
            out[i, : min(d, 2)] = row[: min(d, 2)]
        else:
            out[i] = _unknown_row(token, d)
    return out


def build(params: dict) -> BuiltPreset:
    words = tokens()
    session = Session(
        tokens=words,
        embeddings=embed(words, 2, params),
        w_query=np.array(W_QUERY)[None],
        w_key=np.array(W_KEY)[None],
        w_value=np.array(W_VALUE)[None],
        mask=Mask("causal"),
        scale=Scale("inv_sqrt_dk"),
        # Open where the walkthrough looks: she's query (row 6) against dog's key (column 1).
        extra={"view": {"head": 0, "query": words.index("she"), "key": words.index("dog")}},
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="pronoun",
    title="The dog fetched the ball and she was happy",
    description=(
        "Who is 'she'? Hand-designed 2-D embeddings and one causal head (d_k=d_v=3) in which she's "
        "query finds 'dog' (weight 0.883) over 'ball' (0.087), reproducing the pronoun walkthrough (seed 000)."
    ),
    params=(),
    build=build,
    embed=embed,
)
