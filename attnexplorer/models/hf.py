"""Opening a model through transformers: the reference, the GGUF reader, and the fallback.

attnexplorer runs its own forward (``forward.py``) on what ``native.py`` reads, because
importing transformers' modeling code alone takes seconds. transformers is still used:

- to read a ``.gguf`` file (it dequantises it; the result is cached as safetensors, so later
  opens are native);
- for a folder that ``native.py`` cannot vouch for (no safetensors, an unknown activation or
  tokenizer class), with the model's own forward and ``output_attentions``;
- by the tests, as the reference the native route is checked against.

The hub is switched offline (``offline()``) before transformers is imported and used, and every
``from_pretrained`` gets ``local_files_only=True``: nothing is ever downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from .errors import wrong_shape
from .forward import Forward
from .sources import Cancelled, ModelError, ModelSource, missing_dependencies

Progress = Callable[[float, str], None]

@contextmanager
def offline():
    """The hub offline for whatever runs inside (transformers' import and loads), and after.

    Switched through huggingface_hub's own settings (``constants.HF_HUB_OFFLINE``, read at each
    request by the huggingface_hub transformers 5 needs), never through ``os.environ``: this runs on the
    model loader's worker thread, and the environment is process-wide state that other threads
    read, and that child processes inherit (they see the environment the user started with).
    ``local_files_only=True`` on every ``from_pretrained`` keeps it offline on any version.
    """
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    constants.HF_HUB_DISABLE_TELEMETRY = True
    yield


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def transformers_module():
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    with offline():
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    return transformers


class TransformersTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        return ids, list(self.tokenizer.convert_ids_to_tokens(ids))

    def encode_plain(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def piece(self, token_id: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(int(token_id)) or ""

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def special_ids(self) -> set[int]:
        """The ids of special tokens (BOS, EOS, [CLS], padding…): a random probe leaves them out."""
        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        return {int(i) for i in self.tokenizer.all_special_ids} | {int(i) for i, t in added.items()
                                                                     if getattr(t, "special", False)}


# The files a tokenizer is built from: a folder with none of them has no tokenizer, and
# transformers then fails with a message that names none of them (or builds one that gives
# no tokens).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model")


def load_tokenizer(folder: Path, gguf: str | None, label: str) -> TransformersTokenizer:
    if gguf is None and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{label}: the folder holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
                         "copy the model's tokenizer files next to its weights")
    transformers = transformers_module()
    try:
        with offline():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)
    except KeyError as err:   # a malformed tokenizer file: transformers says only the key
        raise ModelError(f"{label}: cannot load the tokenizer: its files are malformed (no {err} entry)") from None
    except Exception as err:
        raise ModelError(f"{label}: cannot load the tokenizer: {first_line(err)}") from None
    return TransformersTokenizer(tokenizer)


def load_config(folder: Path, gguf: str | None, label: str):
    transformers = transformers_module()
    try:
        with offline():
            return transformers.AutoConfig.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)
    except Exception as err:   # transformers raises ValueError, OSError, KeyError… for bad files
        raise ModelError(f"{label}: cannot read the model's configuration: {first_line(err)}") from None


def load_model(folder: Path, gguf: str | None, label: str, say: Progress, check: Callable[[], None],
               decoder: bool = False):
    """(the base model in float32 with eager attention, its LM head's tensors by name), a GGUF
    file dequantised. A decoder is read as the causal-LM model so that an untied LM head
    (``lm_head.weight``) comes with it; a tied one is the embeddings, and a head the checkpoint
    does not hold (transformers would initialise it at random) is left out."""
    transformers = transformers_module()
    import torch

    auto = transformers.AutoModelForCausalLM if decoder else transformers.AutoModel
    try:
        with offline(), gguf_progress(say, check, 0.2, 0.7):
            model, info = auto.from_pretrained(
                str(folder), gguf_file=gguf, local_files_only=True, attn_implementation="eager", dtype=torch.float32,
                output_loading_info=True)
    except (ModelError, Cancelled):
        raise
    except Exception as err:
        if "ignore_mismatched_sizes" in str(err):   # its report, naming the tensor, went to the log only
            _mismatch(auto, folder, gguf, label)
        raise ModelError(f"{label}: cannot load the weights: {first_line(err)}") from None
    _check_loading(model, info, label)
    model.eval()
    head = {}
    if decoder:
        missing = " ".join(info.get("missing_keys", ()) if isinstance(info, dict) else ())
        if not getattr(model.config, "tie_word_embeddings", False) and "lm_head" not in missing:
            head["lm_head.weight"] = model.get_output_embeddings().weight.detach()
        model = model.base_model
    return model, head


def _mismatch(auto, folder: Path, gguf: str | None, label: str) -> None:
    """ModelError naming the first tensor whose shape is not the config's (with both shapes),
    read from a second load that lets transformers go past it (only on this failure's path)."""
    import torch

    try:
        with offline():
            _, info = auto.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True, dtype=torch.float32,
                                           ignore_mismatched_sizes=True, output_loading_info=True)
    except Exception:
        return   # the caller says what transformers said
    for key, found, wanted in sorted(info.get("mismatched_keys", ()), key=lambda m: m[0]):
        raise wrong_shape(label, key, found, wanted)


def _check_loading(model, info: dict, label: str) -> None:
    """ModelError naming a base-model tensor transformers filled at random (missing from the
    files) or left out (in the files, not in the model): either way the model would not be the
    one on disk. A task head's tensors (``lm_head``, ``cls.…``: outside the base model) are not
    checked here (``load_model`` leaves out a head the checkpoint does not hold)."""
    base = model.base_model
    own = {name.split(".", 1)[0] for name in base.state_dict()}
    prefix = "" if base is model else f"{model.base_model_prefix}."

    def base_names(keys) -> list[str]:
        names = (str(k[0]) if isinstance(k, tuple) else str(k) for k in keys or ())
        names = (k[len(prefix):] if prefix and k.startswith(prefix) else k for k in names)
        return sorted(k for k in names if k.split(".", 1)[0] in own)

    # an encoder's pooler is never read (a masked-LM checkpoint has none; AutoModel adds one)
    missing = [k for k in base_names(info.get("missing_keys")) if not k.startswith("pooler.")]
    missing += base_names(info.get("mismatched_keys"))
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelError(f"{label}: the weights lack {missing[0]}{more} (or give it the wrong shape); without it "
                         "the model would run with random numbers")
    unexpected = base_names(info.get("unexpected_keys"))
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise ModelError(f"{label}: the weights hold {unexpected[0]}{more}, which this model's config does not have "
                         "(a layer or bias it does not use); refusing rather than guessing")


def forward_with(model, family) -> Callable[[list[int]], Forward]:
    """The model's own forward, with hooks catching each layer's input and attention output."""

    def run(ids: list[int]) -> Forward:
        import torch

        layers = family.layers(model)
        inputs: list[Any] = [None] * len(layers)
        outputs: list[Any] = [None] * len(layers)
        handles = []

        def grab_input(i):
            def hook(_module, args, kwargs):
                inputs[i] = (args[0] if args else kwargs["hidden_states"]).detach()[0]
            return hook

        def grab_output(i):
            def hook(_module, _args, out):
                outputs[i] = (out[0] if isinstance(out, tuple) else out).detach()[0]
            return hook

        final: list[Any] = [None]

        def grab_final(_module, _args, out):
            final[0] = (out[0] if isinstance(out, tuple) else out).detach()[0]

        try:
            for i, block in enumerate(layers):
                handles.append(block.register_forward_pre_hook(grab_input(i), with_kwargs=True))
                handles.append(family.hook_module(block).register_forward_hook(grab_output(i)))
            handles.append(layers[-1].register_forward_hook(grab_final))
            with torch.no_grad():
                kwargs = {"use_cache": False} if family.decoder else {}
                result = model(input_ids=torch.tensor([ids]), output_attentions=True, **kwargs)
        finally:
            for h in handles:
                h.remove()
        attentions = getattr(result, "attentions", None)
        if not attentions or any(a is None for a in attentions) or any(x is None for x in inputs + outputs):
            raise ModelError("the model did not report its attention weights")
        return Forward(torch.stack([a[0].float() for a in attentions]), inputs, outputs, final=final[0])

    return run


@contextmanager
def gguf_progress(say: Progress, check: Callable[[], None], start: float, end: float):
    """Report (and allow cancelling) the dequantisation tensor by tensor, and the seconds spent
    reading the file before it.

    transformers walks the GGUF tensors through its module's ``tqdm``, which would print a
    progress bar on stderr; for the duration of the load that name is pointed at a wrapper that
    feeds our progress callback instead, and calls ``check`` (which raises when cancelled)
    between tensors.
    """
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    begun = threading.Event()
    done = threading.Event()

    def tensors(iterable, desc="", **_kwargs):
        begun.set()
        items = list(iterable)
        for i, item in enumerate(items):
            check()
            if i % 8 == 0 or i + 1 == len(items):
                say(start + (end - start) * (i + 1) / max(len(items), 1),
                    f"dequantising tensor {i + 1} of {len(items)}")
            yield item

    def waiting() -> None:
        # Before its first tensor transformers parses the whole file (SmolLM2's 49,152-token
        # vocabulary into Python lists), which took 100 s at a load of 9 with nothing to count:
        # the bar says so each second instead of sitting at one number.
        started = time.monotonic()
        while not done.wait(1.0):
            if not begun.is_set():
                say(start, f"reading the GGUF file before dequantising its tensors: {time.monotonic() - started:.0f} s")

    gguf_utils.tqdm = tensors
    ticker = threading.Thread(target=waiting, name="gguf-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        gguf_utils.tqdm = original


def write_cache(model, tokenizer: TransformersTokenizer, source: ModelSource, target: Path, done_marker: str,
                head: dict | None = None) -> None:
    """config.json + model.safetensors + tokenizer files, written aside and moved in whole."""
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=1))
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        state.update({k: v.detach().clone().contiguous() for k, v in (head or {}).items()})
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.tokenizer.save_pretrained(str(staging))
        (staging / done_marker).write_text(str(source.path) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
