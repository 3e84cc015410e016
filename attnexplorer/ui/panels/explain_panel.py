"""The engine's arithmetic for the selected cell and the selected query's output, as text.

For the selected head, query and key it shows ``explain_cell`` (q·k term by term, the
scale, the mask, the softmax) and then ``explain_output`` (the output as Σ weight × value).
With no key selected it explains the key the query weights most. Monospace and
selectable, so a reader can copy the numbers.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout

from . import theme
from .base import Panel
from .common import clamp_selection


def _lines(explanation) -> str:
    text = explanation.text
    return text if isinstance(text, str) else "\n".join(text)


class ExplainPanel(Panel):
    kind = "explain"
    title = "Explain"
    short_title = "Explain"
    # explain_cell and explain_output work the one query row they explain out from Q, K and V
    # when the n×n matrices are not kept (n·d per head instead of n²: the big-session saving).
    needs = frozenset({"Q", "K", "V"})

    def __init__(self, document, parent=None):
        super().__init__(document, parent)
        self.caption = QLabel("Click a cell or a token to explain it.")
        self.text_view = QPlainTextEdit()
        self.text_view.setReadOnly(True)
        self.text_view.setFont(theme.monospace_font(10))
        # Wrapped to the panel's width (long sums of products would be cut off otherwise);
        # read-only text stays selectable for copying.
        self.text_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text_view.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.caption)
        layout.addWidget(self.text_view, 1)
        self.setMinimumSize(320, 160)

    def text(self) -> str:
        return self.text_view.toPlainText()

    def redraw(self) -> None:
        result = self.document.result
        if result is None:
            self._show("", "No result yet.")
            return
        missing = sorted(name for name in self.needs if getattr(result, name, None) is None)
        if missing:
            self._show("", f"Not computed for this view: {', '.join(missing)}.")
            return
        head, query, key = clamp_selection(self.document, result)
        # Imported here: explain belongs to the engine side and is only needed once shown.
        from ...core.errors import AttnExplorerError
        from ...core.explain import MAX_TERMS_SHOWN, query_row, explain_cell, explain_output

        chosen = key
        if chosen is None:
            weights = (result.weights[head, query] if result.weights is not None
                       else query_row(result, head, query)[2])
            chosen = int(np.argmax(weights))

        parts = []
        try:
            parts.append(_lines(explain_cell(result, head, query, chosen)))
            # Only the terms the text shows (the rest are summed either way): at 4,096 keys
            # building every term took 0.1 s per redraw.
            parts.append(_lines(explain_output(result, head, query, top=MAX_TERMS_SHOWN)))
        except AttnExplorerError as err:
            parts.append(f"Cannot explain this cell: {err}")
        which = "selected key" if key is not None else "the key it weights most"
        heads = "" if result.heads == 1 else f", head {head}"
        self._show("\n\n".join(parts),
                   f"Query {result.tokens[query]!r} and {which}, {result.key_tokens[chosen]!r}{heads}")

    def _show(self, text: str, caption: str) -> None:
        if self.text_view.toPlainText() != text:
            self.text_view.setPlainText(text)
        self.caption.setText(caption)
