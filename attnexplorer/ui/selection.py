"""The selection for widgets: ``app.selection``'s ``CurrentSelection`` with a Qt ``changed``.

Panels read ``selection.current``, call ``selection.set(...)`` and connect ``changed``; a
Qt signal (not the plain-Python one underneath) so that a connection dies with the widget
that made it, as Qt connections do.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from ..app.selection import CurrentSelection as _Current, Selection
from ..core.inputs.session import Session

__all__ = ["CurrentSelection", "Selection"]


class CurrentSelection(QObject):
    """A Qt face on ``app.selection.CurrentSelection`` (``state``): same methods, and
    ``changed(Selection)`` emitted whenever the state's ``changed`` is."""

    changed = Signal(object)

    def __init__(self, session: Session | None = None, selection: Selection | None = None, parent=None,
                 state: _Current | None = None):
        super().__init__(parent)
        self.state = state if state is not None else _Current(session, selection)
        self.state.changed.connect(self._on_changed)

    @property
    def current(self) -> Selection:
        return self.state.current

    def set(self, head=None, query=None, key=...) -> None:
        self.state.set(head, query, key)

    def follow(self, session: Session) -> None:
        self.state.follow(session)

    def show_view(self, session: Session) -> None:
        self.state.show_view(session)

    def _on_changed(self, selection: Selection) -> None:
        self.changed.emit(selection)
