"""The ``translate`` preset: cross-attention from "le chat noir" to "the black cat".

A decoder writing French attends to the English sentence it translates. The queries are the
French tokens; the keys and values come from the source sequence, the English tokens (an
encoder's output). Adjectives come after the noun in French and before it in English, so the
word order is swapped: "noir" (position 2) must find "black" (position 1).

Both languages share three meaning features, (is a determiner, is an animal, is a colour):
le = the = [1, 0, 0], chat = cat = [0, 1, 0], noir = black = [0, 0, 1]. The English rows
carry a fourth feature, their position in the sentence (0, ½, 1), which the head ignores: the
source has its own width (d_s = 4, d = 3), as nn.MultiheadAttention's kdim/vdim allow.
W_q = s·I and W_k = s·[I; 0], so score(fr, en) = s² when the meanings match and 0 otherwise,
whatever the positions: with s = 2.5 and scores ÷√3 each French word puts 0.95 of its weight
on its translation (noir → black, across the swap). The values are the English meanings
(W_v = [I; 0]), so each output row is, nearly, the English word's meaning.

``s`` sharpens or flattens the alignment (s = 0: every French word looks at all three
English words alike).
"""

from __future__ import annotations

import numpy as np

from ..session import Mask, Scale, Session
from ..stages import Source
from . import BuiltPreset, Param, Preset

TARGET = ("le", "chat", "noir")
SOURCE = ("the", "black", "cat")
MEANING = {"le": (1.0, 0.0, 0.0), "chat": (0.0, 1.0, 0.0), "noir": (0.0, 0.0, 1.0),
           "the": (1.0, 0.0, 0.0), "cat": (0.0, 1.0, 0.0), "black": (0.0, 0.0, 1.0)}
DEFAULTS = {"s": 2.5}


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """A French word's meaning row (zeros for a word not in the table)."""
    rows = [MEANING.get(t, (0.0, 0.0, 0.0)) for t in tokens]
    return np.array([list(r[:d]) + [0.0] * max(0, d - 3) for r in rows], dtype=np.float64)


def source_embeddings() -> np.ndarray:
    """English meanings plus their position in the sentence, (3, 4)."""
    return np.array([list(MEANING[t]) + [i / 2] for i, t in enumerate(SOURCE)])


def build(params: dict) -> BuiltPreset:
    s = float(params["s"])
    read = np.vstack([np.eye(3), np.zeros((1, 3))])  # the source's meaning, not its position
    session = Session(
        tokens=TARGET, embeddings=embed(TARGET, 3, params),
        w_query=(s * np.eye(3))[None], w_key=(s * read)[None], w_value=read[None],
        source=Source(SOURCE, source_embeddings()),
        mask=Mask("none"), scale=Scale("inv_sqrt_dk"),
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="translate",
    title="Cross-attention: le chat noir → the black cat",
    description=(
        "A decoder's French queries attend to the English source: \"noir\" finds \"black\" across the "
        "adjective-noun word-order swap. Rectangular weights: French down the side, English along the bottom."
    ),
    params=(
        Param("s", "float", DEFAULTS["s"], 0.0, 10.0, label="alignment sharpness s", step=0.1,
              help="Scores are s² for a translation, 0 otherwise."),
    ),
    build=build,
    embed=embed,
)
