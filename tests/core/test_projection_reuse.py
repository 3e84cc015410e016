"""An edit's projections made from the previous ones equal a compute from scratch.

The engine keeps the last X·W product and, after a small edit, recomputes only the columns
(a weight or bias cell) and rows (an embedding row, through positions and norm) that changed
(``core/compute/projection_reuse.py``). Here chains of edits are computed the way the window computes
them (each result alive while the next edit is computed), and every result is compared with a
compute of an unrelated copy of the same session, which shares no cache with the chain.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import stage_sessions

from attnexplorer.core.editing import edits
from attnexplorer.core.compute import projection_reuse
from attnexplorer.core.compute.engine import INTERMEDIATES, STAGE_INTERMEDIATES, compute
from attnexplorer.core.inputs.session import Session
from attnexplorer.core.inputs.session_arrays import with_values
from attnexplorer.core.inputs.stages import Source

TOL = {"float64": 1e-10, "float32": 2e-5}
unit = st.floats(-2, 2, allow_nan=False, width=64)
FIELDS = ("embeddings", "w_query", "w_key", "w_value", "w_out", "b_query", "b_key", "b_value", "b_out", "source")


def copy_of(session: Session) -> Session:
    """The same session made of fresh arrays: no device copy or product is shared with it."""
    fresh = {name: None if getattr(session, name) is None else np.array(getattr(session, name))
             for name in ("embeddings", "w_query", "w_key", "w_value", "w_out", "b_query", "b_key", "b_value", "b_out")}
    source = session.source
    if source is not None:
        source = Source(source.tokens, np.array(source.embeddings))
    return session.replace(source=source, **fresh)


def edited(session: Session, field: str, where: int, value: float) -> Session | None:
    """``session`` with one number of ``field`` (the source's embeddings for "source") set, as
    an edit makes it (``with_values``: the engine may patch it in), or None when absent."""
    if field == "source":
        if session.source is None:
            return None
        x = session.source.embeddings
        flat = np.unravel_index(where % x.size, x.shape)
        return session.replace(source=Source(session.source.tokens, with_values(x, flat, value)))
    a = getattr(session, field)
    if a is None:
        return None
    return session.replace(**{field: with_values(a, np.unravel_index(where % a.size, a.shape), value)})


def assert_same_result(ours, reference, dtype):
    for name in INTERMEDIATES + STAGE_INTERMEDIATES:
        a, b = getattr(ours, name), getattr(reference, name)
        assert (a is None) == (b is None), name
        if a is None:
            continue
        scale = max(1.0, float(np.abs(b).max()) if b.size else 1.0)
        np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype] * scale, err_msg=name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session=stage_sessions(values=unit, max_n=6, max_d=4, max_heads=4),
       steps=st.lists(st.tuples(st.sampled_from(FIELDS), st.integers(0, 10_000), unit), min_size=1, max_size=6),
       dtype=st.sampled_from(["float64", "float32"]))
def test_a_chain_of_edits_computes_what_a_fresh_compute_does(session, steps, dtype):
    chain = [(session, compute(session, dtype=dtype))]
    for field, where, value in steps:
        new = edited(chain[-1][0], field, where, value)
        if new is not None:
            chain.append((new, compute(new, dtype=dtype)))  # the previous result is still alive
    for s, result in chain:
        assert_same_result(result, compute(copy_of(s), dtype=dtype), dtype)


def big_session(heads=4, d=32, n=6, seed=0) -> Session:
    rng = np.random.default_rng(seed)
    return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                   w_query=rng.normal(size=(heads, d, d)), w_key=rng.normal(size=(heads, d, d)),
                   w_value=rng.normal(size=(heads, d, d)))


def made_since(before: projection_reuse.Tally) -> dict:
    """How the products made since ``before`` were made (``projection_reuse.tally``)."""
    now = projection_reuse.tally()
    return {way: getattr(now, way) - getattr(before, way) for way in projection_reuse.Tally._fields}


@pytest.mark.parametrize("table, row, col, head", [("W_q", 3, 5, 2), ("W_k", 0, 31, 3), ("W_v", 7, 0, 0),
                                                   ("embeddings", 4, 9, 0)])
def test_a_cell_edit_reuses_the_product_and_leaves_the_old_result_alone(table, row, col, head):
    before = big_session()
    old = compute(before)
    old_q, old_v = old.Q.copy(), old.V.copy()
    after = edits.set_cell(before, table, row, col, 2.5, head)
    start = projection_reuse.tally()
    new = compute(after)
    assert made_since(start) == {"reused": 1, "declined": 0, "fresh": 0}
    assert_same_result(new, compute(copy_of(after)), "float32")
    # The old result's arrays are views of the old product: never written.
    np.testing.assert_array_equal(old.Q, old_q)
    np.testing.assert_array_equal(old.V, old_v)


def test_an_edit_of_every_cell_is_made_from_scratch():
    before = big_session()
    old = compute(before)  # noqa: F841 (kept alive, as the window keeps its result)
    after = before.replace(w_query=before.w_query + 1.0)
    start = projection_reuse.tally()
    compute(after)
    # a new array, not an edit of the old one: nothing to reuse
    assert made_since(start) == {"reused": 0, "declined": 0, "fresh": 1}


def test_a_product_is_kept_only_while_it_is_small(monkeypatch):
    monkeypatch.setattr(projection_reuse, "MAX_KEPT", 100)
    small, large = big_session(heads=1, d=4, n=8), big_session(heads=1, d=4, n=9)  # 96 and 108 numbers
    compute(small)
    assert any(kept[4].shape == (8, 12) for kept in projection_reuse._PRODUCTS.values())
    compute(large)
    assert not any(kept[4].shape == (9, 12) for kept in projection_reuse._PRODUCTS.values())


def test_a_value_cell_of_a_shared_kv_head_is_patched_where_it_lives():
    # Regression: the in-place patch put W_v's columns after 2·H·d_k, past the end of the
    # joined weights when K/V heads are fewer than query heads (an IndexError from the engine).
    rng = np.random.default_rng(3)
    before = Session(tokens=("a", "b", "c"), embeddings=rng.normal(size=(3, 6)), w_query=rng.normal(size=(4, 6, 3)),
                     w_key=rng.normal(size=(2, 6, 3)), w_value=rng.normal(size=(2, 6, 5)))
    old = compute(before)  # noqa: F841 (alive, so the edit is patched into its weights)
    after = edits.set_cell(before, "W_v", 1, 4, 7.0, head=3)
    assert_same_result(compute(after), compute(copy_of(after)), "float32")


def test_a_kept_products_copy_is_equal_and_its_own():
    import torch

    from attnexplorer.core.compute.projection_reuse import unmapped_copy

    for t in (torch.randn(8, 24576), torch.randn(3, 5)):  # a mapping of its own, and a small one
        value = unmapped_copy(t)
        assert torch.equal(value, t) and value.shape == t.shape and value.dtype == t.dtype
        value[:, 0] = 7.0  # written as an edit writes its changed columns ...
        assert not torch.any(t[:, 0] == 7.0)  # ... the product a published result holds stays
