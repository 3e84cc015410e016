"""The notebook API's misuses are named in one AttnExplorerError, never a bare TypeError or
ValueError from deep inside (issue 27, item 11)."""

import pytest

import attnexplorer as ax


@pytest.mark.parametrize("path, message", [
    (None, "load_session: takes a file path (a str or a Path), got NoneType"),
    ({"format": "attnexplorer-session"}, "use session_from_dict(d)"),
    (b"a\x00b.json", "holds a NUL character"),
    (3.5, "got float"),
])
def test_load_session_names_what_it_was_given(path, message):
    with pytest.raises(ax.AttnExplorerError) as err:
        ax.load_session(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bytes_path_is_read_like_a_str(tmp_path):
    s = ax.build_preset("pronoun").session
    ax.save_session(s, tmp_path / "s.json")
    assert ax.load_session(bytes(tmp_path / "s.json")) == s


def test_an_unknown_engine_is_a_model_error():
    from attnexplorer.models import load_model
    from attnexplorer.models.sources import ModelError

    with pytest.raises(ModelError, match="engine must be 'auto' or 'transformers', not 'bogus'"):
        load_model("minilm", engine="bogus")
