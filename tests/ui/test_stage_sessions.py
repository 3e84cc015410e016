"""The window draws sessions with the stages of a real head: grouped-query K/V heads and a
cross-attention source of another length (keys are the source's tokens)."""

import numpy as np
import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings


@pytest.fixture
def open_window(qtbot, isolated):
    made = []

    def make(session):
        doc = SessionDocument(session)
        window = MainWindow(doc, AppSettings())
        window.ask_unsaved = lambda: "discard"
        qtbot.addWidget(window)
        window.show()
        qtbot.waitExposed(window)
        qtbot.waitUntil(lambda: doc.result is not None and doc.result.tokens == session.tokens)
        made.append(window)
        return window

    yield make
    for window in made:
        window.actions.autosaver.discard()
        window.document.shutdown()


def _panel(window, kind):
    return next(p for p in window.panels if p.kind == kind)


def test_grouped_query_heads_draw_the_shared_kv_head(open_window, qtbot):
    rng = np.random.default_rng(0)
    s = Session(tuple("abcd"), rng.normal(size=(4, 2)), rng.normal(size=(4, 2, 2)), rng.normal(size=(2, 2, 2)),
                rng.normal(size=(2, 2, 3)), b_query=np.ones((4, 2)), norm=Norm("rms"), positions=Positions("alibi"),
                mask=Mask("causal"))
    window = open_window(s)
    doc = window.document
    doc.selection.set(head=3, query=2, key=1)
    qtbot.waitUntil(lambda: doc.selection.current.head == 3)
    qkv = _panel(window, "qkv")
    qkv.redraw()
    assert np.array_equal(qkv.k_view.data, doc.result.K[1])  # query head 3 reads K/V head 1
    assert "query head 3 reads K/V head 1" in _panel(window, "explain").text_view.toPlainText()


def test_cross_attention_puts_the_source_tokens_along_the_bottom(open_window, qtbot):
    s = build_preset("translate").session
    s = s.replace(source=Source(("the", "black", "cat", "."), np.vstack([s.source.embeddings, np.zeros((1, 4))])),
                  mask=Mask("padding", padding=(3,)))
    window = open_window(s)
    doc = window.document
    doc.selection.set(query=2, key=3)
    assert doc.selection.current.key == 3  # a key beyond the 3 queries is a source position
    weights = _panel(window, "weights")
    weights.redraw()
    assert weights.view.matrix_shape == (3, 4)
    assert weights.view.getAxis("bottom").labels == ("the", "black", "cat", ".")
    assert weights.view.getAxis("left").labels == ("le", "chat", "noir")
    qkv = _panel(window, "qkv")
    qkv.redraw()
    assert qkv.k_view.getAxis("left").labels == ("the", "black", "cat", ".")  # K's rows are the source's
    assert qkv.k_view.matrix_shape == (4, 3) and qkv.q_view.matrix_shape == (3, 3)


def test_stage_panels_appear_only_for_sessions_that_use_their_stage(open_window, qtbot):
    window = open_window(build_preset("rope").session)
    shown = lambda kind: not window.docks[kind].isHidden()  # noqa: E731
    assert shown("rope") and not shown("alibi") and not shown("attention_input")
    rng = np.random.default_rng(1)
    alibi = Session(tuple("abcd"), rng.normal(size=(4, 2)), rng.normal(size=(2, 2, 2)), rng.normal(size=(2, 2, 2)),
                    rng.normal(size=(2, 2, 2)), norm=Norm("layer"), positions=Positions("alibi"))
    window.document.edit(alibi, "alibi")
    qtbot.waitUntil(lambda: shown("alibi"))
    assert shown("attention_input") and not shown("rope")
    window.document.undo_stack.undo()
    qtbot.waitUntil(lambda: shown("rope"))
    assert not shown("alibi")


def test_the_rope_panel_comes_to_the_front_beside_the_scaled_scores(open_window, qtbot):
    window = open_window(build_preset("rope").session)
    rope = _panel(window, "rope")
    qtbot.waitUntil(lambda: rope.is_on_screen)
    assert _panel(window, "scaled_scores").is_on_screen  # the scores the offset leaves unchanged
    assert not _panel(window, "weights").is_on_screen  # a tab behind it, one click away
