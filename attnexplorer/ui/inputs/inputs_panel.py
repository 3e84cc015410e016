"""The input side of the window: sentence, tokens, embeddings and the weight tables.

``InputsPanel(document)`` is a tab widget with four pages that fit a narrow dock:

- **Tokens** — a sentence box (Enter splits it into words and punctuation, see
  ``core.inputs.tokenize``; tokens that stay keep their embeddings, new ones get rows from the
  embedding source), the token table (rename, insert, delete, move; the embedding row
  travels with its token; the "masked" box blocks the token as a key), and the embedding
  table (n × d) with its width d, its source (manual = zeros, seeded random — a fixed
  N(0, 1) vector per distinct word —, or the preset's generator) and Import….
- **Weights** — the number of heads, the head shown, d_k, d_v, a seed for the initialisers,
  and one table each for W_q, W_k and W_v with an Initialise menu (seeded torch.rand,
  nn.Linear's default, identity where square, zeros) and an Import menu (file or clipboard,
  as stored (d × cols) or in nn.Linear orientation (cols × d), transposed for you), each
  with its bias as a one-row table under it (``stage_inputs.BiasRow``).
- **Stages** — positions, norm, grouped-query K/V heads, W_o and b_o (``ui/inputs/stages_page.py``).
- **Source** — cross-attention's source sequence (``ui/inputs/source_page.py``).

Each page is a module of its own (``tokens_page.py``, ``weights_page.py``, ``stages_page.py``,
``source_page.py``), built from the pieces in ``widgets.py``. Every change goes
through ``document.edit`` as one undo step, or ``document.refuse`` with the reason; widgets
are synced from ``document.session_changed`` with their signals blocked.
"""

from __future__ import annotations

from PySide6.QtWidgets import QScrollArea, QSizePolicy, QTabWidget

from ..document import SessionDocument
from .widgets import scrolling
from .source_page import SourcePage
from .stages_page import StagesPage
from .tokens_page import TokensPage
from .weights_page import WeightsPage

MIN_WIDTH = 280


class InputsPanel(QTabWidget):
    """Tokens & embeddings / Weights / Stages / Source, for the window's Inputs dock."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.tokens = TokensPage(document)
        self.weights = WeightsPage(document)
        self.stages = StagesPage(document)
        self.source = SourcePage(document)
        # Each page scrolls under the tabs: when the whole tab widget scrolled, its tabs went
        # out of view with the page.
        for page, name in ((self.tokens, "Tokens"), (self.weights, "Weights"), (self.stages, "Stages"),
                           (self.source, "Source")):
            # Below this the tables and their buttons clip: a narrower dock scrolls across.
            page.setMinimumWidth(MIN_WIDTH)
            self.addTab(scrolling(page), name)
        self.setDocumentMode(True)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)

    # The tabs hold each page's scroll area; callers name the pages.
    def setCurrentWidget(self, page) -> None:
        super().setCurrentWidget(self._area_of(page))

    def currentWidget(self):
        area = super().currentWidget()
        return area.widget() if isinstance(area, QScrollArea) else area

    def indexOf(self, page) -> int:
        return super().indexOf(self._area_of(page))

    def _area_of(self, page):
        for i in range(self.count()):
            area = self.widget(i)
            if area is page or (isinstance(area, QScrollArea) and area.widget() is page):
                return area
        return page
