"""The streamed path for long inputs against the dense engine, where both fit.

Hypothesis draws sessions with every stage of a real head (biases, norm, positions incl. RoPE
and ALiBi, grouped K/V heads, cross-attention) and every mask and scale; the streamed pass
runs with tiny blocks so that many block edges are crossed. Everything it gives (normalisers,
tiles, rows, head outputs, output, pooled overviews) must equal the dense result: float32 to
1e-6, float64 to 1e-12 (relative to the largest magnitude in the compared matrix).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import masks, small_session, stage_sessions

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import EngineError
from attnexplorer.core.compute.long import Cancelled, stream
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.kernel.attention import alibi_bias
from attnexplorer.core.compute.stage_inputs import alibi_tensor

TOL = {"float32": 1e-6, "float64": 1e-12}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
unit = st.floats(-1, 1, allow_nan=False, width=64)


def assert_close(ours, ref, dtype, what):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, f"{what}: {ours.shape} != {ref.shape}"
    scale = max(1.0, float(np.nanmax(np.abs(ref))) if ref.size and not np.isnan(ref).all() else 1.0)
    np.testing.assert_allclose(ours, ref, rtol=TOL[dtype], atol=TOL[dtype] * scale, err_msg=what)


def pool_reference(matrix, blocked, fy, fx, pool, signed):
    """Pooling the dense matrix block by block, the plain way (blocked cells left out)."""
    rows, cols = matrix.shape
    out = np.full((-(-rows // fy), -(-cols // fx)), np.nan)
    for a in range(out.shape[0]):
        for b in range(out.shape[1]):
            cell = matrix[a * fy:(a + 1) * fy, b * fx:(b + 1) * fx].astype(np.float64)
            if blocked is not None:
                cell = cell[~blocked[a * fy:(a + 1) * fy, b * fx:(b + 1) * fx]]
            cell = cell.ravel()
            if cell.size == 0:
                continue
            if pool == "mean":
                out[a, b] = cell.mean()
            elif signed:
                hi, lo = cell.max(), cell.min()
                out[a, b] = lo if abs(lo) > abs(hi) else hi
            else:
                out[a, b] = cell.max()
    return out


@st.composite
def cases(draw):
    session = draw(stage_sessions(max_n=9, max_d=4, max_heads=4, values=unit, extra_ok=False))
    return (session, draw(st.sampled_from(["float32", "float64"])), draw(st.integers(1, 4)),
            draw(st.integers(1, 4)), draw(st.sampled_from(["max", "mean"])), draw(st.integers(1, 3)))


@SETTINGS
@given(cases(), st.data())
def test_streamed_equals_dense(case, data):
    session, dtype, fy, fx, pool, block_rows = case
    dense = compute(session, dtype=dtype)
    # A block of `block_rows` query rows of every head (and a whole number of pooled rows).
    block_bytes = block_rows * session.heads * session.n_keys * (8 if dtype == "float64" else 4)
    streamed = stream(session, dtype=dtype, overviews=("scores", "scaled_scores", "weights"), fy=fy, fx=fx,
                      pool=pool, block_bytes=block_bytes)
    assert streamed.Q.dtype == dense.Q.dtype
    for name in ("Q", "K", "V", "head_outputs", "output"):
        assert_close(getattr(streamed, name), getattr(dense, name), dtype, name)
    np.testing.assert_array_equal(streamed.blocked_rows, dense.blocked_rows)
    # The normalisers: each free row's largest scaled score, and its weights sum to 1 with them.
    masked = np.where(dense.mask, -np.inf, dense.scaled_scores)
    free = ~dense.blocked_rows
    assert_close(streamed.row_max[:, free], masked.max(axis=-1)[:, free], dtype, "row_max")
    assert np.all(streamed.row_sum[:, free] >= 1.0 - TOL[dtype])
    n, n_k = session.n, session.n_keys
    for head in range(session.heads):
        r0 = data.draw(st.integers(0, n - 1))
        r1 = data.draw(st.integers(r0, n))
        c0 = data.draw(st.integers(0, n_k - 1))
        c1 = data.draw(st.integers(c0, n_k))
        for what in ("scores", "scaled_scores", "weights"):
            tile = streamed.tile(head, slice(r0, r1), slice(c0, c1), what)
            assert_close(tile, getattr(dense, what)[head, r0:r1, c0:c1], dtype, f"{what} tile of head {head}")
        query = data.draw(st.integers(0, n - 1))
        row = streamed.row(head, query)
        for what in ("scores", "scaled_scores", "weights"):
            assert_close(getattr(row, what), getattr(dense, what)[head, query], dtype, f"{what} row")
        np.testing.assert_array_equal(row.blocked, dense.mask[query])
        assert_close(row.output, dense.head_outputs[head, query], dtype, "row output")
        # ALiBi's bias, made from the slopes as the engine adds it: the very same numbers.
        if dense.position_bias is None:
            assert row.position_bias is None and streamed.alibi_slopes is None
        else:
            np.testing.assert_array_equal(streamed.tile(head, slice(r0, r1), slice(c0, c1), "position_bias"),
                                          dense.position_bias[head, r0:r1, c0:c1])
            np.testing.assert_array_equal(row.position_bias, dense.position_bias[head, query])
            np.testing.assert_array_equal(streamed.alibi_slopes, session.positions.slopes_for(session.heads))
    for what, signed, masked_view in (("scores", True, False), ("scaled_scores", True, True), ("weights", False, True)):
        pooled = streamed.overviews[what]
        assert pooled.complete and (pooled.fy, pooled.fx, pooled.pool) == (fy, fx, pool)
        ref = np.stack([pool_reference(getattr(dense, what)[h], dense.mask if masked_view else None, fy, fx, pool, signed)
                        for h in range(session.heads)])
        np.testing.assert_array_equal(np.isnan(pooled.data), np.isnan(ref), err_msg=f"{what}: blank blocks")
        assert_close(np.nan_to_num(pooled.data), np.nan_to_num(ref), dtype, f"{what} {pool}-pooled")
        # The same overview made afterwards from the normalisers alone.
        again = streamed.overview(what, fy, fx, pool)
        np.testing.assert_array_equal(np.isnan(again.data), np.isnan(ref))
        assert_close(np.nan_to_num(again.data), np.nan_to_num(ref), dtype, f"{what} {pool}-pooled again")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), masks(n), st.integers(0, n), st.integers(0, n),
                                                      st.integers(0, n), st.integers(0, n))))
def test_a_mask_block_is_the_rectangle_of_the_whole_mask(args):
    n, mask, a, b, c, d = args
    rows, cols = slice(min(a, b), max(a, b)), slice(min(c, d), max(c, d))
    np.testing.assert_array_equal(mask.block(n, None, rows, cols), mask.matrix(n)[rows, cols])


def test_an_alibi_block_is_the_rectangle_of_the_whole_bias():
    import torch

    slopes = np.array([0.5, 0.25, 0.125])
    whole = alibi_tensor(slopes, 7, torch.float32, torch.device("cpu"))
    block = alibi_bias(slopes, slice(2, 5), slice(1, 7), torch.float32, torch.device("cpu"))
    assert torch.equal(block, whole[:, 2:5, 1:7])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_fully_masked_row_attends_to_nothing_as_in_the_dense_engine(dtype):
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[2] = True
    blocked[4, :3] = True
    session = small_session(mask=Mask("custom", blocked=blocked), w_out=True)
    dense = compute(session, dtype=dtype)
    streamed = stream(session, dtype=dtype, block_bytes=1)
    assert streamed.blocked_rows.tolist() == [False, False, True, False, False]
    assert streamed.row_max[0, 2] == -np.inf and streamed.row_sum[0, 2] == 0.0
    assert not np.isnan(streamed.tile(0, slice(None), slice(None))).any()
    np.testing.assert_array_equal(streamed.tile(1, slice(2, 3), slice(None)), 0.0)
    np.testing.assert_array_equal(streamed.head_outputs[:, 2], 0.0)
    assert_close(streamed.output, dense.output, dtype, "output")
    row = streamed.row(0, 2)
    assert row.blocked.all() and not row.weights.any() and not row.output.any()
    # Its pooled weights are blank (all blocked), not 0 and not NaN spread to other rows.
    pooled = streamed.overview("weights", 1, 1).data
    assert np.isnan(pooled[:, 2]).all() and not np.isnan(pooled[:, 3]).any()


def test_progress_is_reported_per_block_and_a_newer_edit_cancels():
    session = small_session()
    seen = []
    result = stream(session, block_bytes=1, progress=lambda done, n, pooled: seen.append((done, n, pooled["weights"].rows_done)))
    assert seen == [(i, 5, i) for i in range(1, 6)]
    assert result.overviews["weights"].complete
    calls = []

    def cancelled():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        stream(session, block_bytes=1, cancelled=cancelled)
    with pytest.raises(Cancelled):
        result.overview("weights", cancelled=lambda: True)


def test_overflow_and_bad_requests_are_refused_in_one_line():
    huge = small_session().replace(embeddings=np.full((5, 4), 1e30))
    with pytest.raises(EngineError, match="too large for float32"):
        stream(huge)
    result = stream(small_session())
    with pytest.raises(EngineError, match="head 2 is outside 0..1"):
        result.tile(2, slice(None), slice(None))
    with pytest.raises(EngineError, match="query 5 is outside 0..4"):
        result.row(0, 5)
    with pytest.raises(EngineError, match="unknown pooling 'median'"):
        result.overview("weights", pool="median")
    with pytest.raises(EngineError, match="unknown matrix 'values'"):
        stream(small_session(), overviews=("values",))
    with pytest.raises(EngineError, match="no position bias"):
        result.tile(0, slice(None), slice(None), "position_bias")


def test_one_cancelled_for_the_streamed_path_and_model_loading():
    # A caller that stops either kind of work catches one exception, whichever raised it.
    from attnexplorer.core.errors import Cancelled as core_cancelled
    from attnexplorer.models.sources import Cancelled as model_cancelled

    assert Cancelled is core_cancelled is model_cancelled
