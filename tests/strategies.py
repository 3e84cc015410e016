"""Hypothesis strategies for valid sessions and masks, shared by the engine and io tests."""

import numpy as np
from hypothesis import strategies as st

from attnexplorer.core.inputs.session import Mask, PresetRef, Scale, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source
from attnexplorer.io.session_file import KNOWN_KEYS

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, width=64)
# Tokens may hold any text but control characters (refused by Session: README, "Session files").
token = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)
# JSON-ready values a window might keep in ``extra``.
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | finite | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _array(draw, shape):
    return np.array(draw(st.lists(finite, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))).reshape(shape)


@st.composite
def masks(draw, n):
    kind = draw(st.sampled_from(["none", "causal", "window", "padding", "custom"]))
    if kind == "window":
        return Mask("window", window=draw(st.integers(1, n + 2)))
    if kind == "padding":
        return Mask("padding", padding=tuple(draw(st.lists(st.integers(0, n - 1), max_size=n))))
    if kind == "custom":
        bits = draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
        return Mask("custom", blocked=np.array(bits, dtype=bool).reshape(n, n))
    return Mask(kind)


@st.composite
def sessions(draw, max_n=5, max_d=4, max_heads=3, with_extra=True):
    """Small valid sessions covering every mask and scale kind, W_o or not, presets, extras."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    h = draw(st.integers(1, max_heads))
    d_k = draw(st.integers(1, max_d))
    d_v = draw(st.integers(1, max_d))
    w_out = _array(draw, (h * d_v, draw(st.integers(1, max_d)))) if draw(st.booleans()) else None
    scale_kind = draw(st.sampled_from(["inv_sqrt_dk", "none", "temperature"]))
    scale = Scale("temperature", draw(st.floats(1e-3, 1e3))) if scale_kind == "temperature" else Scale(scale_kind)
    preset = None
    if draw(st.booleans()):
        # A known preset's parameters are checked against its sliders; other names are labels.
        preset = PresetRef(draw(st.text(min_size=1, max_size=8).filter(lambda s: s not in ("pronoun", "dessert", "sine", "random"))),
                           draw(st.dictionaries(st.text(max_size=5), st.integers(-5, 5) | finite, max_size=3)))
    extra = draw(st.dictionaries(st.text(max_size=6).filter(lambda k: k not in KNOWN_KEYS), plain, max_size=3)) \
        if with_extra else {}
    return Session(
        tokens=tuple(draw(st.lists(token, min_size=n, max_size=n))),
        embeddings=_array(draw, (n, d)),
        w_query=_array(draw, (h, d, d_k)),
        w_key=_array(draw, (h, d, d_k)),
        w_value=_array(draw, (h, d, d_v)),
        w_out=w_out,
        mask=draw(masks(n)),
        scale=scale,
        preset=preset,
        extra=extra,
    )


def small_session(mask=None, w_out=False, tokens=("The", "dog", ",", '"she"', "ran")):
    """A fixed, deterministic session for example-based tests."""
    rng = np.random.default_rng(7)
    n = len(tokens)
    return Session(
        tokens=tuple(tokens),
        embeddings=rng.normal(size=(n, 4)),
        w_query=rng.normal(size=(2, 4, 3)),
        w_key=rng.normal(size=(2, 4, 3)),
        w_value=rng.normal(size=(2, 4, 2)),
        w_out=rng.normal(size=(4, 5)) if w_out else None,
        mask=mask or Mask("none"),
    )


@st.composite
def stage_sessions(draw, max_n=5, max_d=4, max_heads=4, values=finite, cross=None, extra_ok=True):
    """Valid sessions with any allowed combination of the stages of a real head: biases, a
    norm, positions (sinusoidal, learned, RoPE, ALiBi), grouped-query K/V heads and a source
    (cross-attention, which allows no causal/window mask and no RoPE/ALiBi). ``values`` draws
    the numbers; ``cross`` forces cross-attention on or off."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    h_kv = draw(st.integers(1, max_heads))
    h = h_kv * draw(st.integers(1, max(1, max_heads // h_kv)))
    d_k = draw(st.integers(1, max_d))
    d_v = draw(st.integers(1, max_d))

    def arr(shape):
        return np.array(draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))).reshape(shape)

    maybe = lambda: draw(st.booleans())  # noqa: E731
    source = None
    if cross if cross is not None else maybe():
        n_k = draw(st.integers(1, max_n))
        source = Source(tuple(draw(st.lists(token, min_size=n_k, max_size=n_k))), arr((n_k, draw(st.integers(1, max_d)))))
    d_in = d if source is None else source.d
    kinds = ["none", "sinusoidal", "learned"] + (["rope", "alibi"] if source is None else [])
    kind = draw(st.sampled_from(kinds))
    positions = None
    if kind == "sinusoidal":
        positions = Positions("sinusoidal", base=draw(st.sampled_from([10000.0, 100.0, 7.5])))
    elif kind == "learned":
        positions = Positions("learned", table=arr((n + draw(st.integers(0, 2)), d)))
    elif kind == "rope" and d_k >= 2:
        positions = Positions("rope", theta=draw(st.sampled_from([10000.0, 500.0, 3.0])),
                              dims=draw(st.sampled_from([None] + list(range(2, d_k + 1, 2)))) if d_k % 2 == 0
                              else draw(st.sampled_from(list(range(2, d_k + 1, 2)))),
                              layout=draw(st.sampled_from(["half", "interleaved"])), offset=draw(st.integers(0, 50)))
    elif kind == "alibi":
        positions = Positions("alibi", slopes=None if maybe() else np.abs(arr((h,))) % 2)
    norm = None
    if maybe():
        nk = draw(st.sampled_from(["layer", "rms"]))
        norm = Norm(nk, weight=arr((d,)) if maybe() else None, bias=arr((d,)) if nk == "layer" and maybe() else None,
                    eps=draw(st.sampled_from([1e-5, 1e-6, 0.1])))
    w_out = arr((h * d_v, draw(st.integers(1, max_d)))) if maybe() else None
    if source is None:
        mask = draw(masks(n))
    else:
        mk = draw(st.sampled_from(["none", "padding", "custom"]))
        n_k = source.n
        mask = Mask(mk) if mk == "none" else Mask("padding", padding=tuple(draw(st.lists(st.integers(0, n_k - 1), max_size=n_k)))) \
            if mk == "padding" else Mask("custom", blocked=np.array(
                draw(st.lists(st.booleans(), min_size=n * n_k, max_size=n * n_k)), dtype=bool).reshape(n, n_k))
    scale_kind = draw(st.sampled_from(["inv_sqrt_dk", "none", "temperature"]))
    scale = Scale("temperature", draw(st.floats(0.1, 10))) if scale_kind == "temperature" else Scale(scale_kind)
    return Session(
        tokens=tuple(draw(st.lists(token, min_size=n, max_size=n))),
        embeddings=arr((n, d)),
        w_query=arr((h, d, d_k)), w_key=arr((h_kv, d_in, d_k)), w_value=arr((h_kv, d_in, d_v)),
        b_query=arr((h, d_k)) if maybe() else None, b_key=arr((h_kv, d_k)) if maybe() else None,
        b_value=arr((h_kv, d_v)) if maybe() else None,
        w_out=w_out, b_out=arr((w_out.shape[1],)) if w_out is not None and maybe() else None,
        norm=norm, positions=positions, source=source, mask=mask, scale=scale,
        extra={"view": {"head": 0}} if extra_ok and maybe() else {},
    )
