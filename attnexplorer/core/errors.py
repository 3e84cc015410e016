"""The one error family a user can see.

Every bad input (a file, a cell, a CLI flag, a device) is reported by raising one of these
with a message that names the problem and where it is. Callers at the edges (the CLI, the
window) catch ``AttnExplorerError`` and show ``str(err)``; anything else is a bug.
"""


class AttnExplorerError(ValueError):
    """Base class: a user-facing problem with a plain one-line message."""


class SessionError(AttnExplorerError):
    """A session (from a file, a dict or an edit) is malformed or out of bounds.

    ``where`` is a path such as ``heads[1].W_k`` and is already part of the message.
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class EngineError(AttnExplorerError):
    """The engine cannot run as asked (unavailable device or dtype, too large)."""


class PresetError(AttnExplorerError):
    """Unknown preset or a bad preset parameter."""


class Cancelled(Exception):
    """The caller's ``cancelled()`` said stop (a newer request supersedes the work): the one
    cancellation of attnexplorer, raised by the streamed path between blocks and by model
    loading and the model forward between steps. Not an ``AttnExplorerError``: nothing is
    wrong, and nobody shows it to a user."""
