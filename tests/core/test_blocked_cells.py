"""The mask read a block at a time (``core.compute.blocked_cells``), against the whole mask the dense engine makes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import masks, small_session

from attnexplorer.core.compute.blocked_cells import MaskMatrix, any_blocked, blocked_rows, mask_and_blocked_rows
from attnexplorer.core.inputs.session import Mask


def session_with(mask, n):
    base = small_session()
    tokens = tuple(f"t{i}" for i in range(n))
    return base.replace(tokens=tokens, embeddings=np.ones((n, base.d)), mask=mask)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), masks(n), st.lists(st.integers(-n, n - 1), min_size=4,
                                                                                       max_size=4))))
def test_the_mask_read_in_blocks_is_the_whole_mask(args):
    n, mask, (a, b, c, d) = args
    session = session_with(mask, n)
    whole, rows, anything = mask_and_blocked_rows(session)
    lazy = MaskMatrix(session)
    assert lazy.shape == whole.shape and len(lazy) == n and lazy.any() == bool(whole.any()) == anything
    np.testing.assert_array_equal(blocked_rows(session), rows)
    assert any_blocked(session) == anything
    np.testing.assert_array_equal(lazy[:, :], whole)
    np.testing.assert_array_equal(lazy[a], whole[a])
    assert lazy[a, c] == whole[a, c]
    np.testing.assert_array_equal(lazy[min(a, b) % n:max(a, b) % n + 1, c], whole[min(a, b) % n:max(a, b) % n + 1, c])
    np.testing.assert_array_equal(lazy[a:b, c:d], whole[a:b, c:d])
    np.testing.assert_array_equal(lazy.block(slice(a, b), slice(c, d)), whole[a:b, c:d])


def test_a_custom_mask_is_read_from_the_sessions_own_matrix_not_copied_whole():
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[1, 3] = blocked[4] = True
    session = session_with(Mask("custom", blocked=blocked), 5)
    lazy = MaskMatrix(session)
    assert blocked_rows(session).tolist() == [False, False, False, False, True]
    assert lazy[1, 3] and not lazy[1, 2] and lazy[4].all()
    # nothing n × n of its own: it reads the session's matrix
    assert not any(np.size(value) >= blocked.size for value in vars(lazy).values() if value is not session)


def test_a_padding_mask_over_every_key_blocks_every_row():
    session = session_with(Mask("padding", padding=(0, 1, 2)), 3)
    assert blocked_rows(session).all() and any_blocked(session)
    assert not blocked_rows(session_with(Mask("padding", padding=(0, 2)), 3)).any()


def test_a_mask_is_read_by_indices_and_slices_only():
    lazy = MaskMatrix(session_with(Mask("causal"), 4))
    for bad in ((slice(0, 4, 2), slice(None)), (0, 1, 2), ([0, 1],), (True,)):
        with pytest.raises(IndexError):
            lazy[bad]
    with pytest.raises(IndexError, match="out of bounds"):
        lazy[4]
    with pytest.raises(TypeError, match="read in blocks"):
        np.asarray(lazy)
