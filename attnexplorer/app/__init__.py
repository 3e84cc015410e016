"""The application core, without Qt: the floor between ``core``/``io``/``models`` and ``ui``.

- ``document.Document``: the session, its undo history (``history.UndoHistory`` of
  ``SessionChange`` steps, merge keys, the step and byte bounds), edit coalescing
  (``edit_later``), the selection (``selection.CurrentSelection``) and the compute
  (``compute.DocumentCompute``: a newer request supersedes an older one; every result carries
  its session);
- ``jobs.JobRunner``: the one way to run work in the background (the compute, a fit, opening
  a model, an autosave write).

Signals are plain Python (``psygnal``). Nothing here imports Qt: ``ui/`` wraps these objects
for widgets (``ui/document.py``) and hands them a ``post`` that delivers into Qt's event loop
(``ui/gui_thread.py``); the tests of ``tests/app`` run them with ``jobs.CallQueue`` instead.
"""
