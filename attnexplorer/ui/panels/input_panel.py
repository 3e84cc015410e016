"""The attention input: token embeddings E, absolute positions P and X, side by side.

X = norm(E + P) is what W_q, W_k and W_v read. E, P and X share one colour scale, so what the
positions add and what the norm does (a row centred and rescaled to about unit size) is seen
as a change of colour; with a norm, a last column gives each token's mean (LayerNorm) and the
scale its row was multiplied by. Tokens run down the side, dimensions along the bottom.

Shown only when the session adds positions or normalises (otherwise X is E, the Inputs
table). P comes from the result when it carries it, else from its session (it is a pure
function of it); the mean and scale are ``core.inputs.stages.norm_statistics`` of E + P.
"""

from __future__ import annotations

import numpy as np

from ...core.compute.stage_inputs import positions_array
from ...core.inputs.stages import norm_statistics
from . import theme
from .common import FigurePanel, clamp_selection, feature_names, set_plot_title
from .matrix_view import MatrixView

NORM_NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}


def input_parts(result) -> dict:
    """What the panel draws for ``result``, as float64 arrays: ``E``, ``P`` (None without
    absolute positions), ``X``, and ``norm`` ({"columns": names, "values": (n, k)} or None)."""
    session = result.session
    e = np.asarray(session.embeddings, dtype=np.float64)
    p = result.P if result.P is not None else positions_array(session)
    p = None if p is None else np.asarray(p, dtype=np.float64)
    x = None if result.X is None else np.asarray(result.X, dtype=np.float64)
    norm = None
    if session.norm is not None:
        mean, scale = norm_statistics(session.norm.kind, e if p is None else e + p, session.norm.eps)
        if mean is None:
            norm = {"columns": ["scale"], "values": scale[:, None]}
        else:
            norm = {"columns": ["mean", "scale"], "values": np.column_stack([mean, scale])}
    return {"E": e, "P": p, "X": x, "norm": norm}


def x_title(session) -> str:
    """``X = LayerNorm(E + P)``, ``X = E + P`` or ``X = RMSNorm(E)``: how X was made."""
    inner = "E + P" if session.positions is not None and session.positions.absolute else "E"
    return f"X = {NORM_NAMES[session.norm.kind]}({inner})" if session.norm is not None else f"X = {inner}"


class InputPanel(FigurePanel):
    kind = "attention_input"
    title = "Attention input: embeddings E, positions P, X"
    short_title = "E · P · X"
    needs = frozenset({"X"})
    # E, P, X = norm(E + P) and the norm's statistics: a weight edit leaves them as they are.
    draws_from = ("tokens", "embeddings", "positions", "norm")
    minimum_size = (420, 260)

    def build(self) -> None:
        super().build()
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        select = lambda r, c: self.document.selection.set(query=r)  # noqa: E731 - one handler, four views
        self.e_view = MatrixView("E (embeddings)", row_name="token", col_name="dimension", colorbar=False,
                                 on_click=select, on_hover=self.show_readout)
        self.p_view = MatrixView("P (positions)", row_name="position", col_name="dimension", colorbar=False,
                                 on_click=select, on_hover=self.show_readout)
        self.x_view = MatrixView("X", row_name="token", col_name="dimension", colorbar=True,
                                 on_click=select, on_hover=self.show_readout)
        self.norm_view = MatrixView("norm", row_name="token", col_name="statistic", colorbar=False,
                                    on_click=select, on_hover=self.show_readout)
        for view in (self.e_view, self.p_view, self.x_view, self.norm_view):
            view.setLabel("bottom", None)
        self._placed: tuple = ()
        self.figure.layout.setRowStretchFactor(1, 1)

    def applies_to(self, session) -> bool:
        return session.norm is not None or (session.positions is not None and session.positions.absolute)

    def views(self) -> list[MatrixView]:
        return list(self._placed)

    def _arrange(self, wanted: tuple) -> None:
        """Exactly the wanted views in the figure, the first with the token labels."""
        if wanted == self._placed:
            return
        for view in self._placed:
            self.figure.removeItem(view)
        for col, view in enumerate(wanted):
            self.figure.addItem(view, row=1, col=col)
            first = col == 0
            view.setLabel("left", "token" if first else None)
            view.getAxis("left").setStyle(showValues=first)
        # The norm's one or two columns need less room than a matrix of d columns.
        for col, view in enumerate(wanted):
            self.figure.layout.setColumnStretchFactor(col, 1 if view is self.norm_view else 3)
        for col in range(len(wanted), 4):
            self.figure.layout.setColumnStretchFactor(col, 0)
        self._placed = wanted
        self.cache_axes()

    def redraw(self) -> None:
        result = self.document.result
        if result is None or result.X is None or not self.applies_to(result.session):
            for view in self._placed:
                view.clear_matrix()
            return
        session = result.session
        parts = input_parts(result)
        wanted = (self.e_view,) + ((self.p_view,) if parts["P"] is not None else ()) + (self.x_view,) + \
            ((self.norm_view,) if parts["norm"] is not None else ())
        self._arrange(wanted)
        matrices = [parts[k] for k in ("E", "P", "X") if parts[k] is not None]
        bound = max(theme.symmetric_levels(m)[1] for m in matrices)
        levels = (-bound, bound)
        tokens = result.tokens
        dims = feature_names("x", session.d)
        self.e_view.set_matrix(parts["E"], row_labels=tokens, col_labels=dims, levels=levels)
        if parts["P"] is not None:
            kind = session.positions.kind
            set_plot_title(self.p_view, f"P ({kind})")
            self.p_view.set_matrix(parts["P"], row_labels=tokens, col_labels=dims, levels=levels)
        set_plot_title(self.x_view, x_title(session))
        self.x_view.set_matrix(parts["X"], row_labels=tokens, col_labels=dims, levels=levels)
        if parts["norm"] is not None:
            set_plot_title(self.norm_view, NORM_NAMES[session.norm.kind])
            self.norm_view.set_matrix(parts["norm"]["values"], row_labels=tokens, col_labels=parts["norm"]["columns"])
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None:
            return
        _, query, _ = clamp_selection(self.document, result)
        for view in self._placed:
            view.set_selection(query, None)
