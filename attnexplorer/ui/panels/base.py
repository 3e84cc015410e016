"""What every result panel provides, so the window, figure export and bench treat them alike.

A panel is a QWidget built on a ``SessionDocument``. It listens to the document's
``result_changed`` and ``selection_changed`` and redraws itself (reusing its pyqtgraph
items: no new items per frame); it reports clicks back with ``document.set_selection``.

- ``kind``: a short file-name-safe id ("weights", "scores", ...) used for dock object
  names (QSettings layout) and exported figure names.
- ``title``: what the dock and an exported figure are titled.
- ``export_item()``: the pyqtgraph/QGraphics item an exporter renders (a
  ``pg.GraphicsLayout`` or ``pg.PlotItem``), or None for a panel that is text only.
- ``refresh()``: redraw from the document now (the window calls it after a reset).
- ``applies_to(session)``: False hides the panel for sessions it has nothing to show for
  (the signal plot outside 1-D signal presets, the embedding scatter when d != 2).
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from ..document import SessionDocument


class Panel(QWidget):
    kind: str = "panel"
    title: str = "Panel"

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        document.result_changed.connect(self._on_result_changed)
        document.selection_changed.connect(self._on_selection_changed)

    def export_item(self):
        return None

    def applies_to(self, session) -> bool:
        return True

    def refresh(self) -> None:
        """Redraw everything from ``self.document.result`` and ``.selection``."""
        raise NotImplementedError

    def _on_result_changed(self, result) -> None:
        if self.isVisible() or not self.isWindow():
            self.refresh()

    def _on_selection_changed(self, selection) -> None:
        self.refresh()
