"""Commands that combine the layers: the floor above ``core``, ``io`` and ``ui``.

``attnexplorer export`` computes with the engine, writes matrices with ``io`` and, when asked,
draws figures with ``ui`` from the same result. Nothing below this floor imports it (the
layer test in ``tests/test_layers.py`` checks every import).
"""
