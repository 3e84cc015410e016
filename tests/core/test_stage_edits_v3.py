"""The Qt-free edits behind the version-3 stage inputs: QK-norm's kind, reach and shared or
per-head weights, soft-capping, sinks and RoPE scaling; each a validated session or a
SessionError naming the field."""

import numpy as np
import pytest

from attnexplorer.core.editing import stage_edits as se
from attnexplorer.core.editing import stage_tables
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Session
from attnexplorer.core.inputs.stages import Positions, QKNorm, RopeScaling


def plain(heads=2, kv=1, d_k=3):
    rng = np.random.default_rng(0)
    return Session(tokens=("a", "b", "c"), embeddings=rng.normal(size=(3, 4)), w_query=rng.normal(size=(heads, 4, d_k)),
                   w_key=rng.normal(size=(kv, 4, d_k)), w_value=rng.normal(size=(kv, 4, 2)))


def test_qk_norm_kinds_keep_what_fits():
    s = plain()
    s = se.set_qk_norm(s, se.qk_norm_of_kind(s, "layer"))
    assert s.qk_norm == QKNorm("layer", eps=1e-5)
    s = stage_tables.set_cell(s, "qk_norm.query_bias", 0, 2, 0.5)
    s = stage_tables.set_cell(s, "qk_norm.key_weight", 0, 0, 3.0)
    rms = se.qk_norm_of_kind(s, "rms")
    assert rms.kind == "rms" and rms.eps == 1e-6 and rms.query_bias is None and rms.key_weight.tolist() == [3, 1, 1]
    assert se.qk_norm_of_kind(s, "none") is None
    with pytest.raises(SessionError, match="qk_norm.kind"):
        se.qk_norm_of_kind(s, "batch")


def test_over_the_whole_projection_and_a_weight_per_head():
    s = plain()
    s = se.set_qk_norm(s, QKNorm("rms", query_weight=np.array([1.0, 2.0, 3.0])))
    per_head = s.replace(qk_norm=se.per_head_qk_weights(s, True))
    assert per_head.qk_norm.query_weight.tolist() == [1, 2, 3, 1, 2, 3]      # each head from the shared one
    assert per_head.qk_norm.key_weight.tolist() == [1, 1, 1]                  # one K/V head
    assert stage_tables.table_matrix(per_head, "qk_norm.query_weight").shape == (1, 6)
    shared = per_head.replace(qk_norm=se.per_head_qk_weights(per_head, False))
    assert shared.qk_norm.query_weight.tolist() == [1, 2, 3]
    whole = s.replace(qk_norm=se.qk_norm_over(s, "all"))
    assert whole.qk_norm.over == "all" and whole.qk_norm.query_weight is None   # a d_k weight does not fit
    assert stage_tables.table_matrix(whole, "qk_norm.query_weight").shape == (1, 6)
    kept = per_head.replace(qk_norm=se.qk_norm_over(per_head, "all"))
    assert kept.qk_norm.query_weight.tolist() == [1, 2, 3, 1, 2, 3]         # heads·d_k fits the whole projection
    with pytest.raises(SessionError, match="only a QK-norm over each head"):
        se.per_head_qk_weights(whole, True)
    with pytest.raises(SessionError, match="there is no QK-norm"):
        se.qk_norm_over(plain(), "all")


def test_softcap_and_sinks():
    s = plain()
    assert se.set_softcap(s, 30.0).softcap == 30.0 and se.set_softcap(s, None).softcap is None
    with pytest.raises(SessionError, match="softcap"):
        se.set_softcap(s, -1.0)
    on = se.set_sinks(s, True)
    assert on.sinks.tolist() == [0.0, 0.0] and se.set_sinks(on, True) is on and se.set_sinks(on, False).sinks is None
    with pytest.raises(SessionError, match="there are no sinks"):
        stage_tables.table_matrix(s, "sinks")


def test_rope_scaling_kinds():
    rope = Positions("rope")
    llama = se.scaling_of_kind(rope, "llama3")
    assert llama.scaling == RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8192)
    yarn = se.scaling_of_kind(llama, "yarn")
    assert yarn.scaling.kind == "yarn" and yarn.scaling.factor == 8.0   # the factor carries over
    assert se.scaling_of_kind(yarn, "none").scaling is None
    assert se.describe_positions(rope, llama) == "RoPE scaling: " + llama.scaling.describe()
    assert se.describe_positions(rope, Positions("rope", angles="float32")) == "RoPE angles = float32"
    with pytest.raises(SessionError, match="only RoPE"):
        se.scaling_of_kind(Positions("alibi"), "linear")
    with pytest.raises(SessionError, match="positions.scaling.kind"):
        se.scaling_of_kind(rope, "ntk")
