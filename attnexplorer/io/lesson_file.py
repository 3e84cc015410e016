"""Lesson files: JSON, version 1, read and checked like session files, and the built-in
lessons (``resources/lessons/<name>.json``, files of this same format).

The format (README, "Teaching with attnexplorer")::

    {"format": "attnexplorer-lesson", "version": 1,
     "title": "Who is she?",
     "preset": {"name": "pronoun", "params": {}},      # or "session": {a session file's object}
     "steps": [
       {"stage": "scores",                             # tokens, positions, projections, scores,
                                                       # scale, mask, softmax, output, summary
        "title": "score(she, dog)",                    # default: the stage's formula
        "formula": "scores = Q·Kᵀ", "latex": "...",    # default: the stage's
        "panels": ["scores", "explain"],               # default: the stage's
        "select": {"query": "she", "key": "dog"},
        "text": "q(she)·k(dog) = {scores[she, dog]:.2f}",   # quotes: core/lessons/quotes.py
        "notes": "for the teacher's screen",
        "hide": ["weights[she]"],                      # rows or cells of scores, scaled_scores, weights
        "ask": {"kind": "key", "of": "weights[she]", "prompt": "Which word does she look at?"},
        "slider": "tau"}                               # a preset parameter as a slider on this step
     ]}

A file is refused with its name and the exact place, as a session is:
``lesson.json: steps[2].ask.of {weights[shee]}: there is no token 'shee' (tokens: The, …)``.
Nothing in a file is executed; quotes are looked up, never evaluated as code.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ..core.errors import AttnExplorerError, SessionError
from ..core.lessons import Lesson, LessonError, step_to_dict, steps_from_list
from .atomic import atomic_write_text
from .session_file import _emit, parse_json, read_file, session_from_dict, session_to_dict

FORMAT = "attnexplorer-lesson"
VERSION = 1
KNOWN_KEYS = ("format", "version", "title", "preset", "session", "steps")
# How far into a file the lesson's "format" is looked for when a file name could be either.
_SNIFF_BYTES = 1 << 20
_SNIFF = re.compile(rb'"format"\s*:\s*"attnexplorer-lesson"')


def _fail(source: str, where: str | None, message: str):
    text = f"{where} {message}" if where else message
    err = LessonError(f"{source}: {text}")
    err.where = where
    raise err


def _session(obj: dict, source: str):
    has_preset, has_session = obj.get("preset") is not None, obj.get("session") is not None
    if has_preset == has_session:
        _fail(source, None, "needs either \"preset\" ({\"name\": ..., \"params\": {...}}) or \"session\" "
              "(a session file's object), not both" if has_preset else
              "has neither \"preset\" nor \"session\": a lesson needs the session it teaches")
    if has_session:
        try:
            return session_from_dict(obj["session"], "session")
        except SessionError as err:
            where = f"session.{err.where}" if err.where else "session"
            message = str(err).removeprefix("session: ").removeprefix(f"{err.where} " if err.where else "")
            _fail(source, where, message)
    preset = obj["preset"]
    if not isinstance(preset, dict) or set(preset) - {"name", "params"} or not isinstance(preset.get("name"), str):
        _fail(source, "preset", "is not {\"name\": ..., \"params\": {...}}")
    params = preset.get("params", {})
    if not isinstance(params, dict):
        _fail(source, "preset.params", "is not an object")
    from ..core.inputs.presets import build_preset

    try:
        return build_preset(preset["name"], params).session
    except AttnExplorerError as err:
        _fail(source, "preset", str(err))


def lesson_from_dict(obj: Any, source: str = "lesson", name: str = "") -> Lesson:
    """A checked Lesson from a parsed lesson file; ``LessonError`` (message ``"{source}:
    {where} {what is wrong}"``) for anything malformed."""
    if not isinstance(obj, dict):
        _fail(source, None, "is not a lesson file (the top level is not an object)")
    if obj.get("format") != FORMAT:
        if "format" not in obj:
            _fail(source, None, f"is not an attnexplorer lesson file (no \"format\": \"{FORMAT}\")")
        _fail(source, "format", f"is {obj['format']!r}, expected \"{FORMAT}\"")
    version = obj.get("version")
    if type(version) is not int or version < 1:
        _fail(source, "version", f"is {version!r}, expected a whole number (this attnexplorer reads version {VERSION})")
    if version > VERSION:
        _fail(source, None, f"written by a newer attnexplorer (lesson version {version}); this one reads version {VERSION}")
    unknown = sorted(set(obj) - set(KNOWN_KEYS))
    if unknown:
        _fail(source, None, f"has an unknown key {unknown[0]!r} (a lesson has {', '.join(KNOWN_KEYS)})")
    title = obj.get("title", name or "Lesson")
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        _fail(source, "title", "is not a short text")
    session = _session(obj, source)
    try:
        steps = steps_from_list(obj.get("steps"), session)
    except LessonError as err:
        _fail(source, err.where, str(err).removeprefix(f"{err.where} " if err.where else ""))
    return Lesson(title=title, session=session, steps=steps, name=name)


def loads_lesson(text: str | bytes, source: str = "lesson", name: str = "") -> Lesson:
    """Parse and check a lesson file's text; raises only ``LessonError``."""
    try:
        obj = parse_json(text, source, "lesson file")
    except SessionError as err:
        raise LessonError(str(err)) from None
    return lesson_from_dict(obj, source, name)


def load_lesson(path) -> Lesson:
    """Read and check a lesson file; errors name ``path`` as given."""
    try:
        data = read_file(path, "a lesson is a .json file")
    except SessionError as err:
        raise LessonError(str(err)) from None
    return loads_lesson(data, str(path), Path(path).stem)


def is_lesson_file(path) -> bool:
    """Whether ``path`` holds a lesson rather than a session (its "format" near the start);
    False for anything unreadable, which the session loader then reports."""
    try:
        # only a regular file is opened: opening a named pipe blocks until a writer comes
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return _SNIFF.search(f.read(_SNIFF_BYTES)) is not None
    except (OSError, ValueError, TypeError):
        return False


def lesson_to_dict(lesson: Lesson, session=None) -> dict:
    """The lesson as a file: with ``session`` (the one edited in class), or the lesson's own."""
    session = lesson.session if session is None else session
    return {"format": FORMAT, "version": VERSION, "title": lesson.title,
            "session": session_to_dict(session), "steps": [step_to_dict(s) for s in lesson.steps]}


def dumps_lesson(lesson: Lesson, session=None) -> str:
    parts: list[str] = []
    _emit(lesson_to_dict(lesson, session), "", parts)
    return "".join(parts) + "\n"


def save_lesson(lesson: Lesson, path, session=None) -> None:
    """Write the lesson atomically (``WriteError`` leaves an old file as it was)."""
    atomic_write_text(Path(path), dumps_lesson(lesson, session))


# -- the built-in lessons ----------------------------------------------------------------------
BUILTIN_ORDER = ("pronoun", "dessert", "sine", "rope", "translate")


def builtin_lessons() -> list[str]:
    """The built-in lessons' names, in the order the menu shows them."""
    return list(BUILTIN_ORDER)


def builtin_lesson(name: str) -> Lesson:
    from ..paths import resource_path

    if name not in BUILTIN_ORDER:
        raise LessonError(f"unknown lesson {name!r}; give a lesson file or one of {', '.join(BUILTIN_ORDER)}")
    path = resource_path(f"lessons/{name}.json")
    return loads_lesson(path.read_bytes(), f"lesson {name}", name)


def open_lesson(name_or_path: str) -> Lesson:
    """A built-in lesson by name, else a lesson file."""
    if name_or_path in BUILTIN_ORDER and not Path(name_or_path).exists():
        return builtin_lesson(name_or_path)
    if not name_or_path.endswith(".json") and not Path(name_or_path).exists():
        raise LessonError(f"unknown lesson {name_or_path!r}; give a lesson file (.json) or one of "
                          f"{', '.join(BUILTIN_ORDER)}")
    return load_lesson(name_or_path)
