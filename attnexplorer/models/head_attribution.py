"""Which heads matter for a prediction: direct logit attribution and the ablation sweep, Qt-free.

- ``direct_logit_attribution``: each head's output at the chosen position (its slice of the
  concatenated heads through its columns of the output projection W_o), through the final
  norm with the norm's scale taken from the unedited run (so the map is linear: RMSNorm
  c ↦ c / rms(x) · w; LayerNorm c ↦ (c − mean c) / σ(x) · w) and the unembedding row of the
  picked token (minus the other's for a logit difference). The rest (embeddings, MLPs, the
  output projections' biases, the final norm's bias, the LM head's bias) is the logit minus
  the heads, so heads + rest = the model's logit.
- ``ablation_sweep``: each head in turn zero-, mean- or patch-ablated (``interventions.Ablation``;
  patched: its output taken from the unedited run on a second text of the same token length),
  the change of the picked token's logit (or the logit difference); only the layers from the
  ablated one on are rerun, from the unedited run's cached residual stream.

A BERT encoder is post-LN (a head's output is renormalised inside its own layer): it has no
direct path to the logits, so DLA refuses it; the sweep works for any model with an LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import Cancelled
from .sources import ModelError


@dataclass(frozen=True)
class Picked:
    """The position and the token (or pair) whose logit is attributed."""

    position: int
    target: int
    versus: int | None = None

    def logit(self, logits) -> float:
        value = float(logits[self.target])
        return value - float(logits[self.versus]) if self.versus is not None else value


def pick(behaviour, target: str, versus: str | None = None, position: int | None = None) -> Picked:
    """The checked position and token ids, as ``predict`` checks them (ModelError)."""
    if behaviour.problem:
        raise ModelError(f"{behaviour.loaded.source.label} has no logits to attribute: {behaviour.problem}")
    n = len(behaviour.run.ids)
    position = behaviour.default_position() if position is None else position
    if not 0 <= position < n:
        raise ModelError(f"--position {position} is out of range: the text has tokens 0..{n - 1}")
    return Picked(position, behaviour.target_id(target),
                  None if versus is None else behaviour.target_id(versus, "--versus"))


def _unembedding(behaviour, picked: Picked):
    from .forward import family

    head = family(behaviour.kind, behaviour.loaded.config, behaviour.loaded.weights).lm_head()
    unembed = head[0].double()
    row = unembed[picked.target]
    return row - unembed[picked.versus] if picked.versus is not None else row


def _norm_map(behaviour, final_row):
    """The final norm as a linear map of a piece of the residual stream, its scale from ``final_row``."""
    import torch

    from .forward import family

    model = family(behaviour.kind, behaviour.loaded.config, behaviour.loaded.weights)
    x = final_row.double()
    if behaviour.kind == "llama":
        weight = behaviour.loaded.weights["norm.weight"].double()
        scale = torch.sqrt((x * x).mean() + model.eps)
        return lambda c: c / scale * weight
    weight = behaviour.loaded.weights["ln_f.weight"].double()
    sigma = torch.sqrt(x.var(unbiased=False) + model.eps)
    return lambda c: (c - c.mean(dim=-1, keepdim=True)) / sigma * weight


def head_outputs(behaviour, position: int):
    """(layers, H, d) float64: each head's output at ``position`` through its columns of W_o."""
    import torch

    from .forward import family, forward_from

    loaded, kind = behaviour.loaded, behaviour.kind
    with torch.no_grad():
        x = family(kind, loaded.config, loaded.weights).embed(behaviour.run.ids_tensor())
    _after, contexts = forward_from(kind, loaded.config, loaded.weights, 0, x, capture=range(loaded.num_layers))
    H, size = loaded.num_heads, loaded.head_dim
    out = []
    for layer in range(loaded.num_layers):
        row = contexts[layer][position].double().view(H, size)
        if kind == "llama":
            w = loaded.weights[f"layers.{layer}.self_attn.o_proj.weight"].double()   # d × H·d_v
            out.append(torch.einsum("hk,dhk->hd", row, w.view(w.shape[0], H, size)))
        else:
            w = loaded.weights[f"h.{layer}.attn.c_proj.weight"].double()             # H·d_v × d (Conv1D)
            out.append(torch.einsum("hk,hkd->hd", row, w.view(H, size, w.shape[1])))
    return torch.stack(out)


def direct_logit_attribution(behaviour, picked: Picked) -> tuple[np.ndarray, float, float]:
    """(layers × heads contributions, the rest, the model's logit or logit difference)."""
    import torch

    if behaviour.kind == "bert":
        raise ModelError("direct logit attribution needs a pre-norm decoder: BERT renormalises each head's output "
                         "inside its layer, so no head has a direct path to the logits (use --attribution ablate:zero)")
    final = torch.from_numpy(np.ascontiguousarray(behaviour.run.final[picked.position]))
    logit = picked.logit(behaviour.logits(final[None])[0].double())
    through = _norm_map(behaviour, final)
    contributions = through(head_outputs(behaviour, picked.position)) @ _unembedding(behaviour, picked)
    values = contributions.numpy()
    return values, logit - float(values.sum()), logit


def ablation_sweep(behaviour, picked: Picked, kind: str = "zero", progress=None, cancelled=None,
                   patch_text: str | None = None) -> tuple[np.ndarray, float]:
    """(layers × heads change of the picked logit when that head alone is ablated, the unedited logit).
    ``kind`` zero, mean or patch (``patch_text``: the second text, of the same token length).
    ``progress(done, total)`` after each head; ``cancelled()`` asked between heads and layers."""
    import torch

    from .interventions import Ablation, Interventions

    loaded = behaviour.loaded
    L, H = loaded.num_layers, loaded.num_heads
    if kind == "patch":
        # The patch text's run once, every layer's heads kept, before the first head: a text of
        # another length is refused here, and each head after reads its run from the cache.
        behaviour.check(Interventions(tuple(Ablation(layer, 0, "patch") for layer in range(L)), patch_text=patch_text))
    elif patch_text is not None:
        raise ModelError("a patch text is for the patch-ablation sweep (ablate:patch)")
    unedited = Interventions(patch_text=patch_text)
    logit = picked_logit(behaviour, picked)
    base = logit(torch.from_numpy(np.ascontiguousarray(behaviour.run.final[picked.position])))
    effects = np.zeros((L, H))
    for layer in range(L):
        for head in range(H):
            if cancelled is not None and cancelled():
                raise Cancelled()
            after = behaviour.rows_at(unedited.with_ablation(layer, head, kind), picked.position, cancelled)
            effects[layer, head] = logit(after[-1]) - base
            if progress is not None:
                progress(layer * H + head + 1, L * H)
    return effects, base


def picked_logit(behaviour, picked: Picked):
    """The picked logit (or logit difference) of one final residual row: the final norm (BERT: its
    masked-LM transform) and only the picked unembedding rows, as ``forward.logits`` applies them;
    the sweep's 270 rows each skip the whole vocabulary's product (SmolLM2: 49,152 × 576)."""
    import torch

    from .forward import family

    model = family(behaviour.kind, behaviour.loaded.config, behaviour.loaded.weights)
    unembed, bias = model.lm_head()
    picked_ids = [picked.target] + ([] if picked.versus is None else [picked.versus])

    def logit(row) -> float:
        with torch.no_grad():
            values = torch.nn.functional.linear(model.final_norm(row[None]), unembed[picked_ids],
                                                None if bias is None else bias[picked_ids])[0].double()
        return float(values[0]) - (float(values[1]) if picked.versus is not None else 0.0)

    return logit
