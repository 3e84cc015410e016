"""Regenerate the README's teaching screenshots, offscreen:

- ``lesson-presenter.png``: the pronoun lesson's step 7 (she's weight on dog hidden, the class
  typing a guess) in presenter mode on a 1920×1080 projector screen;
- ``lesson-handout-page.png``: page 5 of the pronoun lesson's PDF handout (the answer to step
  4 at the top), rendered with pdftoppm (poppler-utils).

    python3 packaging/lesson_screenshots.py [OUT_DIR]   # default: packaging/screenshots

It sets up the offscreen platform with a 1920×1080 screen itself (a Qt offscreen config file).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SCREENS = {"synchronousWindowSystemEvents": False, "windowFrameMargins": False,
           "screens": [{"name": "projector", "x": 0, "y": 0, "width": 1920, "height": 1080,
                        "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}


def main(out: Path) -> None:
    work = Path(tempfile.mkdtemp())
    config = work / "screens.json"
    config.write_text(json.dumps(SCREENS), encoding="utf-8")
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={config}"
    os.environ.setdefault("ATTNEXPLORER_CONFIG_DIR", str(work / "config"))
    os.environ.setdefault("ATTNEXPLORER_DATA_DIR", str(work / "data"))
    from PySide6.QtWidgets import QApplication

    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.io.lesson_file import builtin_lesson
    from attnexplorer.ui.app import make_app
    from attnexplorer.ui.document import SessionDocument
    from attnexplorer.ui.window import MainWindow
    from attnexplorer.ui.lesson.handout import write_handout

    out.mkdir(parents=True, exist_ok=True)
    make_app()
    document = SessionDocument(build_preset("pronoun").session)
    window = MainWindow(document)
    window.show()
    lesson = builtin_lesson("pronoun")
    window.lesson.start(lesson)
    window.lesson.go(6)
    window.lesson.presenter.enter()
    window.lesson.bar.number_edit.setText("0.9")

    def settle():
        document.compute.wait_idle()
        for _ in range(5):
            QApplication.processEvents()

    settle()
    window.grab().save(str(out / "lesson-presenter.png"))
    window.lesson.end()
    document.undo_stack.setClean()
    window.close()
    document.shutdown()

    write_handout(lesson, "pdf", work / "handout")
    if shutil.which("pdftoppm") is None:
        sys.exit("pdftoppm (poppler-utils) is needed to render the handout page")
    subprocess.run(["pdftoppm", "-r", "110", "-f", "5", "-l", "5", "-singlefile", "-png",
                    str(work / "handout" / "handout.pdf"), str(out / "lesson-handout-page")], check=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "screenshots")
