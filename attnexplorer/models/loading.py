"""Open a model offline, run it on a text, and read one layer out as a version-2 session.

``load_model`` returns a ``LoadedModel`` (config, weights by transformers' parameter names,
tokenizer, and a forward); ``LoadedModel.run(text)`` runs the model once and keeps what every
view needs: the readable tokens, each layer's input (the residual stream entering it), every
layer's attention weights, and every attention module's output before the residual add. A long
text (``DENSE_RUN_BYTES``) keeps pooled thumbnails, each query's log Σ exp and sampled outputs
instead of the weights (``ModelRun.long``).
``layer_session(run, layer)`` turns one layer into the session dict that ``attnexplorer``
files hold.

Two routes, one result. A Hugging Face folder with safetensors and a tokenizer.json (MiniLM,
SmolLM2's cache, most hub models of the three families) is read without transformers
(``native.py``) and run with attnexplorer's own forward (``forward.py``): no transformers
import, which was most of the time an open took. A ``.gguf`` file, or a folder that route
cannot vouch for, goes through transformers (``hf.py``) with its eager attention and
``output_attentions``. The tests hold the own forward to transformers' numbers on every family.

Nothing is ever downloaded: transformers runs with the hub forced offline and
``local_files_only=True``. A GGUF file is dequantised once (about half a minute for SmolLM2) and
kept as safetensors in the cache folder (``sources.cache_dir``), so later opens read plain
float32 weights through the fast route.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np

from ..core.compute.memory import return_free_memory
from . import hf
from .families import Family, family_for, head_dim, max_positions, num_heads
from .sources import Cancelled, ModelError, ModelSource, gguf_cache_folder, missing_dependencies, resolve
from .tokens import readable_pieces

Progress = Callable[[float, str], None]

CACHE_DONE = "attnexplorer-complete"

OWN, TRANSFORMERS = "attnexplorer", "transformers"


# A run keeps every layer's n × n weights (layers × H × n² float32) up to this many bytes:
# MiniLM's 6 × 12 heads at its 512 positions is 75 MB, SmolLM2's 30 × 9 at 490 tokens 256 MB.
# A longer text runs the attention a block of rows at a time and keeps pooled thumbnails and
# each query's log Σ exp instead (``forward._Layers``), so 4,096 tokens of SmolLM2 stay far
# under 2 GB where the full stack would be 18 GB.
DENSE_RUN_BYTES = 256 * 1024**2


@dataclass(frozen=True)
class ModelRun:
    """One forward pass over a text. Arrays are float32 numpy.

    A short text keeps ``attentions`` (layers, H, n, n), the model's own weights, and its
    ``thumbnails`` are those same arrays. A long one (``long``) has ``attentions`` None,
    ``thumbnails`` (layers, H, t, t) max-pooled to about 128 cells a side, and ``log_sum_exp``
    (layers, H, n), log Σ_j exp(score) of each query's row, and ``attention_outputs`` only for
    the queries ``output_rows`` (evenly spaced, about 512): with these an opened layer is
    checked against the model (``models.views.long_differences``).
    """

    text: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    tokens: tuple[str, ...]
    layer_inputs: tuple[np.ndarray, ...]      # (n × d) entering each layer
    attentions: np.ndarray | None             # (layers, H, n, n), the model's attention weights
    attention_outputs: np.ndarray             # (layers, n, d) before the residual add; rows output_rows if long
    thumbnails: np.ndarray | None = None      # (layers, H, t, t) what the model view draws
    log_sum_exp: np.ndarray | None = None     # (layers, H, n) for a long run
    output_rows: np.ndarray | None = None     # the queries attention_outputs holds for a long run
    final: np.ndarray | None = None           # (n × d) the residual stream after the last layer

    def residual(self, layer: int) -> np.ndarray:
        """The residual stream entering ``layer`` (``layer == layers``: after the last one)."""
        return self.final if layer == len(self.layer_inputs) else self.layer_inputs[layer]

    @property
    def long(self) -> bool:
        return self.attentions is None

    def ids_tensor(self):
        import torch

        return torch.tensor(self.ids, dtype=torch.long)


@dataclass
class LoadedModel:
    """An opened model. ``engine`` says which forward runs it: attnexplorer's own or transformers'."""

    source: ModelSource
    family: Family
    config: Any
    weights: Any                    # base model tensors by transformers' parameter names
    tokenizer: Any                  # .encode(text) -> (ids, pieces)
    forward: Callable[[list[int]], Any]
    engine: str
    from_cache: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

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
        if not isinstance(text, str):
            hint = " (decode the bytes first: text.decode())" if isinstance(text, (bytes, bytearray)) else ""
            raise ModelError(f"the text must be a string, got {type(text).__name__}{hint}")
        if not text.strip():
            raise ModelError("the text is empty: type a sentence for the model to read")
        ids, pieces = self.tokenizer.encode(text)
        limit = min(self.max_positions, 8192)
        if len(ids) > limit:
            raise ModelError(f"the text is {len(ids)} tokens long; {self.source.label} reads at most {limit}")
        if not ids:
            raise ModelError("the text gives no tokens")
        return ids, pieces

    def is_long(self, tokens: int) -> bool:
        """Whether a text of ``tokens`` tokens runs without keeping every n × n (``DENSE_RUN_BYTES``)."""
        return self.num_layers * self.num_heads * tokens * tokens * 4 > DENSE_RUN_BYTES

    def run(self, text: str, progress: Progress | None = None, cancelled: Callable[[], bool] | None = None,
            observe=None) -> ModelRun:
        """Run the model once on ``text`` (no gradients).

        A long text (``is_long``) always runs through attnexplorer's own forward, a block of
        rows at a time, whichever way the model was opened: transformers' eager attention would
        keep every layer's n × n. ``progress(fraction, message)`` is called as each layer starts
        and ``cancelled()`` asked there (``Cancelled`` raised), for a long text between blocks too.
        ``observe(layer, first_row, weights)`` sees every layer's attention weights as they are
        made (``forward._Layers``; through transformers, each layer's whole weights after the run).
        """
        ids, pieces = self.tokenize(text)
        return self.run_ids(ids, pieces, text, progress, cancelled, observe)

    def run_ids(self, ids: list[int], pieces: list[str], text: str, progress: Progress | None = None,
                cancelled: Callable[[], bool] | None = None, observe=None) -> ModelRun:
        """``run`` on token ids given as they are (a probe of random tokens), ``text`` naming them."""
        say = progress or (lambda _f, _m: None)
        long = self.is_long(len(ids))

        def layer_progress(layer: int, layers: int) -> None:
            if layer < layers:
                say(layer / layers, f"running {self.source.label} on {len(ids):,} tokens: layer {layer + 1} of {layers}")
            else:
                say(1.0, f"{self.source.label} ran all {layers} layers on {len(ids):,} tokens")

        try:
            if long or self.engine == OWN:
                from .forward import forward

                if long and self.engine != OWN:
                    self._check_own_forward(len(ids))
                result = forward(self.family.kind, self.config, self.weights, ids, keep_attentions=not long,
                                 progress=layer_progress, cancelled=cancelled, observe=observe)
            else:
                from .forward import threads_for

                _check(cancelled)
                with threads_for(len(ids)):   # as the own forward: the same rounding
                    result = self.forward(ids)
                for layer, weights in enumerate(result.attentions if observe is not None else ()):
                    observe(layer, 0, weights.float())
        except ModelError:
            raise
        except RuntimeError as err:   # weights whose shapes do not fit the config
            raise ModelError(f"{self.source.label} failed to run: {hf.first_line(err)}") from None
        if long:
            return_free_memory()
        outputs = result.attention_outputs
        if not hasattr(outputs, "shape"):   # transformers' hooks give a list
            import torch

            outputs = torch.stack(list(outputs))
        attentions = None if result.attentions is None else result.attentions.float().numpy()
        layer_inputs = tuple(x.float().numpy() for x in result.layer_inputs)
        final = None if result.final is None else result.final.float().numpy()
        self._check_finite(layer_inputs, final)
        return ModelRun(
            text=text, ids=tuple(ids), pieces=tuple(pieces),
            tokens=tuple(readable_pieces(pieces, self.family.wordpiece)),
            layer_inputs=layer_inputs,
            attentions=attentions,
            attention_outputs=outputs.float().numpy(),
            thumbnails=attentions if attentions is not None else result.thumbnails.numpy(),
            log_sum_exp=None if result.log_sum_exp is None else result.log_sum_exp.numpy(),
            output_rows=None if result.output_rows is None else result.output_rows.numpy(),
            final=final,
        )

    def _check_finite(self, layer_inputs, final) -> None:
        """ModelError when the run's stream holds NaN or infinity (a NaN weight: the thumbnails
        past it were blank and the prediction NaN, with no word why), or a value the next norm
        squares past float32's range (``interventions.STREAM_LIMIT``: an edited model saved and
        opened again predicted from zeros), naming the first layer it reaches and, looked for
        only then, a weight that is not finite."""
        from .interventions import STREAM_LIMIT

        streams = list(layer_inputs) + ([] if final is None else [final])
        # max and min, not abs (no copy); NaN propagates through both
        largest = [max(float(np.max(x)), -float(np.min(x))) for x in streams]
        bad = next((i for i, value in enumerate(largest) if not value < STREAM_LIMIT), None)
        if bad is None:
            return
        import torch

        culprit = next((name for name, w in self.weights.items()
                        if w.is_floating_point() and not bool(torch.isfinite(w).all())), None)
        where = f"layer {bad}'s input" if bad < len(layer_inputs) else "the last layer's output"
        if culprit:
            why = f"the weight {culprit} is not finite (NaN or infinity)"
        elif largest[bad] == largest[bad] and largest[bad] != float("inf"):
            why = (f"its stream reaches {largest[bad]:.3g}, past {STREAM_LIMIT:.2g}, which its norm squares beyond "
                   "float32's range (it would predict from zeros)")
        else:
            why = "its stream is NaN or infinity (its config's eps, or a value past float32's range)"
        raise ModelError(f"{self.source.label} cannot run on this text from {where} on: {why}")

    def _check_own_forward(self, tokens: int) -> None:
        """A model opened through transformers runs a long text with the own forward: only where
        that forward implements everything its config asks for."""
        from .native import NotNative, check_config

        try:
            check_config(self.config)
        except NotNative as why:
            limit = int((DENSE_RUN_BYTES / (4 * self.num_layers * self.num_heads)) ** 0.5)
            raise ModelError(f"the text is {tokens:,} tokens long; {self.source.label} ({why}) runs only through "
                             f"transformers, which keeps every layer's weights: at most {limit:,} tokens") from None

    def layer_parts(self, run: ModelRun, layer: int) -> dict:
        """Layer ``layer`` of ``run`` as a session dict holding float32 numpy arrays, which
        ``session_from_dict`` takes as they are (the window's way in): version 2, or 3 where
        the layer has a stage version 3 added (QK-norm, soft-capping, a scale factor, RoPE
        scaling or the model's float32 angles)."""
        check_layer(layer, self)
        parts = self.family.parts(self.weights, self.config, run, layer)
        positions = parts.get("positions") or {}
        newer = (any(parts.get(k) is not None for k in ("qk_norm", "softcap", "sinks"))
                 or isinstance(parts.get("scale"), dict) and "factor" in parts["scale"]
                 or positions.get("scaling") is not None or positions.get("angles", "float64") != "float64")
        session = {"format": "attnexplorer-session", "version": 3 if newer else 2, "tokens": list(run.tokens)}
        session.update(parts)
        session["source"] = None
        session["preset"] = None
        # Which model, layer and text the session was read from: what `predict --session` and
        # `export-model` check an edited file against, and the text they rerun the model on.
        session["model"] = {"name": self.source.label, "layer": layer, "text": run.text}
        return session

    def checked_parts(self, run: ModelRun, layer: int) -> dict:
        """``layer_parts``, checked by the rules every session file is read by: ModelError naming
        what a session cannot hold (a NaN weight, an inf position, an eps ≤ 0), so that what an
        import writes always loads."""
        from ..core.errors import SessionError
        from ..io.session_file import session_from_dict

        parts = self.layer_parts(run, layer)
        label = f"layer {layer} of {self.source.label}"
        try:
            session_from_dict(parts, label)
        except SessionError as err:
            raise ModelError(f"{err} (the model's own value): it cannot be opened as a session") from None
        return parts

    def layer_session(self, run: ModelRun, layer: int) -> dict:
        """Layer ``layer`` of ``run`` as a version-2 session dict (JSON-ready: lists of floats),
        checked as a session file is (``checked_parts``)."""
        return _plain(self.checked_parts(run, layer))


def check_layer(layer: Any, model: LoadedModel) -> None:
    """ModelError unless ``layer`` is a whole number naming one of ``model``'s layers."""
    if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)):
        raise ModelError(f"the layer must be a whole number (0..{model.num_layers - 1}), got {layer!r}")
    if not 0 <= layer < model.num_layers:
        raise ModelError(f"layer {layer} is out of range: {model.source.label} has layers 0..{model.num_layers - 1}")


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


