"""The one error of the models floor, below every module of it (sources, families, the forward)
so that each can raise it without importing another."""

from __future__ import annotations

from ..core.errors import AttnExplorerError


class ModelError(AttnExplorerError):
    """A model cannot be opened or read as asked (missing, unsupported, bad text or layer)."""


def wrong_shape(label: str, weight: str, found, wanted, model: str = "this model") -> ModelError:
    """The one message for a weight whose shape is not the one its config gives it, both shapes
    written out (``?`` for a size the config does not state), whichever reader found it."""
    def said(shape) -> str:
        return "×".join("?" if n is None else str(n) for n in shape)

    return ModelError(f"{label}: the weight {weight} is {said(found)}, but {model}'s config makes it "
                      f"{said(wanted)}: the weights are not the config's model")
