"""Real models as inputs: open a BERT-like (BERT, RoBERTa, DistilBERT), GPT-2 or Llama-like
(Llama, Qwen2, Mistral) model offline and read a layer's attention out as a version-2 session,
exact to the model's own numbers.

Qt-free (the window and the CLI both call it). torch and transformers are imported only when a
model is opened, so importing this package is cheap; without the ``models`` extra,
``missing_dependencies()`` names what to install.
"""

from .sources import (INSTALL_HINT, PACKAGED, ModelError, ModelSource, cache_dir, missing_dependencies,
                      packaged_models, resolve)

__all__ = ["INSTALL_HINT", "PACKAGED", "ModelError", "ModelSource", "cache_dir", "missing_dependencies",
           "packaged_models", "resolve", "load_model", "import_model", "LoadedModel", "ModelRun", "Cancelled"]


def __getattr__(name):
    # loading.py imports numpy and the families; kept lazy so `attnexplorer --help` stays instant.
    if name in ("load_model", "import_model", "LoadedModel", "ModelRun", "Cancelled"):
        from . import loading

        return getattr(loading, name)
    raise AttributeError(name)
