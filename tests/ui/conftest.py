"""Fixtures the window tests share (a test module's own fixture of the same name wins)."""

import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument


@pytest.fixture
def doc(qtbot):
    """The dessert preset's document, shut down after the test."""
    document = SessionDocument(build_preset("dessert").session)
    yield document
    document.shutdown()


@pytest.fixture
def messages(doc):
    """Every message the document says (the status line's), in order."""
    seen = []
    doc.message.connect(seen.append)
    return seen
