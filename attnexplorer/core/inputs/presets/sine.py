"""The ``sine`` preset: attention as a smoother of a noisy sine (walkthrough 003).

Each token is one sample of a noisy signal. Its embedding is ``[noisy value, p, p², 1]``
(d = 4), where the position ``p`` runs from 0 at the first sample to 1 at the last (sample
i of N sits at p = i / (N − 1)) and the clean signal is one period, ``sin(2πp)``. The
walkthrough's engineered weights make ``q_i = [√2·p_i, −p_i², 1]`` and
``k_j = [√2·p_j, 1, −p_j²]``, so ``q_i · k_j = −(p_i − p_j)²``: after softmax(scores / τ)
each row is a Gaussian bump around its own position, of width √(τ/2). ``W_V`` picks the noisy
value, so each output is a weighted local average: a smoothed signal.

Temperature τ: tiny τ makes each token see only itself (no smoothing); huge τ makes every
token average everything (the output flattens to the mean). The default τ = 0.004 is a
bump of width 0.045 in p, about 2.6 samples at the default N = 60, which roughly halves the
error against the clean sine at the default noise (σ = 0.3).

Numerics: the scores are formed as 2·p_i·p_j − p_i² − p_j², so in float32 they carry an
error of about 1e-7; that is harmless unless τ is that small too (use float64 to study
τ near the bottom of its range with thousands of samples).
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..session import MAX_TOKENS, Mask, Scale, Session
from . import BuiltPreset, Param, Preset

DEFAULTS = {"N": 60, "sigma": 0.3, "tau": 0.004, "seed": 1}

# q_i = [√2 p_i, −p_i², 1] and k_j = [√2 p_j, 1, −p_j²] from X = [noisy, p, p², 1].
W_QUERY = np.array([
    [0.0, 0.0, 0.0],
    [math.sqrt(2.0), 0.0, 0.0],
    [0.0, -1.0, 0.0],
    [0.0, 0.0, 1.0],
])
W_KEY = np.array([
    [0.0, 0.0, 0.0],
    [math.sqrt(2.0), 0.0, 0.0],
    [0.0, 0.0, -1.0],
    [0.0, 1.0, 0.0],
])
W_VALUE = np.array([[1.0], [0.0], [0.0], [0.0]])  # v_j = noisy value j


def _get(params: dict, name: str):
    return params.get(name, DEFAULTS[name])


def positions(n: int, samples: int) -> np.ndarray:
    """Positions of the first ``n`` samples at the spacing of ``samples`` samples over [0, 1]."""
    return np.arange(n) / (samples - 1)


def samples(n: int, params: dict) -> dict[str, np.ndarray]:
    """``position``, ``clean`` and ``noisy`` for the first ``n`` samples.

    The noise is drawn in order from ``numpy.random.default_rng(seed)``, so the first samples
    are the same whatever ``n`` is: tokens added after the last sample continue the sine.
    """
    samples = int(_get(params, "N"))
    p = positions(n, samples)
    clean = np.sin(2.0 * np.pi * p)
    noise = np.random.default_rng(int(_get(params, "seed"))).standard_normal(n)
    return {"position": p, "clean": clean, "noisy": clean + float(_get(params, "sigma")) * noise}


def embed(tokens: tuple[str, ...], d: int, params: dict) -> np.ndarray:
    """Rows ``[noisy, p, p², 1]`` for samples 0..n−1, in the order given.

    A width other than 4 keeps the first ``d`` features (d < 4) or pads with zeros (d > 4),
    so the rows always fit the session the window is editing.
    """
    n = len(tokens)
    sig = samples(n, params)
    p = sig["position"]
    features = np.column_stack([sig["noisy"], p, p**2, np.ones(n)]) if n else np.zeros((0, 4))
    out = np.zeros((n, d))
    out[:, : min(d, 4)] = features[:, : min(d, 4)]
    return out


def tokens(n: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(n))


_SAMPLE = re.compile(r"x(\d{1,7})")


def curves(words: tuple[str, ...], params: dict) -> dict[str, np.ndarray]:
    """The clean sine under each token: token ``x<i>`` is sample i, at position
    i / (N − 1). Tokens moved, deleted or added as samples (``x60`` …) keep their place on
    the curve; a token that names no sample means the session is no longer a sampled
    signal, and there are no curves ({})."""
    indices = []
    for word in words:
        match = _SAMPLE.fullmatch(word)
        if match is None:
            return {}
        indices.append(int(match[1]))
    p = np.asarray(indices, dtype=np.float64) / (int(_get(params, "N")) - 1)
    return {"position": p, "clean": np.sin(2.0 * np.pi * p)}


def build(params: dict) -> BuiltPreset:
    n = int(_get(params, "N"))
    words = tokens(n)
    session = Session(
        tokens=words,
        embeddings=embed(words, 4, params),
        w_query=W_QUERY[None],
        w_key=W_KEY[None],
        w_value=W_VALUE[None],
        mask=Mask("none"),
        scale=Scale("temperature", float(_get(params, "tau"))),
    )
    return BuiltPreset(session=session)


PRESET = Preset(
    name="sine",
    title="Smoothing a noisy sine",
    description=(
        "N noisy samples of one sine period; engineered W_q, W_k make each score −(p_i − p_j)², so "
        "softmax(scores/τ) averages nearby samples. Reproduces the noisy-sine walkthrough (seed 003)."
    ),
    params=(
        Param("N", "int", DEFAULTS["N"], 8, min(4096, MAX_TOKENS), label="samples",
              help="Samples over one period; more samples per period smooth better."),
        Param("sigma", "float", DEFAULTS["sigma"], 0.0, 2.0, label="noise σ", step=0.05,
              help="Standard deviation of the noise added to the sine."),
        Param("tau", "float", DEFAULTS["tau"], 1e-6, 1e3, label="temperature τ", step=0.001, log=True,
              help="softmax(scores/τ); small τ: each sample sees itself, large τ: the mean."),
        Param("seed", "int", DEFAULTS["seed"], 0, 2**31 - 1, label="noise seed",
              help="Seed of the noise draw."),
    ),
    build=build,
    embed=embed,
    curves=curves,
)
