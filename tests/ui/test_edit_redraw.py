"""What a cell edit redraws: every panel on screen shows the engine's numbers for the new
session, and a panel whose picture the edit cannot change (the embeddings' after a W_q edit)
is not drawn again."""

from __future__ import annotations

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions
from attnexplorer.ui import user_actions
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import AlibiPanel, InputPanel
from ui_helpers import close_window, open_window, shown


def staged_session(positions="sinusoidal"):
    rng = np.random.default_rng(7)
    return Session(tuple("abcd"), rng.normal(size=(4, 6)), rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 6, 3)),
                   rng.normal(size=(2, 6, 3)), norm=Norm("layer"), positions=Positions(positions), mask=Mask("causal"))


@pytest.fixture
def doc(qtbot):
    documents = []

    def make(session):
        documents.append(SessionDocument(session))
        return documents[-1]

    yield make
    for document in documents:
        document.shutdown()


def counting(panel) -> list:
    drawn = []
    redraw = panel.redraw
    panel.redraw = lambda: (drawn.append(panel.document.result), redraw())[1]
    return drawn


@pytest.mark.parametrize("cls, positions", [(InputPanel, "sinusoidal"), (AlibiPanel, "alibi")])
def test_a_weight_edit_does_not_redraw_a_panel_it_cannot_change(doc, qtbot, cls, positions):
    document = doc(staged_session(positions))
    panel = shown(qtbot, cls(document), (520, 360))
    drawn = counting(panel)
    before = [view.data.copy() for view in panel.views()]
    assert user_actions.set_cell(document, "W_q", 0, 0, "4", head=1)
    document.compute.wait_idle()
    assert drawn == []  # E, P, X and ALiBi's bias are made from neither W_q nor its results
    for view, kept in zip(panel.views(), before):
        np.testing.assert_array_equal(view.data, kept)
    document.selection.set(head=0)  # the selection still redraws as before
    if cls is InputPanel:
        assert user_actions.set_cell(document, "embeddings", 2, 1, "3")
        document.compute.wait_idle()
        assert drawn == [document.result]  # an embedding edit changes E and X: drawn once
        np.testing.assert_allclose(panel.x_view.data, compute(document.session).X, rtol=1e-6)
        np.testing.assert_allclose(panel.e_view.data, document.session.embeddings)


def test_every_panel_on_screen_shows_the_engines_numbers_after_a_w_q_edit(qtbot):
    rng = np.random.default_rng(3)
    session = Session(tuple(f"t{i}" for i in range(6)), rng.normal(size=(6, 16)), rng.normal(size=(4, 16, 16)),
                      rng.normal(size=(4, 16, 16)), rng.normal(size=(4, 16, 16)))
    document, window = open_window(session)
    try:
        window.inputs.setCurrentWidget(window.inputs.weights)
        document.selection.set(head=2, query=3, key=None)
        model = window.inputs.weights.tables["W_q"].model
        assert model.setData(model.index(5, 7), "2.5")
        document.compute.wait_idle()
        qtbot.wait(10)
        want = compute(document.session)
        assert document.session.w_query[2, 5, 7] == 2.5 and document.result.session is document.session
        on_screen = [p for p in window.panels if p.is_on_screen]
        assert {p.kind for p in on_screen} >= {"weights", "scaled_scores", "query", "explain"}
        for panel in on_screen:
            assert not panel.is_stale, panel.kind
        panels = {p.kind: p for p in on_screen}
        np.testing.assert_allclose(panels["weights"].view.data, want.weights[2], rtol=1e-5)
        np.testing.assert_allclose(panels["scaled_scores"].view.data, want.scaled_scores[2], rtol=1e-5)
        np.testing.assert_allclose(panels["query"].weight_heights(), want.weights[2, 3], rtol=1e-5)
        fresh = shown(qtbot, type(panels["explain"])(document))
        assert panels["explain"].text() == fresh.text()
        assert model.data(model.index(5, 7)) == "2.5"
    finally:
        close_window(document, window)
