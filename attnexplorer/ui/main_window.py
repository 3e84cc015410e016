"""The main window moved to the ``ui.window`` package (docks, menus, status bar, dialogs …);
this name stays so that ``from attnexplorer.ui.main_window import MainWindow`` keeps working."""

from .window import INPUTS_WIDTH, MainWindow

__all__ = ["INPUTS_WIDTH", "MainWindow"]