def first_gguf_open(source: ModelSource) -> bool:
    """Whether opening ``source`` dequantises a GGUF file (no finished cache of it yet)."""
    return bool(source.gguf) and not (gguf_cache_folder(source) / CACHE_DONE).is_file()


def load_model(spec: str | ModelSource, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None, engine: str = "auto") -> LoadedModel:
    """Open ``spec`` (minilm, smollm2, a folder or a .gguf file) offline; ModelError says why not.

    ``progress(fraction, message)`` is called between steps; ``cancelled()`` is polled there
    and raises ``Cancelled`` (a step already running, such as reading a file, finishes first).
    ``engine="auto"`` runs attnexplorer's own forward where the folder allows it;
    ``engine="transformers"`` always opens the model through transformers, the reference.
    """
    if engine not in ("auto", TRANSFORMERS):
        raise ModelError(f"engine must be 'auto' or 'transformers', not {engine!r}")
    say = progress or (lambda _f, _m: None)
    check = partial(_check, cancelled)
    source = spec if isinstance(spec, ModelSource) else resolve(spec)
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    folder, gguf, from_cache = source.folder, source.gguf, False
    if gguf:
        cached = gguf_cache_folder(source)
        if (cached / CACHE_DONE).is_file():
            folder, gguf, from_cache = cached, None, True
    notes: list[str] = []
    if engine == "auto" and not gguf:
        from . import native

        say(0.1, f"reading {source.label}")
        try:
            config, weights, tokenizer = native.open_folder(folder)
        except native.NotNative as why:
            notes.append(f"opened through transformers ({why})")
        else:
            family = family_for(config)
            check()
            if tokenizer is None:
                say(0.6, f"loading {source.label}'s tokenizer")
                tokenizer = hf.load_tokenizer(folder, None, source.label)
            from .forward import forward

            say(1.0, f"{source.label} ready")
            return LoadedModel(source, family, config, weights, tokenizer, partial(forward, family.kind, config, weights),
                               OWN, from_cache, notes)
    return _load_with_transformers(source, folder, gguf, from_cache, notes, say, check)


