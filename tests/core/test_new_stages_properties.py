"""Random sessions with any mix of version 3's stages (QK-norm over each head or the whole
projection, soft-capping, sinks, a scale factor, RoPE scaling and float32 angles), on top of
grouped K/V heads and a mask: the file round-trips, the long path equals the dense one, and the
"copy as torch code" snippet gives the engine's numbers. The same examples every run."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.compute.long.result import compute_long
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.core.inputs.stages import Positions, QKNorm, RopeScaling
from attnexplorer.io.session_file import loads_session, dumps_session
from attnexplorer.io.torch_code import session_to_torch_code


@st.composite
def v3_sessions(draw):
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.sampled_from([1, 2]))
    n, d, d_k = draw(st.integers(2, 6)), draw(st.integers(2, 5)), draw(st.sampled_from([2, 4]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    r = lambda *shape: rng.normal(size=shape)  # noqa: E731
    stages = {}
    if draw(st.booleans()):
        kind, over = draw(st.sampled_from(["rms", "layer"])), draw(st.sampled_from(["head", "all"]))
        width_q = d_k if over == "head" and draw(st.booleans()) else heads * d_k
        width_k = d_k if over == "head" and width_q == d_k else kv * d_k
        stages["qk_norm"] = QKNorm(kind, over, draw(st.sampled_from([1e-6, 1e-5, 0.1])), 1 + 0.3 * r(width_q),
                                   1 + 0.3 * r(width_k), 0.2 * r(width_q) if kind == "layer" else None, None)
    if draw(st.booleans()):
        stages["softcap"] = draw(st.sampled_from([0.5, 2.0, 50.0]))
    if draw(st.booleans()):
        stages["sinks"] = 2 * r(heads)
    if draw(st.booleans()):
        stages["scale"] = Scale("factor", multiplier=draw(st.sampled_from([0.0625, 0.3, 1.5])))
    if draw(st.booleans()):
        scaling = draw(st.sampled_from([None, RopeScaling("linear", factor=2.0),
                                        RopeScaling("llama3", factor=8.0, original_max_position_embeddings=4),
                                        RopeScaling("yarn", factor=4.0, original_max_position_embeddings=4,
                                                    truncate=draw(st.booleans()))]))
        stages["positions"] = Positions("rope", theta=draw(st.sampled_from([10.0, 10000.0])),
                                        dims=draw(st.sampled_from([None, 2])), scaling=scaling,
                                        angles=draw(st.sampled_from(["float64", "float32"])),
                                        offset=draw(st.integers(0, 50)))
    mask = draw(st.sampled_from([Mask("causal"), Mask("none"), Mask("window", window=2)]))
    return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=2 * r(n, d), w_query=r(heads, d, d_k),
                   w_key=r(kv, d, d_k), w_value=r(kv, d, 3), b_query=r(heads, d_k), w_out=r(heads * 3, 2),
                   mask=mask, **stages)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(v3_sessions())
def test_file_long_path_and_snippet_agree(session):
    assert loads_session(dumps_session(session)) == session
    dense = compute(session, dtype="float64")
    long = compute_long(session, dtype="float64")
    for h in range(session.heads):
        np.testing.assert_allclose(long.streamed.rows(h, slice(0, session.n)), dense.weights[h], rtol=0, atol=1e-12)
    np.testing.assert_allclose(long.output, dense.output, rtol=1e-10, atol=1e-10)
    if session.sinks is not None:
        np.testing.assert_allclose(long.sink_share, dense.sink_share, rtol=0, atol=1e-12)
        np.testing.assert_allclose(dense.weights.sum(-1) + dense.sink_share, 1.0, rtol=0, atol=1e-12)
    namespace = {"__name__": "__snippet__"}
    exec(compile(session_to_torch_code(session), "<snippet>", "exec"), namespace)
    for name in ("weights", "output"):
        want = getattr(dense, name)
        np.testing.assert_allclose(namespace[name].numpy(), want, rtol=1e-9,
                                   atol=1e-9 * max(1.0, float(np.abs(want).max())), err_msg=name)
