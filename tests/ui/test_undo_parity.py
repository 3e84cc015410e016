"""The Qt-free undo history (app/history.py) behaves as the QUndoStack it replaced: any mix of
edits (merging or not), undos, redos and saves leaves both with the same steps, texts, index,
clean state and current value."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from PySide6.QtGui import QUndoCommand, QUndoStack

from attnexplorer.app.history import UndoHistory
from attnexplorer.core.inputs.session import Session

LIMIT = 4


class _Step(QUndoCommand):
    """What the window's QUndoStack held: a step from one value to another, merged by key."""

    def __init__(self, state: list, before: float, after: float, text: str, key):
        super().__init__(text)
        self.state, self.before, self.after, self.key = state, before, after, key

    def id(self) -> int:
        return 1 if self.key is not None else -1

    def mergeWith(self, other) -> bool:
        if other.key != self.key:
            return False
        self.after = other.after
        self.setText(other.text())
        return True

    def redo(self) -> None:
        self.state[0] = self.after

    def undo(self) -> None:
        self.state[0] = self.before


def _session(value: float) -> Session:
    return Session(tokens=("a", "b"), embeddings=np.array([[value, 0.0], [0.0, 1.0]]),
                   w_query=np.eye(2)[None], w_key=np.eye(2)[None], w_value=np.eye(2)[None])


operations = st.lists(st.one_of(
    st.tuples(st.just("edit"), st.integers(1, 50), st.sampled_from([None, "a", "b"])),
    st.just(("undo",)), st.just(("redo",)), st.just(("clean",))), max_size=30)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_the_history_matches_qundostack(qapp, ops):
    qt, value = QUndoStack(), [0.0]
    qt.setUndoLimit(LIMIT)
    current = [_session(0.0)]
    history = UndoHistory(lambda: current[0], lambda s: current.__setitem__(0, s), limit=LIMIT)
    for k, op in enumerate(ops):
        if op[0] == "edit":
            new = float(op[1])
            if new == value[0]:
                continue  # the document pushes nothing for an unchanged session
            text = f"edit {k}"
            qt.push(_Step(value, value[0], new, text, op[2]))
            history.push(current[0], _session(new), text, op[2])
        elif op[0] == "undo":
            qt.undo()
            history.undo()
        elif op[0] == "redo":
            qt.redo()
            history.redo()
        else:
            qt.setClean()
            history.set_clean()
        assert (history.count(), history.index(), history.is_clean()) == (qt.count(), qt.index(), qt.isClean()), op
        assert [history.text(i) for i in range(history.count())] == [qt.text(i) for i in range(qt.count())]
        assert (history.undo_text(), history.redo_text()) == (qt.undoText(), qt.redoText())
        assert current[0].embeddings[0, 0] == value[0]
