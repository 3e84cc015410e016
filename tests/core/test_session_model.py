"""Session validation (messages name the field), Mask matrices, Scale factors, equality."""

import math

import numpy as np
import pytest

from attnexplorer.core.errors import AttnExplorerError, SessionError
from attnexplorer.core.inputs.session import MAX_DIM, MAX_HEADS, MAX_TOKENS, Mask, PresetRef, Scale, Session


def parts(n=3, d=2, heads=1, d_k=2, d_v=2):
    rng = np.random.default_rng(1)
    return dict(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        w_query=rng.normal(size=(heads, d, d_k)),
        w_key=rng.normal(size=(heads, d, d_k)),
        w_value=rng.normal(size=(heads, d, d_v)),
    )


def refused(match, where=None, **changes):
    kw = parts()
    kw.update(changes)
    with pytest.raises(SessionError, match=match) as info:
        Session(**kw)
    if where is not None:
        assert info.value.where == where
        assert str(info.value).startswith(f"{where}: ")
    return info.value


# -- shapes, numbers, bounds ---------------------------------------------------------------
def test_valid_session_sizes_and_frozen_arrays():
    s = Session(**parts(n=4, d=3, heads=2, d_k=5, d_v=6))
    assert (s.n, s.d, s.heads, s.d_k, s.d_v) == (4, 3, 2, 5, 6)
    for a in (s.embeddings, s.w_query, s.w_key, s.w_value):
        assert a.dtype == np.float64 and not a.flags.writeable


def test_session_copies_the_callers_arrays():
    kw = parts()
    x = kw["embeddings"]
    s = Session(**kw)
    x[0, 0] = 99.0
    assert s.embeddings[0, 0] != 99.0


@pytest.mark.parametrize("field,value,where,match", [
    ("embeddings", np.zeros((4, 2)), "embeddings", "has 4 rows, expected 3 \\(one per token\\)"),
    ("embeddings", np.zeros(3), "embeddings", "must be 2-dimensional"),
    ("embeddings", np.zeros((3, 0)), "embeddings", "width 0 is outside 1..1024"),
    ("w_query", np.zeros((1, 3, 2)), "W_q", "has 3 rows, expected 2 \\(the embedding width\\)"),
    ("w_key", np.zeros((1, 2, 3)), "W_k", "has 3 columns, expected 2 \\(W_q and W_k share d_k\\)"),
    ("w_value", np.zeros((2, 2, 2)), "W_v", "has 2 heads, expected 1"),
    ("w_value", np.zeros((2, 2)), "W_v", "must be 3-dimensional"),
    ("w_out", np.zeros((3, 2)), "W_o", "has 3 rows, expected 2 \\(heads × d_v\\)"),
    ("w_out", np.zeros((2, MAX_DIM + 1)), "W_o", "outside 1..1024"),
])
def test_wrong_shapes_name_the_field(field, value, where, match):
    refused(match, where, **{field: value})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_numbers_name_field_and_position(bad):
    x = parts()["embeddings"].copy()
    x[2, 1] = bad
    refused(r"non-finite number at \[2, 1\]", "embeddings", embeddings=x)
    w = parts()["w_value"].copy()
    w[0, 1, 0] = bad
    refused(r"non-finite number at \[0, 1, 0\]", "W_v", w_value=w)


@pytest.mark.parametrize("value", [[["1.5", "2"], ["3", "4"], ["5", "6"]], [[True, False]] * 3, [[1, 2], [3], [4, 5]], [[None, 1]] * 3])
def test_numbers_only(value):
    refused("numbers|equal length", "embeddings", embeddings=value)


def test_token_problems():
    refused("at least one token", "tokens", tokens=(), embeddings=np.zeros((0, 2)))
    refused("must be a string", "tokens[1]", tokens=("a", 5, "c"))
    refused("longer than 200", "tokens[0]", tokens=("x" * 201, "b", "c"))
    refused("not one string", "tokens", tokens="abc")
    refused("list of strings", "tokens", tokens=3)


def test_bounds():
    refused(f"more than the limit of {MAX_TOKENS}", "tokens",
            tokens=tuple("t" for _ in range(MAX_TOKENS + 1)), embeddings=np.zeros((MAX_TOKENS + 1, 2)))
    refused(f"{MAX_HEADS + 1} heads is outside 1..{MAX_HEADS}", "heads", w_query=np.zeros((MAX_HEADS + 1, 2, 2)))
    refused("0 heads", "heads", w_query=np.zeros((0, 2, 2)))
    refused("width 1025 is outside", "W_v", w_value=np.zeros((1, 2, MAX_DIM + 1)))


