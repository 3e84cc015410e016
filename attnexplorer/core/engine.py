"""The compute engine: a pure function from a session to every intermediate.

``compute(session)`` runs scaled dot-product self-attention for all heads at once (batched
over a head dimension, never a Python loop over heads) with PyTorch, on the CPU or a GPU, and
returns an ``AttentionResult`` of numpy arrays on the host. The window and the CLI never do
attention arithmetic themselves; they call this.

torch is imported lazily so that ``attnexplorer --help`` and the file tools stay instant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .errors import EngineError
from .session import Session

DTYPES = ("float32", "float64", "float16", "bfloat16")

# Every intermediate the result can carry, in the order the computation makes them.
INTERMEDIATES = ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "concat", "output")


def _torch():
    import torch

    return torch


def available_devices() -> list[str]:
    """Devices torch can use here: always ``cpu``, then ``cuda``/``mps`` when present."""
    torch = _torch()
    devices = ["cpu"]
    try:
        if torch.cuda.is_available():
            devices.append("cuda")
    except Exception:  # a broken driver must not take the app down; the CPU still works
        pass
    try:
        if torch.backends.mps.is_available():
            devices.append("mps")
    except Exception:
        pass
    return devices


def supported_dtypes(device: str) -> list[str]:
    """Dtypes the engine offers on ``device`` (float64 is not available on mps)."""
    if device == "mps":
        return ["float32", "float16", "bfloat16"]
    return list(DTYPES)


def resolve(device: str, dtype: str):
    """Check ``device`` and ``dtype`` and return the torch objects, or raise EngineError."""
    torch = _torch()
    base = device.split(":")[0]
    devices = available_devices()
    if base not in devices:
        raise EngineError(f"device {device!r} is not available here; available: {', '.join(devices)}")
    if base == "cuda" and ":" in device:
        try:
            idx = int(device.split(":", 1)[1])
        except ValueError:
            raise EngineError(f"device {device!r} is not a valid device name") from None
        if not 0 <= idx < torch.cuda.device_count():
            raise EngineError(f"device {device!r} is not available here; there are {torch.cuda.device_count()} CUDA devices")
    if dtype not in DTYPES:
        raise EngineError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    if dtype not in supported_dtypes(base):
        raise EngineError(f"dtype {dtype} is not supported on {base}; choose one of {', '.join(supported_dtypes(base))}")
    return torch.device(device), getattr(torch, dtype)


@dataclass(frozen=True, eq=False)
class AttentionResult:
    """Every intermediate of one computation, as host numpy arrays.

    Shapes (H heads, n tokens): ``Q``/``K`` (H, n, d_k); ``V`` (H, n, d_v); ``scores`` raw
    QKᵀ, ``scaled_scores`` (scores × scale factor, not masked) and ``weights`` (H, n, n);
    ``mask`` (n, n), True = blocked; ``head_outputs`` (H, n, d_v); ``concat`` (n, H·d_v);
    ``output`` is ``concat @ W_o`` when the session has W_o, else ``concat``.
    ``blocked_rows`` (n,) flags queries whose every key is blocked: their weights and outputs
    are 0, never NaN. An intermediate not asked for (see ``compute(keep=...)``) is ``None``.
    """

    tokens: tuple[str, ...]
    scale_factor: float
    mask: np.ndarray
    blocked_rows: np.ndarray
    Q: np.ndarray | None
    K: np.ndarray | None
    V: np.ndarray | None
    scores: np.ndarray | None
    scaled_scores: np.ndarray | None
    weights: np.ndarray | None
    head_outputs: np.ndarray | None
    concat: np.ndarray | None
    output: np.ndarray | None
    device: str = "cpu"
    dtype: str = "float32"
    compute_ms: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def heads(self) -> int:
        for a in (self.weights, self.Q, self.head_outputs):
            if a is not None:
                return a.shape[0]
        return 0

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def any_blocked_rows(self) -> bool:
        return bool(self.blocked_rows.any())


def _host(t, want: bool):
    """A read-only host numpy array of ``t`` (float32 for half types), or None."""
    if not want:
        return None
    torch = _torch()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    a = t.detach().cpu().numpy()
    a.flags.writeable = False
    return a


def compute(session: Session, device: str = "cpu", dtype: str = "float32", keep=None) -> AttentionResult:
    """Compute self-attention for ``session`` and return every intermediate.

    ``keep`` is an optional collection of names from ``INTERMEDIATES``; the others are not
    copied to the host (they are ``None`` in the result). Large sessions on a GPU use it so
    that only what is on screen crosses the bus. Raises ``EngineError`` for an unavailable
    device or dtype.
    """
    torch = _torch()
    dev, tdtype = resolve(device, dtype)
    wanted = set(INTERMEDIATES if keep is None else keep)
    unknown = wanted - set(INTERMEDIATES)
    if unknown:
        raise EngineError(f"unknown intermediate(s): {', '.join(sorted(unknown))}")
    mask_np = session.mask.matrix(session.n)
    factor = session.scale.factor(session.d_k)
    start = time.perf_counter()
    try:
        with torch.inference_mode():
            # torch.tensor copies: the session's arrays are read-only and must stay so.
            x = torch.tensor(session.embeddings, dtype=tdtype, device=dev)
            wq = torch.tensor(session.w_query, dtype=tdtype, device=dev)
            wk = torch.tensor(session.w_key, dtype=tdtype, device=dev)
            wv = torch.tensor(session.w_value, dtype=tdtype, device=dev)
            # (n, d) @ (H, d, k) broadcasts to (H, n, k): all heads in one batched matmul.
            q = x @ wq
            k = x @ wk
            v = x @ wv
            scores = q @ k.transpose(-1, -2)
            scaled = scores * factor
            blocked_rows_np = mask_np.all(axis=1) if mask_np.any() else np.zeros(session.n, dtype=bool)
            if mask_np.any():
                m = torch.as_tensor(mask_np, device=dev)
                weights = torch.softmax(scaled.masked_fill(m, float("-inf")), dim=-1)
                if blocked_rows_np.any():
                    # softmax over an all -inf row is NaN; such a query attends to nothing.
                    weights = weights.masked_fill(torch.as_tensor(blocked_rows_np, device=dev)[:, None], 0.0)
            else:
                weights = torch.softmax(scaled, dim=-1)
            head_out = weights @ v
            concat = head_out.transpose(0, 1).reshape(session.n, -1)
            if session.w_out is not None:
                output = concat @ torch.tensor(session.w_out, dtype=tdtype, device=dev)
            else:
                output = concat
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            elapsed = (time.perf_counter() - start) * 1000.0
            host = {
                "Q": _host(q, "Q" in wanted),
                "K": _host(k, "K" in wanted),
                "V": _host(v, "V" in wanted),
                "scores": _host(scores, "scores" in wanted),
                "scaled_scores": _host(scaled, "scaled_scores" in wanted),
                "weights": _host(weights, "weights" in wanted),
                "head_outputs": _host(head_out, "head_outputs" in wanted),
                "concat": _host(concat, "concat" in wanted),
                "output": _host(output, "output" in wanted),
            }
    except RuntimeError as err:  # e.g. CUDA out of memory, a dtype the kernel lacks
        raise EngineError(f"the engine failed on {device} ({dtype}): {str(err).splitlines()[0]}") from None
    mask_np.flags.writeable = False
    blocked_rows_np.flags.writeable = False
    return AttentionResult(
        tokens=session.tokens,
        scale_factor=factor,
        mask=mask_np,
        blocked_rows=blocked_rows_np,
        device=str(dev),
        dtype=dtype,
        compute_ms=elapsed,
        **host,
    )
