"""The token table keeps its "token" column readable beside the embeddings, however many
digits the row numbers take (a 4,096-token session's squeezed it to "oke")."""

from __future__ import annotations

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.inputs.tokens_page import TokensPage


def test_the_token_title_fits_its_column_at_thousands_of_tokens(qtbot):
    doc = SessionDocument(build_preset("random", {"n": 2048, "d": 16}).session)
    try:
        page = TokensPage(doc)
        qtbot.addWidget(page)
        page.resize(380, 600)   # the Inputs dock's default width at 1280 px
        page.show()
        qtbot.waitExposed(page)
        view = page.token_view
        title = view.fontMetrics().horizontalAdvance("token")
        assert view.horizontalHeader().sectionSize(0) >= title + 4
        assert view.columnViewportPosition(1) + view.horizontalHeader().sectionSize(1) <= view.viewport().width()
    finally:
        doc.shutdown()


def test_an_edit_of_numbers_leaves_the_column_and_the_source_box_alone(qtbot, monkeypatch):
    # Measuring the header, the scroll bar and the fonts, and looking the preset up, on every
    # typed cell or slider step was most of this page's share of an edit.
    from PySide6.QtWidgets import QTableView

    from attnexplorer.core.inputs import presets

    doc = SessionDocument(build_preset("random", {"n": 8, "d": 4}).session)
    try:
        page = TokensPage(doc)
        qtbot.addWidget(page)
        page.show()
        bigger = build_preset("random", {"n": 1200, "d": 4}).session
        looked_up, widened = [], []
        real_lookup = presets.get_preset
        monkeypatch.setattr(presets, "get_preset", lambda name: looked_up.append(name) or real_lookup(name))
        monkeypatch.setattr(QTableView, "setMinimumWidth",
                            lambda view, width: widened.append(width) or QTableView.setMinimumSize(view, width, view.minimumHeight()))
        for value in (1.0, 2.0):
            x = doc.session.embeddings.copy()
            x[0, 0] = value
            doc.edit(doc.session.replace(embeddings=x), "edit")
        assert looked_up == [] and widened == []
        # Another token count, another preset: both followed again.
        doc.edit(bigger, "more tokens")
        assert looked_up and len(widened) == 1
        assert page.token_view.minimumWidth() == widened[0]
    finally:
        doc.shutdown()