def test_mask_must_fit_n():
    refused(r"padding position 3 is outside 0..2", "mask.padding", mask=Mask("padding", padding=(0, 3)))
    refused(r"blocked is 2×2, expected 3×3", "mask.blocked", mask=Mask("custom", blocked=np.zeros((2, 2))))


def test_other_fields_checked():
    refused("must be a Mask", "mask", mask="causal")
    refused("must be a Scale", "scale", scale=1.0)
    refused("PresetRef", "preset", preset="dessert")
    refused("must be a mapping", "extra", extra=[1, 2])


def test_errors_are_user_facing_value_errors():
    err = refused("has 4 rows", embeddings=np.zeros((4, 2)))
    assert isinstance(err, AttnExplorerError) and isinstance(err, ValueError)


def test_replace_validates_and_keeps_the_original():
    s = Session(**parts())
    with pytest.raises(SessionError, match="W_q: has 3 rows"):
        s.replace(w_query=np.zeros((1, 3, 2)))
    t = s.replace(tokens=("a", "b", "c"))
    assert t.tokens == ("a", "b", "c") and s.tokens == ("t0", "t1", "t2")


def test_replace_shares_the_arrays_it_does_not_change():
    """An edit copies only what it changes: the engine's device copies key on array identity."""
    s = Session(**parts(n=3, d=2))
    w_query = np.ones((1, 2, 2))
    t = s.replace(w_query=w_query)
    assert t.embeddings is s.embeddings and t.w_key is s.w_key and t.w_value is s.w_value
    assert t.w_query is not w_query and not t.w_query.flags.writeable  # the caller's stays theirs
    # a frozen array still has to fit where it is put
    with pytest.raises(SessionError, match="W_q: must be 3-dimensional"):
        s.replace(w_query=s.embeddings)
    with pytest.raises(SessionError, match="embeddings: has 2 rows, expected 3"):
        s.replace(embeddings=s.w_key[0])


# -- masks --------------------------------------------------------------------------------
def test_mask_matrices():
    n = 4
    np.testing.assert_array_equal(Mask().matrix(n), np.zeros((4, 4), bool))
    causal = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], bool)
    np.testing.assert_array_equal(Mask("causal").matrix(n), causal)
    window2 = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1], [1, 1, 0, 0]], bool)
    np.testing.assert_array_equal(Mask("window", window=2).matrix(n), window2)
    np.testing.assert_array_equal(Mask("window", window=1).matrix(n), ~np.eye(4, dtype=bool))
    np.testing.assert_array_equal(Mask("window", window=4).matrix(n), causal)
    np.testing.assert_array_equal(Mask("window", window=99).matrix(n), causal)
    padding = np.array([[0, 1, 0, 1]] * 4, bool)
    np.testing.assert_array_equal(Mask("padding", padding=(3, 1, 1)).matrix(n), padding)
    custom = np.array([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]])
    np.testing.assert_array_equal(Mask("custom", blocked=custom).matrix(n), custom.astype(bool))


@pytest.mark.parametrize("n,w", [(1, 1), (5, 2), (7, 3), (6, 6)])
def test_window_sees_itself_and_w_minus_1_before(n, w):
    m = Mask("window", window=w).matrix(n)
    for i in range(n):
        assert set(np.flatnonzero(~m[i])) == set(range(max(0, i - w + 1), i + 1))


def test_mask_matrix_is_a_fresh_writable_copy():
    m = Mask("custom", blocked=np.eye(2))
    a = m.matrix(2)
    a[0, 1] = True
    assert not m.matrix(2)[0, 1]
    assert not m.blocked.flags.writeable


