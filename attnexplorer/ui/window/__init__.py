"""The main window, split along what changes together. Where to add things:

- a **result panel**: write it under ``ui/panels/`` (see ``panels/base.py`` for the contract)
  and list it in ``panels.make_panels``. ``docks.DockLayout`` gives every panel a dock
  (``dock-<kind>``, remembered across runs) and a View menu entry; by default a new kind is a
  tab behind the first main panel. To place it elsewhere, name its kind in one of the rows at
  the top of ``docks.py`` (``MAIN_KINDS``, ``DETAIL_KINDS``, ``CONTEXT_KINDS``).
- a **dock that is not a result panel** (like Inputs, Controls, Fit): make its widget in
  ``MainWindow.__init__`` (``main_window.py``), pass it to ``DockLayout`` and add it in
  ``DockLayout.__init__`` beside the others (``docks.py``); place it in
  ``DockLayout.arrange_default``. Its View menu entry comes with it.
- a **menu entry**: ``menus.build_menus``; its handler is a method of ``MainWindow`` that calls
  the module doing the work (``exports``, ``dialogs``, or ``SessionActions`` for the session's
  File actions); an edit of the session is an undoable action in ``ui/user_actions.py``.
- a **question or box** the window shows: a function in ``dialogs.py`` and a one-line
  ``MainWindow`` method (``ask_*``/``show_*``), so tests answer it by monkeypatching the window.
- a **status-bar figure**: ``status.StatusLine``.
- something the window **remembers between runs**: ``remembered.py`` (and ``ui/settings.py``).

Modules: ``main_window`` (the composition), ``docks``, ``menus``, ``status``, ``dialogs``,
``recovery`` (work left by a crashed window), ``exports`` (export and copy), ``help`` (the
Help menu's pages), ``remembered`` (geometry and layout).
"""

from .docks import INPUTS_WIDTH, panel_needs
from .main_window import MainWindow

__all__ = ["INPUTS_WIDTH", "MainWindow", "panel_needs"]
