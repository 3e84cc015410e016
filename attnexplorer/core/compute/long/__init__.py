"""Attention for long inputs, streamed: exact wherever one looks, never n × n per head.

The dense engine (``core.compute.engine.compute``) holds every n × n matrix of every head; at 16,384
tokens × 4 heads that is over 4 GB per matrix in float32. This package computes the same
numbers a block of query rows at a time:

- ``stream(session)`` makes X, Q, K and V with the dense engine's own code
  (``attention.queries_keys_values``), then, a block of query rows at a time, the row softmax
  normalisers of every head (each query's largest scaled score and Σ exp(score − largest)),
  the head outputs (Σ weight·value) and, when asked, a pooled overview of the weights and
  scores at a given resolution (``pooling``). Memory: O(block × n) per head, not O(n × n).
- The ``StreamedResult`` it returns then gives any rectangle of the scores or weights of a
  head exactly (``tile``), a query's whole row (``row``), and another overview (``overview``)
  from Q, K and the normalisers alone; with ALiBi, the slopes (``alibi_slopes``) and any
  rectangle of the bias (``tile(..., "position_bias")``).
- The mask is never made whole: each block's part comes from its definition (``Mask.block``),
  and a long ``AttentionResult`` carries a ``core.compute.blocked_cells.MaskMatrix``.

Where both fit, the numbers equal the dense engine's (float32 to 1e-6, float64 to 1e-12;
tests/core/test_long_stream.py checks it on hypothesis-drawn sessions with every stage).
"""

from .pooling import POOLS, Pooled, pool_grid
from ...errors import Cancelled
from .streamed import StreamedResult, stream

__all__ = ["POOLS", "Cancelled", "Pooled", "StreamedResult", "pool_grid", "stream"]
