"""Commands that combine the layers: the floor above ``core``, ``io`` and ``ui``.

``attnexplorer export`` computes with the engine, writes matrices with ``io`` and, when asked,
draws figures with ``ui`` from the same result; ``import-model`` opens a real model
(``models``) and writes a layer as a session (``io``); ``fit`` trains a head with ``core.fit``
on a session or preset read by ``io`` and writes the fitted session. Nothing below this floor
imports it (pyproject's import-linter contracts, run by ``tests/test_layers.py``). ``arguments.py``
holds the command line's parsers, which ``cli.py`` dispatches.
"""
