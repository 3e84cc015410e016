"""Open a model offline, run it on a text, and read one layer out as a version-2 session.

``load_model`` returns a ``LoadedModel`` (the torch module in float32 with eager attention, its
tokenizer and family); ``LoadedModel.run(text)`` runs the model once and keeps what every view
needs: the readable tokens, each layer's input (the residual stream entering it), every
layer's attention weights as the model reports them (``output_attentions``) and every
attention module's output before the residual add. ``layer_session(run, layer)`` turns one
layer into the session dict that ``attnexplorer`` files hold.

The hub is forced offline before transformers is imported and every ``from_pretrained`` gets
``local_files_only=True``: nothing is ever downloaded. A GGUF file is dequantised once (about
half a minute for SmolLM2) and kept as safetensors in the cache folder (``sources.cache_dir``),
so later opens read plain float32 weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .families import Family, family_for, head_dim, max_positions, num_heads
from .sources import ModelError, ModelSource, gguf_cache_folder, missing_dependencies, resolve
from .tokens import readable_pieces

Progress = Callable[[float, str], None]

CACHE_DONE = "attnexplorer-complete"


class Cancelled(Exception):
    """The caller's ``cancelled()`` said stop between two loading steps."""


def _offline() -> None:
    # Read by huggingface_hub when it is first imported, so set before any transformers import.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _transformers():
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    _offline()
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


@dataclass(frozen=True)
class ModelRun:
    """One forward pass over a text. Arrays are float32 numpy; attention is (layers, H, n, n)."""

    text: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    tokens: tuple[str, ...]
    layer_inputs: tuple[np.ndarray, ...]      # (n × d) entering each layer
    attentions: np.ndarray                    # (layers, H, n, n), the model's output_attentions
    attention_outputs: np.ndarray             # (layers, n, d), before the residual add

    def ids_tensor(self):
        import torch

        return torch.tensor(self.ids, dtype=torch.long)


@dataclass
class LoadedModel:
    source: ModelSource
    family: Family
    model: Any
    tokenizer: Any
    from_cache: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def num_layers(self) -> int:
        return len(self.family.layers(self.model))

    @property
    def num_heads(self) -> int:
        return num_heads(self.config)

    @property
    def num_kv_heads(self) -> int:
        return int(getattr(self.config, "num_key_value_heads", None) or self.num_heads)

    @property
    def head_dim(self) -> int:
        return head_dim(self.config)

    @property
    def max_positions(self) -> int:
        return max_positions(self.config)

    def describe(self) -> str:
        kv = f", {self.num_kv_heads} K/V heads" if self.num_kv_heads != self.num_heads else ""
        return (f"{self.source.label}: {self.family.name}, {self.num_layers} layers × {self.num_heads} heads{kv}, "
                f"d = {self.config.hidden_size}, d_k = {self.head_dim}")

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        """The tokenizer's ids and pieces for ``text``; ModelError for an empty or too long text."""
        if not isinstance(text, str) or not text.strip():
            raise ModelError("the text is empty: type a sentence for the model to read")
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        limit = min(self.max_positions, 8192)
        if len(ids) > limit:
            raise ModelError(f"the text is {len(ids)} tokens long; {self.source.label} reads at most {limit}")
        if not ids:
            raise ModelError("the text gives no tokens")
        return ids, list(self.tokenizer.convert_ids_to_tokens(ids))

    def run(self, text: str) -> ModelRun:
        """Run the model once on ``text`` (eager attention, no gradients)."""
        import torch

        ids, pieces = self.tokenize(text)
        layers = self.family.layers(self.model)
        inputs: list[Any] = [None] * len(layers)
        outputs: list[Any] = [None] * len(layers)
        handles = []

        def grab_input(i):
            def hook(_module, args, kwargs):
                inputs[i] = (args[0] if args else kwargs["hidden_states"]).detach()
            return hook

        def grab_output(i):
            def hook(_module, _args, out):
                outputs[i] = (out[0] if isinstance(out, tuple) else out).detach()
            return hook

        try:
            for i, block in enumerate(layers):
                handles.append(block.register_forward_pre_hook(grab_input(i), with_kwargs=True))
                handles.append(self.family.hook_module(block).register_forward_hook(grab_output(i)))
            with torch.no_grad():
                kwargs = {"use_cache": False} if self.family.decoder else {}
                result = self.model(input_ids=torch.tensor([ids]), output_attentions=True, **kwargs)
        finally:
            for h in handles:
                h.remove()
        attentions = getattr(result, "attentions", None)
        if not attentions or any(a is None for a in attentions) or any(x is None for x in inputs + outputs):
            raise ModelError(f"{self.source.label} did not report its attention weights")
        return ModelRun(
            text=text, ids=tuple(ids), pieces=tuple(pieces),
            tokens=tuple(readable_pieces(pieces, self.family.name == "bert")),
            layer_inputs=tuple(x[0].float().numpy() for x in inputs),
            attentions=np.stack([a[0].float().numpy() for a in attentions]),
            attention_outputs=np.stack([o[0].float().numpy() for o in outputs]),
        )

    def layer_session(self, run: ModelRun, layer: int) -> dict:
        """Layer ``layer`` of ``run`` as a version-2 session dict (JSON-ready: lists of floats)."""
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise ModelError(f"layer {layer} is out of range: {self.source.label} has layers 0..{self.num_layers - 1}")
        parts = self.family.parts(self.model, self.config, run, layer)
        session = {"format": "attnexplorer-session", "version": 2, "tokens": list(run.tokens)}
        session.update(parts)
        session["source"] = None
        session["preset"] = None
        return _plain(session)


