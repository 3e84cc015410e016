"""Qt-free core: the session model, the engine, explanations and presets.

Nothing here imports PySide6 or pyqtgraph; tests drive it with no display.
"""
