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
