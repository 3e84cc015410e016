"""The result panels: every intermediate of the attention computation, drawn live.

``PANEL_CLASSES`` lists them in the default layout order (the order the computation runs,
then the close-ups; a stage's panel comes after the step it explains, so that the first panel
is one every session has); ``make_panels(document)`` builds one of each on a document. Every
panel follows the ``Panel`` contract in ``base.py``.
"""

from __future__ import annotations

from .alibi_panel import AlibiPanel
from .base import Panel
from .embedding_panel import EmbeddingPanel
from .explain_panel import ExplainPanel
from .input_panel import InputPanel
from .matrix_panels import OutputPanel, QKVPanel, ScaledScoresPanel, ScoresPanel, WeightsPanel
from .matrix_view import MatrixView
from .qk_norm_panel import QKNormPanel
from .query_panel import QueryPanel
from .rope_panel import RopePanel
from .signal_panel import SignalPanel
from .softmax_stages_panel import SoftmaxStagesPanel

PANEL_CLASSES: tuple[type[Panel], ...] = (
    QKVPanel,
    InputPanel,
    QKNormPanel,
    RopePanel,
    ScoresPanel,
    AlibiPanel,
    ScaledScoresPanel,
    SoftmaxStagesPanel,
    WeightsPanel,
    OutputPanel,
    QueryPanel,
    ExplainPanel,
    SignalPanel,
    EmbeddingPanel,
)


def make_panels(document) -> list[Panel]:
    """One panel of each kind on ``document``, in ``PANEL_CLASSES`` order."""
    return [cls(document) for cls in PANEL_CLASSES]


__all__ = [
    "PANEL_CLASSES",
    "AlibiPanel",
    "EmbeddingPanel",
    "ExplainPanel",
    "InputPanel",
    "MatrixView",
    "OutputPanel",
    "Panel",
    "QKNormPanel",
    "QKVPanel",
    "QueryPanel",
    "RopePanel",
    "ScaledScoresPanel",
    "ScoresPanel",
    "SignalPanel",
    "SoftmaxStagesPanel",
    "WeightsPanel",
    "make_panels",
]
