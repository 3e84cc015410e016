"""The selected head, query and key: what every panel highlights.

``Selection`` is the frozen value; ``CurrentSelection`` holds the one a document (or a figure's
fixed result) shows, keeps it inside the session's sizes, and says ``changed`` when it moves.
Qt-free: ``ui/selection.py`` exposes it to widgets as a Qt signal.
"""

from __future__ import annotations

from dataclasses import dataclass

from psygnal import Signal

from ..core.inputs.session import Session


@dataclass(frozen=True)
class Selection:
    head: int = 0
    query: int = 0
    key: int | None = None

    def clamp(self, session: Session) -> "Selection":
        head = min(max(self.head, 0), session.heads - 1)
        query = min(max(self.query, 0), session.n - 1)
        key = None if self.key is None else min(max(self.key, 0), session.n_keys - 1)  # source positions in cross-attention
        return Selection(head, query, key)

    @classmethod
    def from_view(cls, session: Session) -> "Selection":
        """The selection a session carries under its ``"view"`` key (saved by the window,
        or set by a preset to open on the walkthrough's query), clamped; else the default."""
        view = session.extra.get("view")
        if not isinstance(view, dict):
            return cls().clamp(session)

        def whole(key, default):
            value = view.get(key, default)
            return value if isinstance(value, int) and not isinstance(value, bool) else default

        return cls(whole("head", 0), whole("query", 0), whole("key", None)).clamp(session)


class CurrentSelection:
    """The selection shown now, always inside the session it belongs to.

    ``set`` clamps to that session; ``follow`` moves to a new session (an edit, undo, redo),
    clamping what was selected; ``show_view`` selects what a session carries under its
    ``"view"`` key (a file opened, a preset). ``changed(Selection)`` is emitted only when the
    value differs.
    """

    changed = Signal(object)

    def __init__(self, session: Session, selection: Selection | None = None):
        self._session = session
        self._current = (selection or Selection.from_view(session)).clamp(session)

    @property
    def current(self) -> Selection:
        return self._current

    def set(self, head=None, query=None, key=...) -> None:
        """Select ``head``, ``query`` and ``key`` (None, or ... for the key: keep that part;
        a key of None selects no key)."""
        sel = self._current
        self._move(Selection(sel.head if head is None else head, sel.query if query is None else query,
                             sel.key if key is ... else key).clamp(self._session))

    def follow(self, session: Session) -> None:
        """The session became ``session``: keep the selection, clamped to its sizes."""
        self._session = session
        self._move(self._current.clamp(session))

    def show_view(self, session: Session) -> None:
        """Select what ``session`` carries under its ``"view"`` key (else the default)."""
        self.follow(session)
        view = Selection.from_view(session)
        self.set(head=view.head, query=view.query, key=view.key)

    def _move(self, new: Selection) -> None:
        if new != self._current:
            self._current = new
            self.changed.emit(new)
