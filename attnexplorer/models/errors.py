"""The one error of the models floor, below every module of it (sources, families, the forward)
so that each can raise it without importing another."""

from __future__ import annotations

from ..core.errors import AttnExplorerError


class ModelError(AttnExplorerError):
    """A model cannot be opened or read as asked (missing, unsupported, bad text or layer)."""
