"""``import-model --figures``: the model window's figures written to files, by a model window
that is never shown (above ``window``, which builds its figure panels from
``figures``)."""

from __future__ import annotations


def write_model_figures(loaded, run, layers, formats: list[str], folder) -> list:
    """``import-model --figures``: the model view (``model-view.<fmt>``), each asked layer's head
    view with all heads and with each head (``head-view-layer<L>[-head<H>].<fmt>``; not for a long
    run, which keeps no n × n weights), and for a model with an LM head its predictions and logit
    lens at the last position (``predictions.<fmt>``, ``logit-lens.<fmt>``), drawn by a model
    window that is never shown, through the figure route every panel uses."""
    from pathlib import Path

    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from ...models.interventions import Behaviour
    from ..exports.figures import discard, export_panel
    from .window import ModelWindow

    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    window = ModelWindow()
    written = []

    def write(panel, stem, **size):
        for fmt in formats:
            written.append(export_panel(panel, folder / f"{stem}.{fmt}", **size))

    try:
        window.show_run(loaded, run, layers[0])
        write(window.model_view_figure, "model-view")
        for layer in layers if not run.long else ():
            window.set_layer(layer, 0)
            window.head_view.set_head(None)
            write(window.head_view_figure, f"head-view-layer{layer}")
            for head in range(loaded.num_heads):
                window.head_view.set_head(head)
                write(window.head_view_figure, f"head-view-layer{layer}-head{head}")
        behaviour = Behaviour(loaded, run)
        if not behaviour.problem:
            result = behaviour.predict(lens=True)
            window.predictions.show_result(result)
            window.lens.show_result(result)
            # painted once (offscreen) before the export, as a panel on screen is: pyqtgraph sizes
            # an axis to its tick labels when it paints, and an axis never painted dropped the
            # token labels that did not fit its default width
            window.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
            window.show()
            for panel, stem in ((window.predictions, "predictions"), (window.lens, "logit-lens")):
                window.side_tabs.setCurrentWidget(panel)
                QApplication.processEvents()
                write(panel, stem)   # the size the 1280 × 800 window gives it, as Export figure… does
    finally:
        window.head_scores.shutdown()   # its job runner's thread
        discard(window)
    return written
