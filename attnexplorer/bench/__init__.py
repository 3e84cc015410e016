"""``attnexplorer bench``: the speed figures, measured headlessly (``run.py``).

Apart from the product: nothing in ``attnexplorer`` imports this package except the lazy entry
of the ``bench`` command in ``cli.py``. Each module measures one kind of row and holds its
targets; ``harness.py`` opens and closes the window for the window rows, ``report.py`` writes
the text report.
"""
