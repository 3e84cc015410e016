"""The selected head, query and key: what every panel highlights.

Qt-free: a frozen value that the document (or a ``ResultSource``) holds and replaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.session import Session


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
