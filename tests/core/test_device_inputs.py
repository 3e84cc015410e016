"""The engine's up-front overflow bound and its caches of device inputs."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnexplorer.core.compute import device_inputs
from attnexplorer.core.compute.engine import INTERMEDIATES, compute
from attnexplorer.core.errors import EngineError
from attnexplorer.core.inputs.session import Mask, Session


def session_of(scale_x, scale_w, n=4, d=3, d_k=2, d_v=2, heads=2, w_out=False, seed=0):
    rng = np.random.default_rng(seed)
    return Session(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)) * scale_x,
        w_query=rng.normal(size=(heads, d, d_k)) * scale_w,
        w_key=rng.normal(size=(heads, d, d_k)) * scale_w,
        w_value=rng.normal(size=(heads, d, d_v)) * scale_w,
        w_out=rng.normal(size=(heads * d_v, 3)) * scale_w if w_out else None,
        mask=Mask("causal"),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ex=st.integers(-3, 12), ew=st.integers(-3, 12), dtype=st.sampled_from(["float16", "bfloat16", "float32"]),
       d_v=st.sampled_from([2, 3]), w_out=st.booleans(), seed=st.integers(0, 99))
def test_the_bound_never_lets_an_overflow_through(ex, ew, dtype, d_v, w_out, seed):
    """Whenever the bound says nothing can overflow, nothing has; otherwise the engine looks."""
    s = session_of(10.0 ** ex, 10.0 ** ew, d_v=d_v, w_out=w_out, seed=seed)
    factor = s.scale.factor(s.d_k)
    info = torch.finfo(getattr(torch, dtype))
    safe = device_inputs.cannot_overflow(s, factor, info.max, info.eps)
    try:
        r = compute(s, dtype=dtype)
    except EngineError as err:
        assert not safe, "the bound called safe a session that overflowed"
        assert "too large" in str(err)
        return
    for name in INTERMEDIATES:
        a = getattr(r, name)
        assert np.isfinite(a).all(), f"{name} is not finite but no error was raised"


def test_small_numbers_are_known_safe_and_huge_ones_are_checked():
    f32, f16 = torch.finfo(torch.float32), torch.finfo(torch.float16)
    s = session_of(1.0, 1.0)
    assert device_inputs.cannot_overflow(s, 0.5, f32.max, f32.eps)
    assert not device_inputs.cannot_overflow(s.replace(embeddings=s.embeddings * 1e20), 0.5, f32.max, f32.eps)
    # float16 overflows near 65,504: moderate numbers already need the real check
    moderate = session_of(30.0, 3.0)
    assert not device_inputs.cannot_overflow(moderate, 0.5, f16.max, f16.eps)
    # Long sums in a half type need room for rounding: scores up to 7,200 are safe in float16
    # with 4 tokens, but not with 2,048, where the result is looked at instead.
    def of(n):
        return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=np.full((n, 2), 30.0),
                       w_query=np.ones((1, 2, 2)), w_key=np.ones((1, 2, 2)), w_value=np.ones((1, 2, 2)))

    assert device_inputs.cannot_overflow(of(4), 1.0, f16.max, f16.eps)
    assert not device_inputs.cannot_overflow(of(2048), 1.0, f16.max, f16.eps)
    assert device_inputs.cannot_overflow(of(2048), 1.0, f32.max, f32.eps)


def test_numbers_the_bound_cannot_clear_still_compute_when_they_fit():
    # The bound is loose (X's largest row meets W's largest entry); a session beyond it whose
    # real numbers fit must compute, not be refused.
    x = np.zeros((3, 2))
    x[0, 0] = 200.0
    w = np.full((1, 2, 2), 0.01)
    w[0, 1, :] = 400.0  # the large weights only ever meet x's zero column
    s = Session(tokens=("a", "b", "c"), embeddings=x, w_query=w, w_key=w, w_value=np.ones((1, 2, 2)))
    factor = s.scale.factor(s.d_k)
    f16 = torch.finfo(torch.float16)
    assert not device_inputs.cannot_overflow(s, factor, f16.max, f16.eps)
    r = compute(s, dtype="float16")
    np.testing.assert_allclose(r.scores[0], [[8.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], rtol=1e-2)
    np.testing.assert_allclose(r.V[0, 0], [200.0, 200.0])


@pytest.mark.parametrize("d_k, d_v", [(2, 2), (2, 3)])
def test_joined_projections_follow_an_edit_and_split_into_q_k_v(d_k, d_v):
    s = session_of(1.0, 1.0, d_k=d_k, d_v=d_v, heads=2)
    cpu = torch.device("cpu")
    first = device_inputs.projection_weights(s, torch.float64, cpu)
    assert device_inputs.projection_weights(s, torch.float64, cpu) is first
    w_value = s.w_value.copy()
    w_value[1, 2, 0] = 7.0
    edited = s.replace(w_value=w_value)
    second = device_inputs.projection_weights(edited, torch.float64, cpu)
    assert second is not first
    x = torch.tensor(s.embeddings)
    joined = x @ second
    expected = [np.einsum("nd,hdk->hnk", s.embeddings, w) for w in (s.w_query, s.w_key, w_value)]
    for parts in (device_inputs.split_projections(joined, 2, d_k, d_v),
                  device_inputs.split_projections(joined.numpy(), 2, d_k, d_v)):
        for got, want in zip(parts, expected):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_writable_arrays_are_never_cached():
    a = np.ones((2, 2))
    t = device_inputs.device_tensor(a, torch.float64, torch.device("cpu"))
    a[0, 0] = 5.0
    assert device_inputs.device_tensor(a, torch.float64, torch.device("cpu")) is not t
    assert device_inputs.device_tensor(a, torch.float64, torch.device("cpu"))[0, 0] == 5.0


def test_a_score_overflowing_to_minus_inf_is_refused_not_taken_for_a_mask():
    # score(a, a) = 300 · -300 = -90,000, beyond float16's -65,504: as -inf it would get weight
    # 0 like a masked cell and leave every output finite, so only the scores can tell.
    w_query = np.zeros((1, 2, 2))
    w_query[0, 0, 0] = 300.0
    w_key = -w_query
    s = Session(tokens=("a", "b"), embeddings=np.eye(2), w_query=w_query, w_key=w_key,
                w_value=np.ones((1, 2, 2)))
    with pytest.raises(EngineError, match="too large for float16.*float64"):
        compute(s, dtype="float16")
    assert compute(s, dtype="float32").scores[0, 0, 0] == -90000.0


def test_an_edit_is_patched_into_the_device_weights_and_computes_like_a_fresh_session():
    from attnexplorer.core.editing import edits
    from attnexplorer.core.editing.session_change import SessionChange

    rng = np.random.default_rng(5)
    s = Session(tokens=tuple(f"t{i}" for i in range(5)), embeddings=rng.normal(size=(5, 6)),
                w_query=rng.normal(size=(3, 6, 4)), w_key=rng.normal(size=(3, 6, 4)), w_value=rng.normal(size=(3, 6, 5)))
    dev, tdtype = torch.device("cpu"), torch.float64
    joined = device_inputs.projection_weights(s, tdtype, dev)
    steps = [lambda t: edits.set_cell(t, "W_q", 1, 2, 7.0, head=2),
             lambda t: edits.set_block(t, "W_v", 0, 1, [[1.0, 2.0], [3.0, 4.0]], head=0),
             lambda t: edits.set_cell(t, "W_k", 5, 3, -2.5, head=1)]
    sessions = [s]
    for step in steps:
        sessions.append(step(sessions[-1]))
        # The same tensor, with only the edited cells written (no conversion of every weight).
        assert device_inputs.projection_weights(sessions[-1], tdtype, dev) is joined
    undone = SessionChange(sessions[-2], sessions[-1]).undo(sessions[-1])
    assert device_inputs.projection_weights(undone, tdtype, dev) is joined  # an undo is patched too
    for t in (undone, sessions[-1]):
        fresh = Session(tokens=t.tokens, embeddings=np.array(t.embeddings), w_query=np.array(t.w_query),
                        w_key=np.array(t.w_key), w_value=np.array(t.w_value))
        expected = torch.cat([torch.tensor(w).permute(1, 0, 2).reshape(6, -1)
                              for w in (fresh.w_query, fresh.w_key, fresh.w_value)], dim=1)
        got = device_inputs.projection_weights(t, tdtype, dev)
        assert torch.equal(got, expected)
        np.testing.assert_array_equal(compute(t, dtype="float64").output, compute(fresh, dtype="float64").output)



def test_a_cached_value_in_use_outlives_newer_entries():
    # Regression: the caches dropped their oldest entries first, so after about fifteen W_q
    # edits the bounds of W_k and W_v (made once, read on every edit) were made again from
    # every weight, with a temporary as large as W_k. The least recently used goes first now.
    from collections import OrderedDict

    def frozen(value):
        a = np.full((2, 2), float(value))
        a.flags.writeable = False
        return a

    cache, kept = OrderedDict(), frozen(0)
    builds, others = [], []
    for k in range(100):
        device_inputs.cached(cache, 4, (kept,), (id(kept), "max"), lambda: builds.append(1) or 0.0)
        others.append(frozen(k + 1))  # each edit adds an entry of its own
        device_inputs.cached(cache, 4, (others[-1],), (id(others[-1]), "max"), lambda: 1.0)
    assert len(builds) == 1
    assert len(cache) == 4


def test_a_joined_tensor_being_read_is_not_written_by_an_edit_computed_meanwhile():
    # Regression: an export computing the current session on the GUI thread, while the worker
    # still made the previous one's products, wrote the edit into the very tensor the worker
    # was reading (the cache is process-global), so the worker's numbers mixed both sessions.
    from attnexplorer.core.editing import edits
    from attnexplorer.core.compute.engine import attention_inputs

    rng = np.random.default_rng(8)
    s = Session(tokens=tuple(f"t{i}" for i in range(4)), embeddings=rng.normal(size=(4, 5)),
                w_query=rng.normal(size=(2, 5, 3)), w_key=rng.normal(size=(2, 5, 3)), w_value=rng.normal(size=(2, 5, 3)))
    dev, tdtype = torch.device("cpu"), torch.float64
    edited = edits.set_cell(s, "W_q", 1, 2, 7.0, head=1)
    with torch.inference_mode(), attention_inputs(s, tdtype, dev) as inputs:
        before = inputs.w_qkv.clone()
        # Another compute of the edit, meanwhile: it must join anew, not write into ours.
        other = device_inputs.projection_weights(edited, tdtype, dev)
        assert other is not inputs.w_qkv and torch.equal(inputs.w_qkv, before)
        np.testing.assert_array_equal(compute(edited, dtype="float64").output,
                                      compute(edited.replace(w_query=np.array(edited.w_query)), dtype="float64").output)
        assert torch.equal(inputs.w_qkv, before)
    # Once nobody reads it, an edit is written into it in place again.
    joined = device_inputs.projection_weights(s, tdtype, dev)
    again = edits.set_cell(s, "W_k", 0, 1, -3.0, head=0)
    assert device_inputs.projection_weights(again, tdtype, dev) is joined
