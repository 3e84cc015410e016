"""Helpers shared by the panel and figure tests."""

# A main window opened and closed as the bench does it: ``open_window(session, size)`` gives
# ``(document, window)`` shown and painted once; ``close_window`` closes it without asking.
import numpy as np

from attnexplorer.bench.harness import close_window, open_window  # noqa: F401


def drawn(item) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) a pyqtgraph curve or scatter item draws; empty arrays when it draws nothing."""
    x, y = item.getData()
    return (np.zeros(0), np.zeros(0)) if x is None else (np.asarray(x), np.asarray(y))


def legend_entries(legend) -> list[tuple[str, str]]:
    """(label, colour name) of each entry of a legend of bars, in order: a KeyLegend's
    entries (what it paints) or a pyqtgraph legend's items."""
    if hasattr(legend, "entries"):
        return [(name, color.name()) for name, color in legend.entries]
    return [(label.text, sample.item.opts["brush"].color().name()) for sample, label in legend.items]


def shown(qtbot, panel, size=(420, 320)):
    """``panel`` registered with qtbot, resized, shown and exposed (so it has painted)."""
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    return panel



def settle_lesson(window) -> None:
    """The window's compute done and its posted events (a lesson step's refits) handled."""
    from PySide6.QtWidgets import QApplication

    window.document.compute.wait_idle()
    for _ in range(3):
        QApplication.processEvents()


def teach(window, name="pronoun", step=0):
    """Lesson ``name`` started in ``window`` and shown at step ``step`` (0-based); its controller."""
    from attnexplorer.io.lesson_file import builtin_lesson

    assert window.lesson.start(builtin_lesson(name))
    window.lesson.go(step)
    settle_lesson(window)
    return window.lesson
