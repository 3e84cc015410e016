"""attnexplorer: explore transformer self-attention by hand.

The notebook API (no Qt needed)::

    import attnexplorer as ax
    s = ax.build_preset("dessert").session        # or ax.load_session("my.json")
    r = ax.compute(s)                              # every intermediate, as numpy arrays
    r.weights[0, 1]                                # head 0, query 1: the softmax row
    ax.save_session(s, "mine.json")
    ax.list_presets()
    s                                              # in Jupyter: the weights heatmap (SVG)
    ax.show(s)                                     # the desktop window on it, without blocking

Names are imported lazily so that ``import attnexplorer`` does not pull in torch.
"""

__version__ = "0.1.0"

_API = {
    "Session": ("core.inputs.session", "Session"),
    "Mask": ("core.inputs.session", "Mask"),
    "Scale": ("core.inputs.session", "Scale"),
    "PresetRef": ("core.inputs.session", "PresetRef"),
    "Norm": ("core.inputs.stages", "Norm"),
    "Positions": ("core.inputs.stages", "Positions"),
    "Source": ("core.inputs.stages", "Source"),
    "QKNorm": ("core.inputs.stages", "QKNorm"),
    "RopeScaling": ("core.inputs.stages", "RopeScaling"),
    "compute": ("core.compute.engine", "compute"),
    "AttentionResult": ("core.compute.engine", "AttentionResult"),
    "available_devices": ("core.compute.engine", "available_devices"),
    "explain_cell": ("core.reading.explain", "explain_cell"),
    "explain_output": ("core.reading.explain", "explain_output"),
    "list_presets": ("core.inputs.presets", "list_presets"),
    "build_preset": ("core.inputs.presets", "build_preset"),
    "load_session": ("io.session_file", "load_session"),
    "save_session": ("io.session_file", "save_session"),
    "session_from_dict": ("io.session_file", "session_from_dict"),
    "session_to_dict": ("io.session_file", "session_to_dict"),
    "AttnExplorerError": ("core.errors", "AttnExplorerError"),
    "SessionError": ("core.errors", "SessionError"),
    "show": ("commands.show", "show"),
}

__all__ = sorted(_API) + ["__version__"]


def __getattr__(name):
    if name in _API:
        import importlib

        module, attr = _API[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'attnexplorer' has no attribute {name!r}")


def __dir__():
    return __all__
