"""A long session's AttentionResult (the streamed path) and the choice between the two paths."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import small_session, stage_sessions

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import EngineError
from attnexplorer.core.compute.long import result as long_result
from attnexplorer.core.compute.long.result import compute_any, compute_long, dense_bytes, is_long
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask

unit = st.floats(-1, 1, allow_nan=False, width=64)
NOT_SQUARE = ("Q", "K", "V", "head_outputs", "concat", "output", "E", "P", "X", "Q_unrotated", "K_unrotated",
              "kv_head_of", "source_X", "blocked_rows")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stage_sessions(max_n=6, values=unit, extra_ok=False), st.sampled_from(["float32", "float64"]))
def test_a_long_result_carries_what_the_dense_one_does_except_n_by_n(session, dtype):
    dense = compute(session, dtype=dtype)
    long = compute_long(session, dtype=dtype)
    tol = 1e-6 if dtype == "float32" else 1e-12
    for name in NOT_SQUARE:
        a, b = getattr(long, name), getattr(dense, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=tol,
                                       atol=tol * max(1.0, float(np.abs(np.asarray(b, dtype=float)).max(initial=0))),
                                       err_msg=name)
    assert long.scores is None and long.scaled_scores is None and long.weights is None and long.position_bias is None
    # The mask is made a block at a time from its definition, never whole.
    np.testing.assert_array_equal(long.mask[:, :], dense.mask)
    assert long.mask.shape == dense.mask.shape and long.mask.any() == bool(dense.mask.any())
    with pytest.raises(TypeError, match="read in blocks"):
        np.asarray(long.mask)
    assert long.session is session and long.source_tokens == dense.source_tokens and long.dtype == dtype
    assert set(long.streamed.overviews) == {"scores", "scaled_scores", "weights"}
    assert dense.streamed is None


def test_the_streamed_path_takes_sessions_over_the_dense_budget():
    def random(n, heads):
        return build_preset("random", {"n": n, "d": 64, "d_k": 64, "d_v": 64, "heads": heads}).session

    # 4,096 tokens × 4 heads (about 1.1 GB dense) stays dense, as every panel there expects.
    assert not is_long(random(4096, 4))
    assert is_long(random(8192, 4)) and dense_bytes(random(8192, 4)) > 4e9
    assert is_long(random(512, 2), budget=1000)


def test_compute_any_routes_by_the_budget(monkeypatch):
    session = small_session(mask=Mask("causal"), w_out=True)
    assert compute_any(session).streamed is None
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    routed = compute_any(session)
    assert routed.weights is None and routed.streamed is not None
    np.testing.assert_allclose(routed.output, compute(session).output, rtol=1e-6, atol=1e-6)
    weights = routed.streamed.tile(1, slice(None), slice(None))
    np.testing.assert_allclose(weights, compute(session).weights[1], atol=1e-6)


def test_a_long_compute_can_be_cancelled():
    from attnexplorer.core.compute.long import Cancelled

    with pytest.raises(Cancelled):
        compute_long(small_session(), cancelled=lambda: True)


def test_explain_works_on_a_long_result_as_on_the_dense_one():
    from attnexplorer.core.reading.explain import explain_cell, explain_output
    from attnexplorer.core.inputs.stages import Positions

    session = small_session(mask=Mask("causal"), w_out=True).replace(positions=Positions("alibi"))
    dense, long = compute(session, dtype="float64"), compute_long(session, dtype="float64")
    assert long.weights is None
    for ours, theirs in ((explain_cell(long, 1, 3, 2), explain_cell(dense, 1, 3, 2)),
                         (explain_output(long, 0, 4), explain_output(dense, 0, 4))):
        for name, value in vars(theirs).items():
            mine = vars(ours)[name]
            if name == "terms":  # (key, token, weight, value, contribution) per key
                assert [(t.key, t.token) for t in mine] == [(t.key, t.token) for t in value]
                for a, b in zip(mine, value):
                    np.testing.assert_allclose(a.contribution, b.contribution, rtol=1e-12, atol=1e-12)
            elif isinstance(value, (np.ndarray, float)):
                np.testing.assert_allclose(mine, value, rtol=1e-12, atol=1e-12, err_msg=name)
            else:
                assert mine == value, name


def _assert_same_explanation(ours, theirs, tol):
    for name, value in vars(theirs).items():
        mine = vars(ours)[name]
        if name == "terms":  # (key, token, weight, value, contribution) per key
            assert [(t.key, t.token) for t in mine] == [(t.key, t.token) for t in value]
            for a, b in zip(mine, value):
                np.testing.assert_allclose(a.contribution, b.contribution, rtol=tol, atol=tol)
                np.testing.assert_allclose(a.weight, b.weight, rtol=tol, atol=tol)
        elif isinstance(value, (np.ndarray, float)):
            np.testing.assert_allclose(mine, value, rtol=tol, atol=tol, err_msg=name)
        else:
            assert mine == value, name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stage", ["alibi", "rope"])
def test_explain_of_a_streamed_result_across_many_blocks_equals_the_dense_one(monkeypatch, dtype, stage):
    from attnexplorer.core.reading.explain import explain_cell, explain_output, query_row
    from attnexplorer.core.compute.long import streamed
    from attnexplorer.core.inputs.stages import Positions

    n = 96
    base = build_preset("random", {"n": n, "d": 8, "d_k": 8, "d_v": 8, "heads": 4, "seed": 3}).session
    blocked = np.random.default_rng(1).random((n, n)) < 0.3
    blocked[7] = True  # a query that sees nothing
    positions = Positions("alibi") if stage == "alibi" else Positions("rope", theta=500.0)
    itemsize = 8 if dtype == "float64" else 4
    monkeypatch.setattr(streamed, "BLOCK_BYTES", 5 * 4 * n * itemsize)  # 5 rows a block: 20 blocks
    for mask in (Mask("custom", blocked=blocked), Mask("window", window=9), Mask("padding", padding=(0, 5, 50))):
        session = base.replace(positions=positions, mask=mask)
        dense, long = compute(session, dtype=dtype), compute_long(session, dtype=dtype)
        assert long.weights is None and long.streamed is not None
        tol = 1e-6 if dtype == "float32" else 1e-12
        for head, query in ((0, 0), (1, 7), (2, 52), (3, n - 1)):
            for ours, theirs in zip(query_row(long, head, query), query_row(dense, head, query)):
                np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol * max(1.0, np.abs(theirs).max()))
            key = int(np.argmax(query_row(dense, head, query)[2]))
            for j in {key, 0, query, n - 1}:
                _assert_same_explanation(explain_cell(long, head, query, j), explain_cell(dense, head, query, j), tol)
            _assert_same_explanation(explain_output(long, head, query, top=8), explain_output(dense, head, query, top=8),
                                     tol)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stage_sessions(max_n=6, values=unit, extra_ok=False), st.sampled_from(["float32", "float64"]), st.data())
def test_matrix_row_and_rows_read_a_long_result_as_a_dense_one(session, dtype, data):
    dense = compute(session, dtype=dtype)
    long = compute_long(session, dtype=dtype)
    # A dense result computed without its n × n matrices: rows from Q and K by the engine's kernel.
    lean = compute(session, dtype=dtype, keep=("Q", "K", "V", "head_outputs"))
    assert long.tiled and not dense.tiled
    tol = 1e-6 if dtype == "float32" else 1e-12
    h = data.draw(st.integers(0, session.heads - 1))
    i = data.draw(st.integers(0, session.n - 1))
    r0 = data.draw(st.integers(0, session.n - 1))
    r1 = data.draw(st.integers(r0 + 1, session.n))
    for name in ("scores", "scaled_scores", "weights", "position_bias"):
        want = getattr(dense, name)
        if want is None:  # ALiBi's bias in a session without ALiBi
            assert long.matrix(name, h) is None and long.row(name, h, i) is None and lean.row(name, h, i) is None
            continue
        scale = tol * max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_array_equal(dense.matrix(name, h), want[h])
        np.testing.assert_allclose(long.matrix(name, h)[r0:r1, :], want[h, r0:r1], rtol=tol, atol=scale, err_msg=name)
        for result in (long, lean):
            np.testing.assert_allclose(result.row(name, h, i), want[h, i], rtol=tol, atol=scale, err_msg=name)
        np.testing.assert_allclose(long.rows(name, h, [i, r0]), want[h, [i, r0]], rtol=tol, atol=scale)
    for result in (dense, long):  # the same refusals, whichever path computed it
        with pytest.raises(EngineError, match="unknown matrix 'values'"):
            result.matrix("values", 0)
        with pytest.raises(EngineError, match=f"head {session.heads} is outside"):
            result.matrix("weights", session.heads)
        with pytest.raises(EngineError, match=f"query {session.n} is outside"):
            result.row("weights", 0, session.n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log_sum_exp_is_the_same_for_a_dense_and_a_long_result(dtype):
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[2] = True  # a query that sees no key: −inf
    blocked[4, :3] = True
    session = small_session(mask=Mask("custom", blocked=blocked))
    dense, long = compute(session, dtype=dtype), compute_long(session, dtype=dtype)
    with np.errstate(divide="ignore"):
        want = np.log(np.where(blocked, 0.0, np.exp(np.asarray(dense.scaled_scores, dtype=np.float64))).sum(-1))
    tol = 1e-5 if dtype == "float32" else 1e-12
    for result in (dense, long):
        got = result.log_sum_exp
        assert got.shape == (session.heads, 5) and np.isneginf(got[:, 2]).all()
        np.testing.assert_allclose(np.delete(got, 2, axis=1), np.delete(want, 2, axis=1), rtol=tol, atol=tol)
    assert compute(session, keep=("Q",)).log_sum_exp is None
