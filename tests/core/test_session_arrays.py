"""The copies an edit makes of a session's arrays: a one-cell edit of large weights copies
about one page, not the whole array, and every session keeps its own numbers."""

import gc
import mmap
import os
import tracemalloc

import numpy as np
import pytest

from attnexplorer.core.editing import edits
from attnexplorer.core.inputs import session_arrays
from attnexplorer.core.inputs.session import Session
from attnexplorer.core.inputs.session_arrays import copy_on_write, derived_from
from attnexplorer.core.editing.session_change import SessionChange

needs_memfd = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="copy-on-write copies need memfd_create (Linux)")

HEADS, D = 16, 512  # the bench's W_q edit: 32 MB a weight array, 2 MB a head


@pytest.fixture(scope="module")
def big():
    rng = np.random.default_rng(0)
    return Session(tokens=("a", "b", "c"), embeddings=rng.normal(size=(3, D)),
                   w_query=rng.normal(size=(HEADS, D, D)), w_key=rng.normal(size=(HEADS, D, D)),
                   w_value=rng.normal(size=(HEADS, D, D)))


@needs_memfd
def test_a_w_q_cell_edit_copies_at_most_one_heads_matrix(big):
    first = edits.set_cell(big, "W_q", 0, 0, 1.0, head=0)  # starts the chain: one whole copy
    assert copy_on_write(first.w_query)
    one_head = big.w_query[0].nbytes
    tracemalloc.start()  # numpy reports its arrays' memory to tracemalloc
    try:
        s = first
        for k in range(10):
            s = edits.set_cell(s, "W_q", 5 * k, 7 * k + 1, 0.5 + k, head=k % HEADS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < one_head / 8, f"{peak} bytes allocated for 10 cell edits"
    assert copy_on_write(s.w_query)
    assert s.w_query[9 % HEADS, 45, 64] == 9.5
    # The chain's one memory file is counted where memory is measured (the bench's edit row).
    assert session_arrays.memory_file_bytes() >= big.w_query.nbytes


@needs_memfd
def test_every_session_of_a_chain_keeps_its_own_numbers(big):
    expected = np.array(big.w_query)
    sessions, truths = [big], [expected.copy()]
    rng = np.random.default_rng(1)
    s = big
    for k in range(40):  # one-cell edits, blocks, and the same cell twice
        h, r, c = int(rng.integers(HEADS)), int(rng.integers(D - 4)), int(rng.integers(D - 4))
        if k % 5 == 4:
            block = rng.normal(size=(3, 4))
            s = edits.set_block(s, "W_q", r, c, block, head=h)
            expected[h, r:r + 3, c:c + 4] = block
        else:
            s = edits.set_cell(s, "W_q", r, c, float(k), head=h)
            expected[h, r, c] = float(k)
        sessions.append(s)
        truths.append(expected.copy())
    for session, truth in zip(sessions, truths):
        np.testing.assert_array_equal(session.w_query, truth)
        assert not session.w_query.flags.writeable
        with pytest.raises(ValueError):
            session.w_query[0, 0, 0] = 7.0
    # Each edit still says which cells it changed, for the engine's device copies and undo.
    base, flat = derived_from(sessions[-1].w_query)
    assert base is sessions[-2].w_query
    differ = np.flatnonzero(sessions[-1].w_query.reshape(-1) != sessions[-2].w_query.reshape(-1))
    assert set(differ) <= set(flat.tolist())


@needs_memfd
def test_undo_and_redo_along_a_copy_on_write_chain(big):
    # Blocks just over half the chain's page budget: each is copied on write, and every second
    # one takes the chain past its budget, so the chain starts new memory files along the way.
    rows = (session_arrays.COW_MAX_PAGES // 2 + 1) * mmap.PAGESIZE // (D * big.w_query.itemsize)
    assert 0 < rows < D, "the blocks fit in one head"
    gc.collect()
    files = session_arrays.memory_file_bytes()
    s, changes, states, sessions = big, [], [np.array(big.w_query)], []
    for k in range(8):
        t = edits.set_block(s, "W_q", 0, 0, np.full((rows, D), -float(k)), head=k)
        assert copy_on_write(t.w_query)
        changes.append(SessionChange(s, t))
        s = t
        states.append(np.array(s.w_query))
        sessions.append(s)   # each keeps its memory file alive, to be counted
    assert session_arrays.memory_file_bytes() - files >= 4 * big.w_query.nbytes   # a new file every second edit
    del sessions
    for change, before in zip(reversed(changes), reversed(states[:-1])):
        s = change.undo(s)
        np.testing.assert_array_equal(s.w_query, before)
    for change, after in zip(changes, states[1:]):
        s = change.redo(s)
        np.testing.assert_array_equal(s.w_query, after)
    assert s == Session(tokens=big.tokens, embeddings=big.embeddings, w_query=states[-1], w_key=big.w_key,
                        w_value=big.w_value)


def test_small_arrays_and_large_edits_are_plain_copies(big):
    small = Session(tokens=("a",), embeddings=np.ones((1, 4)), w_query=np.ones((1, 4, 4)),
                    w_key=np.ones((1, 4, 4)), w_value=np.ones((1, 4, 4)))
    edited = edits.set_cell(small, "W_q", 0, 0, 2.0)
    assert not copy_on_write(edited.w_query) and edited.w_query[0, 0, 0] == 2.0
    # One head pasted whole is still about one head's pages; three heads are a whole copy.
    pasted = edits.set_block(big, "W_q", 0, 0, np.zeros((D, D)), head=2)
    assert copy_on_write(pasted.w_query)
    assert not pasted.w_query[2].any() and np.array_equal(pasted.w_query[3], big.w_query[3])
    whole = session_arrays.with_values(big.w_query, (slice(0, 3),), 0.0)
    assert not copy_on_write(whole)
    assert not whole[:3].any() and np.array_equal(whole[3:], big.w_query[3:])


@needs_memfd
def test_a_prepared_array_starts_its_chain_from_the_file_written_ahead(big):
    # The first edit of a chain maps a memory file holding the array's numbers; prepared
    # (a cell's editor opened), that file is written off the caller's thread, and the edit
    # then maps it instead of writing a second one.
    rng = np.random.default_rng(2)
    s = big.replace(w_query=rng.normal(size=(HEADS, D, D)))  # a fresh array, no chain yet
    # The files are counted process-wide: let a file an earlier test asked for be written
    # first (one preparing thread, first come first served, so waiting for a file asked for
    # now waits for those), and keep this one alive until the end.
    earlier = big.replace(w_key=rng.normal(size=(HEADS, D, D)))
    assert edits.prepare_edit(earlier, "W_k") and session_arrays.prepared(earlier.w_key)
    gc.collect()
    files = session_arrays.memory_file_bytes()
    assert edits.prepare_edit(s, "W_q")
    assert edits.prepare_edit(s, "W_q")  # asked again: the same file, not a second one
    assert session_arrays.prepared(s.w_query) and not session_arrays.prepared(big.w_key)
    assert session_arrays.memory_file_bytes() - files == s.w_query.nbytes  # written before any edit
    first = edits.set_cell(s, "W_q", 3, 4, 9.5, head=1)
    assert copy_on_write(first.w_query)
    assert session_arrays.memory_file_bytes() - files == s.w_query.nbytes  # one file: the prepared one
    expected = np.array(s.w_query)
    expected[1, 3, 4] = 9.5
    np.testing.assert_array_equal(first.w_query, expected)
    # The next edit continues the same chain (no new file), and undoing gives the numbers back.
    second = edits.set_cell(first, "W_q", 5, 6, -1.0, head=2)
    assert session_arrays.memory_file_bytes() - files == s.w_query.nbytes
    assert SessionChange(first, second).undo(second) == first
    # An array of a chain needs nothing written ahead; a small one and a stage-less table neither.
    assert edits.prepare_edit(second, "W_q")
    assert session_arrays.memory_file_bytes() - files == s.w_query.nbytes
    small = Session(tokens=("a",), embeddings=np.ones((1, 4)), w_query=np.ones((1, 4, 4)),
                    w_key=np.ones((1, 4, 4)), w_value=np.ones((1, 4, 4)))
    assert not edits.prepare_edit(small, "W_q")
    assert not edits.prepare_edit(small, "W_o")  # this session has no output projection
    assert session_arrays.prepared(earlier.w_key)


@needs_memfd
def test_a_long_chain_starts_again_from_a_file_written_ahead(big):
    # Each edit of a chain writes again every page written since the chain's file was made;
    # past REFRESH_PAGES of them, a file holding the newest array is written off the caller's
    # thread and the next edit starts from it, rewriting only its own page.
    rng = np.random.default_rng(4)
    s = big.replace(w_query=rng.normal(size=(HEADS, D, D)))
    expected = np.array(s.w_query)
    rows_per_page = mmap.PAGESIZE // (D * s.w_query.itemsize) or 1
    gc.collect()
    files = session_arrays.memory_file_bytes()
    for k in range(session_arrays.REFRESH_PAGES):  # each edit on a page of its own
        row = (k * rows_per_page) % D
        s = edits.set_cell(s, "W_q", row, k % D, float(k), head=k * rows_per_page // D)
        expected[k * rows_per_page // D, row, k % D] = float(k)
    assert session_arrays.rewritten_pages(s.w_query) == session_arrays.REFRESH_PAGES
    assert session_arrays.prepared(s.w_query)  # written ahead for the next edit
    assert session_arrays.memory_file_bytes() - files == 2 * s.w_query.nbytes
    after = edits.set_cell(s, "W_q", 1, 2, -3.0, head=HEADS - 1)
    expected[HEADS - 1, 1, 2] = -3.0
    assert copy_on_write(after.w_query) and session_arrays.rewritten_pages(after.w_query) == 1
    np.testing.assert_array_equal(after.w_query, expected)
    np.testing.assert_array_equal(SessionChange(s, after).undo(after).w_query, s.w_query)
