"""Lesson mode: a lesson taught in the main window (``controller``), its bar (``bar``), the
values it hides (``covers``), presenter mode (``presenter``) and handouts (``handout``).
The lesson itself, its checks and its state are Qt-free (``core/lessons``)."""
