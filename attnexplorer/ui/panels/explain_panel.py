"""The engine's arithmetic for the selected cell and the selected query's output, as text.

For the selected head, query and key it shows ``explain_cell`` (q·k term by term, the
scale, the mask, the softmax) and then ``explain_output`` (the output as Σ weight × value).
With no key selected it explains the key the query weights most. Monospace and
selectable, so a reader can copy the numbers.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QTextCursor, QTextOption
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
        # Redraws replace the changed part of the text (replace_changed_span): no history.
        self.text_view.setUndoRedoEnabled(False)
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
            self._show("", "")  # the panel says "computing…" over it (Panel._say_waiting)
            return
        missing = sorted(name for name in self.needs if getattr(result, name, None) is None)
        if missing:
            self._show("", f"Not computed for this view: {', '.join(missing)}.")
            return
        head, query, key = clamp_selection(self.document, result)
        # Imported here: explain belongs to the engine side and is only needed once shown.
        from ...core.errors import AttnExplorerError
        from ...core.reading.explain import MAX_TERMS_SHOWN, query_row, explain_cell, explain_output

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
        old = self.text_view.toPlainText()
        if old != text:
            replace_changed_span(self.text_view, old, text)
        if self.caption.text() != caption:
            self.caption.setText(caption)


def _changed_span(old: str, new: str) -> tuple[int, int, str]:
    """(start, end, replacement): ``new == old[:start] + replacement + old[end:]``, with the
    common beginning and end of the two texts left out."""
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return start, len(old) - end, new[start:len(new) - end]


def replace_changed_span(view: QPlainTextEdit, old: str, new: str) -> None:
    """Show ``new`` in ``view`` (which shows ``old``) by replacing only the parts that differ.

    An edit changes a few numbers of the explanation, not its lines: each changed line is
    rewritten on its own, so the view lays out just that line again, its scroll bar and the
    reader's scroll position stay, and nothing else is repainted. (``setPlainText``, or one
    replacement spanning several lines, drops the layout of every line it covers: the scroll
    range shrinks, then grows back line by line while the text is painted, and the scroll
    bar is repainted at each step.) A text with other lines is set whole.
    """
    old_lines, new_lines = old.split("\n"), new.split("\n")
    if not old or len(old_lines) != len(new_lines):
        view.setPlainText(new)
        return
    document = view.document()
    cursor = view.textCursor()
    # One edit block: the document tells its layout and the view about the changed lines once,
    # not once a line (a W_q edit changes a dozen lines of numbers).
    cursor.beginEditBlock()
    for number, (before, after) in enumerate(zip(old_lines, new_lines)):
        if before == after:
            continue
        start, end, replacement = _changed_span(before, after)
        line = document.findBlockByNumber(number).position()
        cursor.setPosition(line + _utf16_len(before[:start]))  # Qt counts UTF-16 units: a token may be an emoji
        cursor.setPosition(line + _utf16_len(before[:end]), QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(replacement)
    cursor.endEditBlock()


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2
