"""An edit costs what it changed: one copy of the touched array, a few bytes of undo history."""

import numpy as np
import pytest

from attnexplorer.core.editing import edits
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.session_arrays import derived_from, with_values
from attnexplorer.core.editing.session_change import SessionChange


def big_session(heads=4, d=64, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                   w_query=rng.normal(size=(heads, d, d)), w_key=rng.normal(size=(heads, d, d)),
                   w_value=rng.normal(size=(heads, d, d)))


def test_a_cell_edit_shares_every_array_it_does_not_touch():
    s = big_session()
    t = edits.set_cell(s, "W_q", 3, 4, 9.5, head=2)
    assert t.w_key is s.w_key and t.w_value is s.w_value and t.embeddings is s.embeddings
    assert t.w_query is not s.w_query and not t.w_query.flags.writeable
    assert t.w_query[2, 3, 4] == 9.5 and s.w_query[2, 3, 4] != 9.5
    changed = np.flatnonzero(t.w_query != s.w_query)
    base, flat = derived_from(t.w_query)
    assert base is s.w_query and list(flat) == list(changed) == [np.ravel_multi_index((2, 3, 4), s.w_query.shape)]
    # The new array is trusted as it is: building a session from it copies nothing again.
    assert t.replace(scale=t.scale).w_query is t.w_query


def test_a_block_records_exactly_the_cells_it_wrote():
    s = big_session()
    t = edits.set_block(s, "W_v", 1, 2, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], head=1)
    base, flat = derived_from(t.w_value)
    assert base is s.w_value
    assert sorted(flat) == sorted(np.flatnonzero(t.w_value != s.w_value))
    np.testing.assert_array_equal(t.w_value[1, 1:3, 2:5], [[1, 2, 3], [4, 5, 6]])
    x = edits.set_cell(s, "embeddings", 4, 0, -2.0)
    assert derived_from(x.embeddings)[0] is s.embeddings and x.w_query is s.w_query


def test_with_values_needs_a_session_array():
    with pytest.raises(SessionError, match="array of a session"):
        with_values(np.zeros((2, 2)), (0, 0), 1.0)


def test_a_cell_edit_costs_bytes_of_history_and_goes_both_ways():
    s = big_session(heads=8, d=128)
    t = edits.set_cell(s, "W_k", 5, 6, 1.25, head=7)
    change = SessionChange(s, t)
    assert change.nbytes <= 64  # positions and two values, not a 4 MB copy of W_k
    back = change.undo(t)
    assert back == s and back.w_query is t.w_query  # untouched arrays stay shared
    assert change.redo(back) == t


def test_shape_and_setting_changes_are_recorded_whole():
    s = big_session()
    for t in (edits.resize_dk(s, 3), edits.set_heads(s, 2), edits.delete_token(s, 1),
              edits.set_mask(s, Mask("causal")), edits.set_token(s, 0, "hello"),
              edits.set_matrix(s, "embeddings", np.ones((5, 64)))):
        change = SessionChange(s, t)
        assert change.undo(t) == s
        assert change.redo(s) == t
    assert SessionChange(s, s).undo(s) is s  # nothing changed: nothing to do


def test_changes_chain_like_an_undo_stack():
    s0 = big_session()
    s1 = edits.set_cell(s0, "W_q", 0, 0, 1.0)
    s2 = edits.set_cell(s1, "W_q", 0, 1, 2.0)
    s3 = edits.set_mask(s2, Mask("causal"))
    steps = [SessionChange(a, b) for a, b in ((s0, s1), (s1, s2), (s2, s3))]
    current = s3
    for step, expected in zip(reversed(steps), (s2, s1, s0)):
        current = step.undo(current)
        assert current == expected
    for step, expected in zip(steps, (s1, s2, s3)):
        current = step.redo(current)
        assert current == expected


def test_a_mask_click_keeps_the_cell_not_the_matrix():
    s = big_session(n=300).replace(mask=Mask("causal"))
    t = edits.toggle_blocked(s, 10, 20)
    u = edits.toggle_blocked(t, 3, 2)
    first, second = SessionChange(s, t), SessionChange(t, u)
    # Both steps keep a cell, not a 300 × 300 matrix; the first keeps the causal mask as itself.
    assert first.nbytes <= 64 and second.nbytes <= 64
    back = second.undo(u)
    assert back.mask == t.mask and back.mask.kind == "custom" and not back.mask.blocked.flags.writeable
    assert second.redo(back).mask == u.mask
    assert bool(u.mask.blocked[3, 2]) and not bool(t.mask.blocked[3, 2])
    assert first.undo(t).mask is s.mask
    assert first.redo(s).mask == t.mask
    # A mask redrawn wholesale (more than a third of it) is kept whole, and counted.
    flipped = s.replace(mask=Mask("custom", blocked=~s.mask.matrix(300)))
    whole = SessionChange(s, flipped)
    assert whole.nbytes >= 300 * 300 and whole.undo(flipped).mask == s.mask and whole.redo(s).mask == flipped.mask
    # The new mask holds the edit's own array: nothing the caller holds can change it.
    with pytest.raises(ValueError):
        u.mask.blocked[0, 0] = True


def test_a_mask_made_custom_unchanged_is_still_a_step():
    s = big_session(n=6).replace(mask=Mask("window", window=2))
    t = s.replace(mask=Mask("custom", blocked=s.mask.matrix(6)))
    change = SessionChange(s, t)
    assert change.undo(t).mask is s.mask and change.redo(s).mask == t.mask and change.nbytes == 0


def test_undo_restores_an_array_that_came_in_fortran_order():
    """A real model's layer hands its weights over transposed (``x @ W``: Fortran order). The
    session kept that order, where ``reshape(-1)`` is a copy: undoing a W_o cell edit wrote the
    old numbers into a temporary, and the tables kept the edit while the history said undone."""
    from attnexplorer.core.inputs.session_arrays import with_flat_values

    session = big_session(heads=2, d=8)
    rows = session.w_value.shape[0] * session.w_value.shape[2]   # heads × d_v
    w_out = np.asfortranarray(np.arange(float(rows * 3)).reshape(3, rows).T / 7.0)   # transposed, as a model's
    session = session.replace(w_out=w_out)
    assert session.w_out.flags.c_contiguous
    edited = np.array(session.w_out)
    edited[0, :] = 5.0
    after = session.replace(w_out=edited)
    back = SessionChange(session, after).undo(after)
    assert np.array_equal(back.w_out, session.w_out)
    flat = np.array([1, 2])
    assert np.array_equal(with_flat_values(session.w_out, flat, [9.0, 9.0]).reshape(-1)[flat], [9.0, 9.0])
