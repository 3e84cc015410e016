"""One line that names the real cause (issue 27, item 10): a typo of a command, a layer that is
not a number, and sessions whose settings would make NaN, each refused in one line, exit 2."""

import json

import pytest

from attnexplorer import cli


def _one_line(capsys, argv, *fragments):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err and "Traceback" not in err, err
    assert "usage:" not in err and not captured.out
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_a_mistyped_command_is_named_with_the_command_meant(capsys, tmp_path):
    _one_line(capsys, ["exprt", "--preset", "pronoun", "--out", str(tmp_path / "d")],
              "'exprt' is not a command", "did you mean `attnexplorer export`")
    assert not (tmp_path / "d").exists()
    _one_line(capsys, ["florp"], "'florp' is not a command", "export, fit")


def test_a_layer_that_is_not_a_number_is_one_line(capsys, tmp_path):
    _one_line(capsys, ["import-model", "minilm", "--text", "hi", "--layer", "abc", "--out", str(tmp_path / "s.json")],
              "--layer: 'abc' is not a layer", "import-model --help")


def _session(tmp_path, **stage):
    data = {"format": "attnexplorer-session", "version": 2, "tokens": ["a", "b", "c"],
            "embeddings": [[1.0, 0.0], [0.5, 2.0], [0.0, 1.0]],
            "heads": [{"W_q": [[1, 0], [0, 1]], "W_k": [[1, 0], [0, 1]], "W_v": [[1, 0], [0, 1]]}], **stage}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("stage, where", [
    ({"positions": {"kind": "sinusoidal", "base": 5e-324}}, "positions.base"),
    ({"positions": {"kind": "rope", "theta": 5e-324}}, "positions.theta"),
    ({"norm": {"kind": "rms", "weight": [1, 1], "eps": 1e-50}}, "norm.eps"),
])
@pytest.mark.parametrize("command", ["export", "fit"])
def test_a_session_that_would_make_nan_is_one_line_in_every_command(capsys, tmp_path, stage, where, command):
    path = _session(tmp_path, **stage)
    out = tmp_path / ("fitted.json" if command == "fit" else "out")
    extra = ["--target", "uniform"] if command == "fit" else []
    _one_line(capsys, [command, "--session", str(path), *extra, "--out", str(out)], where, "must be")
    assert not out.exists()
