"""Every token has its tick label in the panels (up to 32), and the selection keeps its own beyond."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import QueryPanel, WeightsPanel
from ui_helpers import shown


def preset_doc(qtbot, name, **params):
    built = build_preset(name, params)
    doc = SessionDocument(built.session)
    assert doc.compute.wait_idle(60)
    return doc


@pytest.mark.parametrize("size", [(360, 260), (420, 320), (700, 520)])
def test_pronoun_weights_label_every_token_on_both_axes(qtbot, size):
    doc = preset_doc(qtbot, "pronoun")
    panel = shown(qtbot, WeightsPanel(doc), size=size)
    QApplication.processEvents()
    tokens = [t for t in doc.session.tokens]
    assert panel.view.row_axis.visible_labels() == tokens
    assert panel.view.col_axis.visible_labels() == tokens
    assert "dog" in panel.view.col_axis.visible_labels()  # the walkthrough's answer
    doc.shutdown()


def test_query_bars_label_every_key(qtbot):
    doc = preset_doc(qtbot, "pronoun")
    panel = shown(qtbot, QueryPanel(doc), size=(420, 320))
    QApplication.processEvents()
    for chart in (panel.score_chart, panel.weight_chart):
        assert chart.token_axis.visible_labels() == list(doc.session.tokens)
    doc.shutdown()


def test_a_long_sentence_thins_its_labels_but_keeps_the_selected_query_and_key(qtbot):
    doc = preset_doc(qtbot, "sine", N=200)
    panel = shown(qtbot, WeightsPanel(doc), size=(420, 320))
    doc.selection.set(query=137, key=61)
    QApplication.processEvents()
    rows = panel.view.row_axis.visible_labels()
    cols = panel.view.col_axis.visible_labels()
    tokens = doc.session.tokens
    assert 3 <= len(rows) < 200 and 3 <= len(cols) < 200
    assert tokens[137] in rows and tokens[61] in cols
    doc.shutdown()
