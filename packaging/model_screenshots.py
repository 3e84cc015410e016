"""Regenerate the README's real-model screenshots (1280×800, offscreen):
model view and head view of MiniLM (layer 2, head 3) and SmolLM2 (layer 5, all heads).

    python3 packaging/model_screenshots.py [OUT_DIR]   # default: packaging/screenshots

Needs the models extra and both packaged models; SmolLM2 is dequantised on first use.
The badge is the one the window shows once the layer is in the tables and computed: here the
layer is recomputed from its own session with the engine to fill it in honestly.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication  # noqa: E402

from attnexplorer.core.compute.engine import compute  # noqa: E402
from attnexplorer.io.session_file import session_from_dict  # noqa: E402
from attnexplorer.models.loading import load_model  # noqa: E402
from attnexplorer.ui.model.window import ModelWindow  # noqa: E402

TEXT = "The dog fetched the ball and she was happy"


def main(out: Path) -> None:
    app = QApplication.instance() or QApplication([])
    out.mkdir(parents=True, exist_ok=True)
    for name, layer, head, all_heads in (("minilm", 2, 3, False), ("smollm2", 5, 4, True)):
        loaded = load_model(name)
        run = loaded.run(TEXT)
        window = ModelWindow()
        window.resize(1280, 800)
        window.show_run(loaded, run, layer, head)
        result = compute(session_from_dict(loaded.layer_session(run, layer)))
        window.update_badge(result.weights, layer)
        window.show()
        app.processEvents()
        window.tabs.setCurrentIndex(0)
        app.processEvents()
        window.grab().save(str(out / f"model-view-{name}.png"))
        window.tabs.setCurrentIndex(1)
        if all_heads:
            window.head_box.setCurrentIndex(0)
        app.processEvents()
        window.grab().save(str(out / f"head-view-{name}.png"))
        window.close()
        print(f"{name}: {window.badge.text()}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "screenshots")