def _plain(value: Any) -> Any:
    """Numpy arrays and scalars to lists and floats (float32 values are exact as Python floats)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64).tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check(cancelled: Callable[[], bool] | None) -> None:
    if cancelled is not None and cancelled():
        raise Cancelled()


def load_model(spec: str | ModelSource, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> LoadedModel:
    """Open ``spec`` (minilm, smollm2, a folder or a .gguf file) offline; ModelError says why not.

    ``progress(fraction, message)`` is called between steps; ``cancelled()`` is polled there
    and raises ``Cancelled`` (a step already running, such as dequantising, finishes first).
    """
    say = progress or (lambda _f, _m: None)
    source = spec if isinstance(spec, ModelSource) else resolve(spec)
    say(0.02, f"importing transformers for {source.label}")
    transformers = _transformers()
    import torch

    _check(cancelled)
    folder, gguf, from_cache = source.folder, source.gguf, False
    if gguf:
        cached = gguf_cache_folder(source)
        if (cached / CACHE_DONE).is_file():
            folder, gguf, from_cache = cached, None, True
    say(0.1, f"reading {source.label}'s configuration")
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)
    except Exception as err:   # transformers raises ValueError, OSError, KeyError… for bad files
        raise ModelError(f"{source.label}: cannot read the model's configuration: {_first_line(err)}") from None
    family = family_for(config)
    _check(cancelled)
    say(0.2, f"dequantising {source.label} (about half a minute, once)" if gguf else f"loading {source.label}'s weights")
    try:
        with _gguf_progress(say, cancelled, 0.2, 0.7):
            model = transformers.AutoModel.from_pretrained(
                str(folder), gguf_file=gguf, local_files_only=True, attn_implementation="eager", dtype=torch.float32)
    except Cancelled:
        raise
    except Exception as err:
        raise ModelError(f"{source.label}: cannot load the weights: {_first_line(err)}") from None
    model.eval()
    _check(cancelled)
    say(0.75, f"loading {source.label}'s tokenizer")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)
    except Exception as err:
        raise ModelError(f"{source.label}: cannot load the tokenizer: {_first_line(err)}") from None
    loaded = LoadedModel(source, family, model, tokenizer, from_cache)
    if gguf:
        say(0.9, "caching the dequantised weights")
        try:
            _write_cache(loaded, gguf_cache_folder(source))
        except OSError as err:   # a read-only cache costs speed next time, not correctness
            loaded.notes.append(f"could not cache the dequantised weights: {err.strerror or err}")
    say(1.0, f"{source.label} ready")
    return loaded


@contextmanager
def _gguf_progress(say: Progress, cancelled, start: float, end: float):
    """Report (and allow cancelling) the dequantisation tensor by tensor.

    transformers walks the GGUF tensors through its module's ``tqdm``, which would print a
    progress bar on stderr; for the duration of the load that name is pointed at a wrapper that
    feeds our progress callback instead, and polls ``cancelled`` between tensors.
    """
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)

    def tensors(iterable, desc="", **_kwargs):
        items = list(iterable)
        for i, item in enumerate(items):
            _check(cancelled)
            if i % 16 == 0:
                say(start + (end - start) * i / max(len(items), 1), f"dequantising tensor {i + 1} of {len(items)}")
            yield item

    gguf_utils.tqdm = tensors
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _write_cache(loaded: LoadedModel, target: Path) -> None:
    """config.json + model.safetensors + tokenizer files, written aside and moved in whole."""
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        config = loaded.model.config.to_dict()
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=1))
        state = {k: v.detach().contiguous() for k, v in loaded.model.state_dict().items()}
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        loaded.tokenizer.save_pretrained(str(staging))
        (staging / CACHE_DONE).write_text(str(loaded.source.path) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def import_model(spec: str, text: str, layer: int = 0) -> dict:
    """The whole path the CLI takes: open, check the layer, run, read the layer out."""
    loaded = load_model(spec)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < loaded.num_layers:
        raise ModelError(f"layer {layer} is out of range: {loaded.source.label} has layers 0..{loaded.num_layers - 1}")
    return loaded.layer_session(loaded.run(text), layer)
