"""Save an edited model: a Hugging Face folder (config.json, model.safetensors, the tokenizer's
files) with the edited layers and the zero-ablated heads folded into the weights.

transformers loads it (``AutoModelForCausalLM.from_pretrained(folder)``, or
``AutoModelForMaskedLM`` / ``AutoModel`` for a BERT) and predicts what attnexplorer shows with
the same interventions. A zero-ablated head is its columns of the output projection's input set
to 0 (the projection's bias stays: it never depended on the head). A mean or patched head's
output depends on the text, and an edited layer input, mask or scale is not a weight: those are
refused with that reason, and nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .sources import ModelError, gguf_cache_folder

# the task model each family is saved as, and the prefix of its base model's tensors there
TASK = {"gpt2": ("GPT2LMHeadModel", "transformer."), "llama": ("LlamaForCausalLM", "model."),
        "bert": ("BertForMaskedLM", "bert."), "qwen2": ("Qwen2ForCausalLM", "model."),
        "mistral": ("MistralForCausalLM", "model."), "roberta": ("RobertaForMaskedLM", "roberta."),
        "distilbert": ("DistilBertForMaskedLM", "distilbert."), "phi3": ("Phi3ForCausalLM", "model."),
        "gpt_neox": ("GPTNeoXForCausalLM", "gpt_neox."), "gemma": ("GemmaForCausalLM", "model."),
        "smollm3": ("SmolLM3ForCausalLM", "model."), "qwen3": ("Qwen3ForCausalLM", "model."),
        "olmo2": ("Olmo2ForCausalLM", "model."), "gemma2": ("Gemma2ForCausalLM", "model."),
        "gemma3_text": ("Gemma3ForCausalLM", "model.")}
# an encoder without its masked-LM head is saved as its base model
BASE = {"bert": "BertModel", "roberta": "RobertaModel", "distilbert": "DistilBertModel"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "added_tokens.json", "tokenizer.model", "chat_template.jinja")


def _projection(kind: str, layer: int) -> tuple[str, int]:
    """The output projection's weight name and the axis that runs over its input (the heads)."""
    if kind == "gpt2":
        return f"h.{layer}.attn.c_proj.weight", 0   # Conv1D: in × out
    if kind == "llama":
        return f"layers.{layer}.self_attn.o_proj.weight", 1
    return f"encoder.layer.{layer}.attention.output.dense.weight", 1


def folded_weights(behaviour, interventions) -> dict:
    """The model's tensors (the base model's names, the heads' own) with the interventions folded in;
    ModelError naming what cannot be folded."""
    loaded = behaviour.loaded
    kind = loaded.family.kind
    interventions = behaviour.effective(interventions)
    behaviour.check(interventions)
    if interventions.empty:
        raise ModelError("nothing to save: no head is ablated and no layer edited")
    unfoldable = sorted({a.kind for a in interventions.ablations} - {"zero"})
    if unfoldable:
        heads = ", ".join(a.describe() for a in interventions.ablations if a.kind != "zero")
        raise ModelError(f"cannot save {heads}: a {' or '.join(unfoldable)} ablation replaces the head's output by one "
                         "that depends on the text, which no weight can hold; only zero ablations and edited weights "
                         "can be saved")
    weights = dict(loaded.weights)
    for layer, session in interventions.edits:
        edit = behaviour.layer_edit(layer, session)
        if edit.unfoldable:
            raise ModelError(f"cannot save the edit of layer {layer}: {edit.unfoldable[0]}")
        weights.update(edit.fold)
    size = loaded.head_dim
    for a in interventions.ablations:
        name, axis = _projection(kind, a.layer)
        tensor = weights[name].detach().clone()
        columns = slice(a.head * size, (a.head + 1) * size)
        if axis == 0:
            tensor[columns, :] = 0.0
        else:
            tensor[:, columns] = 0.0
        weights[name] = tensor
    return weights


def _check_runs(behaviour, interventions, weights) -> None:
    """ModelError when the edited model would not run on its text: a weight that is NaN or
    infinite, or a residual stream past what float32's norms can square (a weight edited to
    1e38). The prediction refuses such an edit (``check_stream``); saved, it would have loaded
    in transformers and predicted NaN, so the window and ``export-model`` refuse it here."""
    import torch

    own = behaviour.loaded.weights
    for name, tensor in weights.items():   # the edited ones: the model's own were checked at open
        if tensor is not own.get(name) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ModelError(f"cannot save: the edited weight {name} holds NaN or infinity")
    try:
        behaviour.residuals(behaviour.effective(interventions))
    except ModelError as err:
        raise ModelError(f"cannot save: {err}") from None


def _config(loaded) -> dict:
    source = loaded.source
    folder = gguf_cache_folder(source) if source.gguf else source.folder
    path = folder / "config.json"
    if path.is_file():
        config = json.loads(path.read_text(encoding="utf-8"))
    else:   # opened through transformers and not cached (a read-only cache)
        config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    return config


def save_edited_model(behaviour, interventions, out) -> Path:
    """Write the folder ``out`` (which must not exist, or be empty), all at once: it is written
    beside and moved in whole, so a failure leaves nothing half-written."""
    from safetensors.torch import save_file

    loaded = behaviour.loaded
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelError(f"{out} exists and is not an empty folder: give a new folder to save the model in")
    if not out.parent.is_dir():
        raise ModelError(f"{out}: the folder {out.parent} does not exist")
    weights = folded_weights(behaviour, interventions)
    _check_runs(behaviour, interventions, weights)
    architecture, prefix = TASK[loaded.family.name]
    if loaded.family.kind == "bert" and behaviour.problem:   # an encoder without its masked-LM head stays a BertModel
        architecture, prefix = BASE[loaded.family.name], ""
    if loaded.family.name == "distilbert":   # back to DistilBERT's own names (families.bert_names)
        from .families import distilbert_names

        weights = distilbert_names(weights)
    from .decoders import checkpoint

    weights = checkpoint(loaded.config, weights)   # Phi-3's and GPT-NeoX's fused projections, Gemma's norms
    heads = ("lm_head.", "cls.", "vocab_", "embed_out.")   # RoBERTa's is lm_head. too, DistilBERT's vocab_*, GPT-NeoX's embed_out
    state = {}
    for name, tensor in weights.items():
        key = name if name.startswith(heads) else prefix + name
        state[key] = tensor.detach().float().contiguous()
    config = _config(loaded)
    config["architectures"] = [architecture]
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as err:   # a folder without write permission
        raise ModelError(f"cannot write {out}: {err.strerror or err}") from None
    try:
        (staging / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        _tokenizer(loaded, staging)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except OSError as err:
        raise ModelError(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _tokenizer(loaded, folder: Path) -> None:
    inner = getattr(loaded.tokenizer, "tokenizer", None)
    if inner is not None and hasattr(inner, "save_pretrained"):   # transformers' own tokenizer
        inner.save_pretrained(str(folder))
        return
    source = loaded.source
    origin = gguf_cache_folder(source) if source.gguf else source.folder
    for name in TOKENIZER_FILES:
        if (origin / name).is_file():
            shutil.copyfile(origin / name, folder / name)