def _load_with_transformers(source, folder, gguf, from_cache, notes, say, check) -> LoadedModel:
    say(0.02, f"importing transformers for {source.label}")
    hf.transformers_module()
    check()
    say(0.1, f"reading {source.label}'s configuration")
    config = hf.load_config(folder, gguf, source.label)
    family = family_for(config)
    from .native import check_activation

    check_activation(config, source.label)
    check()
    say(0.2, f"dequantising {source.label} (about half a minute, once)" if gguf else f"loading {source.label}'s weights")
    model, head = hf.load_model(folder, gguf, source.label, say, check, family.decoder)
    check()
    say(0.75, f"loading {source.label}'s tokenizer")
    tokenizer = hf.load_tokenizer(folder, gguf, source.label)
    weights = {**model.state_dict(), **head}
    if family.name == "distilbert":   # one encoder's names for the forward, the sessions and the edits
        from .families import bert_names

        weights = bert_names(weights)
    from .decoders import canonical

    weights = canonical(model.config, weights)   # Phi-3, GPT-NeoX, Gemma under Llama's names
    loaded = LoadedModel(source, family, model.config, weights, tokenizer,
                         hf.forward_with(model, family), TRANSFORMERS, from_cache, notes)
    if gguf:
        say(0.9, "caching the dequantised weights")
        try:
            hf.write_cache(model, tokenizer, source, gguf_cache_folder(source), CACHE_DONE, head)
        except OSError as err:   # a read-only cache costs speed next time, not correctness
            loaded.notes.append(f"could not cache the dequantised weights: {err.strerror or err}")
    say(1.0, f"{source.label} ready")
    return loaded


def import_model(spec: str, text: str, layer: int = 0) -> dict:
    """The whole path the CLI takes: open, check the layer, run, read the layer out."""
    loaded = load_model(spec)
    check_layer(layer, loaded)
    return loaded.layer_session(loaded.run(text), layer)
