"""The undo history: bounded by steps and by memory, and a cell edit costs bytes in it."""

from __future__ import annotations

import numpy as np
import pytest

from attnexplorer.core.inputs.session import Session
from attnexplorer.ui import user_actions
from attnexplorer.ui.document import UNDO_STEPS, SessionDocument


def big_session(heads=4, d=96, n=6):
    rng = np.random.default_rng(1)
    return Session(tokens=tuple(f"t{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)) / 4,
                   w_query=rng.normal(size=(heads, d, d)) / 10, w_key=rng.normal(size=(heads, d, d)) / 10,
                   w_value=rng.normal(size=(heads, d, d)) / 10)


@pytest.fixture
def doc(qtbot):
    d = SessionDocument(big_session())
    yield d
    d.shutdown()


def test_twenty_cell_edits_keep_bytes_not_copies_and_undo_all_the_way(doc):
    start = doc.session
    for k in range(20):
        assert user_actions.set_cell(doc, "W_q", k, k + 1, str(k + 0.5), head=k % 4)
    assert doc.undo_stack.count() == 20
    assert doc.history_bytes() < 20 * 64  # a 4-head 96×96 W_q is 295 KB; each step keeps a cell
    assert doc.session.w_key is start.w_key  # untouched arrays are shared all along
    edited = doc.session
    for _ in range(20):
        doc.undo_stack.undo()
    assert doc.session == start
    for _ in range(20):
        doc.undo_stack.redo()
    assert doc.session == edited
    assert doc.result.session is doc.session  # every step was computed


def test_typing_into_one_cell_again_is_one_step_that_undoes_to_the_start(doc):
    start = doc.session
    for text in ("1", "12", "1/3"):
        assert user_actions.set_cell(doc, "embeddings", 2, 3, text)
    assert doc.undo_stack.count() == 1 and doc.session.embeddings[2, 3] == pytest.approx(1 / 3)
    doc.undo_stack.undo()
    assert doc.session == start


def test_the_history_is_bounded_by_steps_and_by_memory(doc):
    assert doc.undo_stack.undoLimit() == UNDO_STEPS
    # Each resize records W_q and W_k whole (4 heads × 96 × d_k × 8 bytes each, at the larger
    # d_k): 590, 553, 492, 430 and 369 kB. With 900 kB of room only the last two fit.
    doc.undo_stack.history.limit_bytes = 900_000
    start = doc.session
    sizes = (90, 80, 70, 60, 50)
    for d_k in sizes:
        assert user_actions.resize_dk(doc, d_k)
    assert doc.history_bytes() <= 900_000
    for _ in range(doc.undo_stack.count()):
        doc.undo_stack.undo()
    # The last two steps fit (W_q and W_k of d_k 70 → 60 → 50); the older three were forgotten:
    # undo walks back to d_k = 70 and no further, never to a wrong session.
    assert doc.session.d_k == 70 and doc.session != start
    assert not doc.undo_stack.canUndo()
    doc.undo_stack.redo()
    assert doc.session.d_k == 60


def test_a_refused_edit_adds_no_step(doc):
    messages = []
    doc.message.connect(messages.append)
    assert not user_actions.set_cell(doc, "W_q", 0, 0, "nan")
    assert not user_actions.paste_text(doc, "W_q", 95, 95, "1 2\n3 4")
    assert doc.undo_stack.count() == 0
    assert messages[0].startswith("W_q[0,0] (head 0) not changed:")
    assert "does not fit" in messages[1]
