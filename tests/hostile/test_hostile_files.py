"""Files, folders and the command line under hostile use (issue 11, items 10, 12, 14, 16)."""

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from attnexplorer.cli import main
from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.inputs.session import Session
from attnexplorer.io import atomic
from attnexplorer.io.matrices import read_matrix
from attnexplorer.io.session_file import load_session, save_session


def small():
    return Session(tokens=("a", "b"), embeddings=np.eye(2), w_query=np.ones((1, 2, 2)),
                   w_key=np.ones((1, 2, 2)), w_value=np.ones((1, 2, 2)))


def listing(folder):
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def one_error_line(capsys, rc):
    out = capsys.readouterr()
    assert rc == 2
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnexplorer: "), out.err
    return lines[0]


# -- item 10: a failed export leaves --out as it was -----------------------------------------

def test_export_that_fails_half_way_through_the_moves_leaves_out_unchanged(tmp_path, monkeypatch, capsys):
    save_session(small(), tmp_path / "s.json")
    out = tmp_path / "out"
    assert main(["export", "--session", str(tmp_path / "s.json"), "--out", str(out), "--matrices", "npz,json,csv"]) == 0
    (out / "mine.txt").write_text("keep")
    before = listing(out)
    capsys.readouterr()
    real = os.replace
    calls = []

    def flaky(src, dst):
        # Fail the fourth move into --out itself (staged writes and backups go elsewhere),
        # after attention.json, attention.npz and a csv file are in place.
        if ".attnexplorer-staging-" not in str(dst):
            calls.append(dst)
            if len(calls) == 4:
                raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    rc = main(["export", "--session", str(tmp_path / "s.json"), "--out", str(out), "--matrices", "npz,json,csv",
               "--mask", "causal"])
    line = one_error_line(capsys, rc)
    assert "Permission denied" in line
    assert len(calls) > 4  # the rollback put the old files back
    assert listing(out) == before


def test_export_into_new_folders_that_fails_removes_them(tmp_path, monkeypatch, capsys):
    save_session(small(), tmp_path / "s.json")
    out = tmp_path / "new" / "out"
    real = os.replace
    calls = []

    def flaky(src, dst):
        if ".attnexplorer-staging-" not in str(dst):
            calls.append(dst)
            if len(calls) == 4:
                raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    rc = main(["export", "--session", str(tmp_path / "s.json"), "--out", str(out), "--matrices", "csv,npy"])
    assert "No space left" in one_error_line(capsys, rc)
    assert not (tmp_path / "new").exists()


# -- item 12: special files are refused, never read ------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipe_session_is_refused_not_read(tmp_path, capsys):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(AttnExplorerError, match="not a regular file \\(a named pipe\\)"):
        load_session(fifo)
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(AttnExplorerError, match="not a regular file"):
        read_matrix(tmp_path / "pipe.csv")
    rc = main(["export", "--session", str(fifo), "--out", str(tmp_path / "o")])
    assert "named pipe" in one_error_line(capsys, rc)
    with pytest.raises(AttnExplorerError, match="a folder"):
        load_session(tmp_path)


# -- item 14: symlinks are written through, read-only files refused ---------------------------

def test_saving_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real" / "s.json"
    real.parent.mkdir()
    save_session(small(), real)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    changed = small().replace(tokens=("x", "y"))
    save_session(changed, link)
    assert link.is_symlink()
    assert load_session(real).tokens == ("x", "y")
    assert not [p for p in real.parent.iterdir() if p.name != "s.json"]  # no temporary left


def test_saving_over_a_read_only_file_is_refused(tmp_path):
    path = tmp_path / "s.json"
    save_session(small(), path)
    before = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(AttnExplorerError, match="read-only"):
        save_session(small().replace(tokens=("x", "y")), path)
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444


# -- item 16: usage errors are one line --------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["export"], ["export", "--preset", "sine"], ["export", "--out", "x"], ["export", "--bogus"],
    ["export", "--preset", "sine", "--session", "s.json", "--out", "x"], ["--bogus"], ["a", "b"],
    ["presets", "extra"], ["bench", "--nope"],
])
def test_usage_errors_are_one_line_exit_2(argv, capsys):
    line = one_error_line(capsys, main(argv))
    assert "--help" in line


def test_empty_session_name_is_named(tmp_path, capsys):
    rc = main(["export", "--session", "", "--out", str(tmp_path / "o")])
    assert one_error_line(capsys, rc) == "attnexplorer: --session: the file name is empty"


def test_usage_error_in_a_real_process_is_one_line():
    p = subprocess.run([sys.executable, "-m", "attnexplorer", "export", "--preset"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "expected one argument" in p.stderr


def test_nul_in_out_is_one_line(tmp_path, capsys):
    rc = main(["export", "--preset", "pronoun", "--out", str(tmp_path / "a\x00b")])
    assert "NUL" in one_error_line(capsys, rc)
