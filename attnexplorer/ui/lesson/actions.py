"""The window's lesson entries: View ▸ Lesson (the built-in lessons, this session step by
step, presenter mode, the colour-blind-safe palette, End lesson), File ▸ Save as lesson…
and File ▸ Export handout…, and opening a lesson file. ``build_lesson_menus`` is called by
``window/menus.py``; the handlers take the window."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QKeySequence

from ...core.errors import AttnExplorerError

HANDOUT_FORMATS = {"pdf": "PDF, one page per step", "beamer": "LaTeX beamer, one frame per step",
                   "md": "Markdown with SVG figures"}


def build_lesson_menus(window, file_menu, view_menu) -> None:
    from ...io.lesson_file import builtin_lessons

    menu = view_menu.addMenu("&Lesson")
    window.lesson_actions = {}
    for name in builtin_lessons():
        window.lesson_actions[name] = menu.addAction(f"{name.capitalize()}",
                                                     lambda n=name: start_builtin(window, n))
    window.lesson_from_session_action = menu.addAction("This session, step by step",
                                                       lambda: start_from_session(window))
    window.open_lesson_action = menu.addAction("Open lesson file…", lambda: open_lesson_dialog(window))
    menu.addSeparator()
    window.presenter_action = menu.addAction("&Presenter mode", lambda: window.lesson.presenter.toggle())
    window.presenter_action.setShortcut(QKeySequence("F5"))
    window.palette_action = menu.addAction("Colour-blind-safe palette")
    window.palette_action.setCheckable(True)
    window.palette_action.toggled.connect(
        lambda on: window.lesson.presenter.set_palette("colour-blind safe" if on else "default"))
    window.end_lesson_action = menu.addAction("&End lesson", lambda: window.lesson.end())
    # File ▸ Save as lesson… and Export handout… go just before Quit.
    window.save_lesson_action = file_menu.addAction("Save as &lesson…", lambda: save_as_lesson(window))
    window.export_handout_action = file_menu.addAction("Export &handout…", lambda: export_handout(window))
    for action in (window.save_lesson_action, window.export_handout_action):
        file_menu.removeAction(action)
        file_menu.insertAction(window.quit_action, action)
    file_menu.insertSeparator(window.quit_action)
    window.addAction(window.presenter_action)


def start_builtin(window, name: str) -> bool:
    from ...io.lesson_file import builtin_lesson

    try:
        lesson = builtin_lesson(name)
    except AttnExplorerError as err:
        window.show_error("Cannot open the lesson", str(err))
        return False
    return window.lesson.start(lesson)


def start_from_session(window) -> bool:
    """A plain lesson over the current session: one step per stage it uses."""
    from ...core.lessons import Lesson, default_steps

    session = window.document.session
    return window.lesson.start(Lesson(window.actions.display_name(), session, default_steps(session)))


def open_lesson_path(window, path) -> bool:
    """Open a lesson file: refused with the place and the reason, changing nothing."""
    from ...io.lesson_file import load_lesson

    try:
        lesson = load_lesson(Path(path))
    except AttnExplorerError as err:
        window.show_error("Cannot open lesson", str(err))
        return False
    return window.lesson.start(lesson)


def open_lesson_dialog(window) -> bool:
    path = window.ask_open_path()
    return bool(path) and open_lesson_path(window, path)


def save_as_lesson(window) -> bool:
    """The lesson as taught (the panels shown on each step, the session as edited), or,
    outside a lesson, this session step by step."""
    from ...core.lessons import Lesson, default_steps
    from ...io.lesson_file import save_lesson

    session = window.document.session
    lesson = window.lesson.current_lesson() if window.lesson_started() else None
    if lesson is None:
        lesson = Lesson(window.actions.display_name(), session, default_steps(session))
    try:
        check_against(lesson, session)
    except AttnExplorerError as err:
        window.show_error("Cannot save the lesson", str(err))
        return False
    path = window.ask_lesson_path()
    if not path:
        return False
    try:
        save_lesson(lesson, path, session)
    except AttnExplorerError as err:
        window.show_error("Cannot save the lesson", str(err))
        return False
    window.status.show_message(f"Saved the lesson ({len(lesson.steps)} steps) to {path}")
    return True


def check_against(lesson, session) -> None:
    """LessonError when ``lesson``'s steps no longer fit ``session`` as edited (a token a step
    quotes was renamed or deleted): saved, the file would be refused when opened."""
    from ...core.lessons import LessonError, step_to_dict, steps_from_list

    try:
        steps_from_list([step_to_dict(s) for s in lesson.steps], session)
    except LessonError as err:
        raise LessonError(f"the session as edited no longer fits the lesson: {err}") from None


def export_handout(window) -> list[Path]:
    """The handout of the lesson as taught (or this session step by step) as PDF, beamer or
    Markdown, into a folder the teacher picks."""
    from ...core.lessons import Lesson, default_steps
    from .handout import write_handout

    choice = window.ask_handout()
    if not choice:
        return []
    fmt, folder = choice
    session = window.document.session
    lesson = window.lesson.current_lesson() if window.lesson_started() else None
    if lesson is None:
        lesson = Lesson(window.actions.display_name(), session, default_steps(session))
    try:
        written = write_handout(lesson, fmt, folder, session=session)
    except AttnExplorerError as err:
        window.show_error("Cannot export the handout", str(err))
        return []
    window.status.show_message(f"Wrote the {fmt} handout ({len(lesson.steps)} steps) to {folder}")
    return written


# -- the questions (the window's ask_lesson_path / ask_handout call these; tests patch those) --
def ask_lesson_path(parent, start: str) -> str | None:
    from PySide6.QtWidgets import QFileDialog

    path, _ = QFileDialog.getSaveFileName(parent, "Save as lesson", start, "attnexplorer lessons (*.json);;All files (*)")
    return path or None


def ask_handout(parent, start: str) -> tuple[str, str] | None:
    """(format, folder) for File ▸ Export handout…, or None when cancelled."""
    from PySide6.QtWidgets import QFileDialog, QInputDialog

    labels = [f"{label} ({fmt})" for fmt, label in HANDOUT_FORMATS.items()]
    label, ok = QInputDialog.getItem(parent, "Export handout", "Format:", labels, 0, False)
    if not ok:
        return None
    fmt = list(HANDOUT_FORMATS)[labels.index(label)]
    folder = QFileDialog.getExistingDirectory(parent, "Export handout into", start)
    return (fmt, folder) if folder else None