@pytest.mark.parametrize("kwargs,where,match", [
    (dict(kind="diagonal"), "mask", "unknown mask kind 'diagonal'"),
    (dict(kind="window", window=0), "mask.window", "whole number in 1..16384, got 0"),
    (dict(kind="window", window=2.5), "mask.window", "got 2.5"),
    (dict(kind="window", window=True), "mask.window", "got True"),
    (dict(kind="padding", padding=(1.5,)), "mask.padding", "whole numbers, got 1.5"),
    (dict(kind="padding", padding=("a",)), "mask.padding", "whole numbers"),
    (dict(kind="padding", padding=3), "mask.padding", "list of key positions"),
    (dict(kind="custom"), "mask.blocked", "needs a 'blocked' matrix"),
    (dict(kind="custom", blocked=[[0, 2], [0, 0]]), "mask.blocked", "only 0/1"),
    (dict(kind="custom", blocked=[["x", "y"], ["z", "w"]]), "mask.blocked", "only 0/1"),
    # Rectangular is allowed (cross-attention); the session checks it against its sizes.
    (dict(kind="custom", blocked=[0, 1, 0]), "mask.blocked", "must be a matrix, got shape \\(3,\\)"),
])
def test_bad_masks(kwargs, where, match):
    with pytest.raises(SessionError, match=match) as info:
        Mask(**kwargs)
    assert info.value.where == where


def test_mask_matrix_checks_n():
    with pytest.raises(SessionError, match="padding position 4 is outside 0..3"):
        Mask("padding", padding=(4,)).matrix(4)
    with pytest.raises(SessionError, match="expected 3×3"):
        Mask("custom", blocked=np.eye(2)).matrix(3)


def test_mask_equality():
    assert Mask() == Mask("none", window=5)
    assert Mask("window", window=2) == Mask("window", window=np.int64(2))
    assert Mask("window", window=2) != Mask("window", window=3)
    assert Mask("padding", padding=(2, 1)) == Mask("padding", padding=[1, 2, 2])
    assert Mask("custom", blocked=np.eye(2)) == Mask("custom", blocked=[[1, 0], [0, 1]])
    assert Mask("custom", blocked=np.eye(2)) != Mask("custom", blocked=np.eye(3))
    assert Mask("causal") != Mask()


# -- scales -------------------------------------------------------------------------------
def test_scale_factors_and_descriptions():
    assert Scale().factor(3) == pytest.approx(1 / math.sqrt(3))
    assert Scale("none").factor(3) == 1.0
    assert Scale("temperature", 0.5).factor(3) == 2.0
    assert Scale().describe(3) == "÷√3"
    assert Scale("temperature", 0.5).describe(3) == "÷τ (τ = 0.5)"


@pytest.mark.parametrize("t", [0, -1.0, math.inf, math.nan, "2", True, 5e-324])
def test_bad_temperatures(t):
    with pytest.raises(SessionError) as info:
        Scale("temperature", t)
    assert info.value.where == "scale.temperature"


def test_scale_equality_ignores_an_unused_temperature():
    assert Scale("none", 3.0) == Scale("none")
    assert Scale("temperature", 2.0) != Scale("temperature", 3.0)
    assert Scale() != Scale("none")
    assert hash(Scale("none", 3.0)) == hash(Scale("none"))
    with pytest.raises(SessionError, match="unknown scale"):
        Scale("sqrt")


# -- whole-session equality ---------------------------------------------------------------
def test_session_equality():
    a, b = Session(**parts()), Session(**parts())
    assert a == b
    assert a != a.replace(scale=Scale("none"))
    assert a != a.replace(mask=Mask("causal"))
    assert a != a.replace(w_out=np.eye(2))
    assert a != a.replace(preset=PresetRef("random", {"n": 3}))
    assert a == a.replace(extra={"view": 1})  # view state is not part of the maths
    x = a.embeddings.copy()
    x[0, 0] += 1e-9
    assert a != a.replace(embeddings=x)



def test_an_edit_keeps_its_checked_tokens_without_checking_them_again(monkeypatch):
    # An edit of a long session (16,384 tokens) checked every token again in Python, 2.5 ms
    # of the GUI thread on every cell edit: the very tuple a session checked passes as it is.
    from attnexplorer.core.inputs import session as session_module

    kw = parts(n=300)
    session = Session(**kw)
    searched = []
    real = session_module._CONTROL

    class Spy:
        def search(self, text):
            searched.append(len(text))
            return real.search(text)

    monkeypatch.setattr(session_module, "_CONTROL", Spy())
    edited = session.replace(embeddings=kw["embeddings"] * 2.0)
    assert edited.tokens is session.tokens and searched == []
    # A new sequence is checked in full, however like a checked one it is.
    bad = list(session.tokens)
    bad[7] = "a\tb"
    with pytest.raises(SessionError, match="control character") as info:
        session.replace(tokens=tuple(bad))
    assert info.value.where == "tokens[7]" and searched
