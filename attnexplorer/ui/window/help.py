"""The Help menu's pages: how to read the panels, the keyboard shortcuts, about."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence

HOW_TO_READ = """
<p>Each token's embedding (a row of <b>X</b>, in <i>Inputs</i>) is projected three times:
<b>Q</b> = X·W<sub>q</sub>, <b>K</b> = X·W<sub>k</sub>, <b>V</b> = X·W<sub>v</sub> (row vectors).</p>
<p><b>Scores</b> are Q·Kᵀ: row = the query token, column = the key token. <b>Scaled scores</b>
multiply them by 1/√d<sub>k</sub> (or divide by the temperature τ); blocked cells of the mask are
marked, not coloured. <b>Weights</b> are the softmax of each row, so every row sums to 1.
The <b>output</b> of a token is its weight row times V: a weighted average of the value vectors.</p>
<p>Click a token or a cell anywhere to select that query (and key): the <i>Query</i> panel shows
its score and weight rows as bars, and <i>Explain</i> writes out the arithmetic of that cell.</p>
<p>The presets reproduce three walkthroughs: <b>pronoun</b> (“The dog fetched the ball and she was
happy”: where does <i>she</i> look?), <b>dessert</b> (“Life is short, eat dessert first”, every
number printed in the walkthrough) and <b>sine</b> (attention as smoothing of a noisy signal,
with the temperature τ as the bandwidth). Change any input and watch everything follow.</p>
"""


def shortcuts_html(window) -> str:
    """Every action of ``window`` that has a shortcut, read from the actions themselves so the
    page cannot fall behind the menus."""
    rows = []
    for act in window.findChildren(QAction):
        keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in act.shortcuts())
        if keys and act.text():
            rows.append((act.text().replace("&", ""), keys))
    rows = sorted(set(rows))
    rows.append(("Copy or paste cells in a table", "Ctrl+C / Ctrl+V"))
    body = "".join(f"<tr><td>{name}</td><td>&nbsp;&nbsp;<b>{keys}</b></td></tr>" for name, keys in rows)
    return f"<table>{body}</table>"


def about_html() -> str:
    from ... import __version__

    return (f"<p><b>attnexplorer {__version__}</b></p><p>Explore transformer self-attention by hand: "
            "edit every token, embedding and weight and watch Q, K, V, the scores, the weights and the "
            "outputs follow. Computed with PyTorch; drawn with pyqtgraph and Qt.</p><p>MIT licence.</p>")
