"""Exports that say what they do (issue 27, item 12): above 2 GB only with --allow-large (the
window asks), progress on stderr while a large export writes, --cols without --figures refused
rather than ignored, and the staging folders a killed export left removed by the next export
into that folder, saying so."""

import io
import os
import time

import pytest

from attnexplorer import cli
from attnexplorer.io import export_choice
from attnexplorer.io.atomic import STAGING_PREFIX, atomic_directory, remove_stale_staging
from attnexplorer.io.export_progress import StagingProgress


def test_the_readme_example_needs_allow_large_and_names_its_size(capsys, tmp_path):
    out = tmp_path / "d"
    code = cli.main(["export", "--preset", "random", "--set", "n=16384", "--set", "d=64", "--set", "heads=4",
                     "--out", str(out), "--matrices", "csv"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    # refused for the disk when it is small, else for its size: never written silently
    assert ("add --allow-large" in err and "would write about" in err) or "the disk has" in err, err
    assert not out.exists()


def test_allow_large_writes_what_is_refused_without_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(export_choice, "LARGE_EXPORT_BYTES", 1000)
    out = tmp_path / "d"
    argv = ["export", "--preset", "pronoun", "--out", str(out), "--matrices", "npz"]
    assert cli.main(argv) == 2
    assert "add --allow-large" in capsys.readouterr().err and not out.exists()
    assert cli.main([*argv, "--allow-large"]) == 0
    assert (out / "attention.npz").is_file()
    assert "wrote 2 files" in capsys.readouterr().out


def test_cols_without_figures_is_refused_not_ignored(capsys, tmp_path):
    out = tmp_path / "d"
    assert cli.main(["export", "--preset", "pronoun", "--out", str(out), "--cols", "0:2"]) == 2
    err = capsys.readouterr().err
    assert "--cols" in err and "--figures" in err and not out.exists()


def test_a_stale_staging_folder_is_removed_by_the_next_export_which_says_so(capsys, tmp_path):
    out = tmp_path / "d"
    stale = out / f"{STAGING_PREFIX}0123456789ab"
    stale.mkdir(parents=True)
    (stale / ".lock").write_text("")     # its export was killed: nobody holds the lock
    (stale / "attention.npz").write_bytes(b"half")
    assert cli.main(["export", "--preset", "pronoun", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "removed 1 staging folder that an interrupted export left" in err
    assert not stale.exists() and not any(p.name.startswith(STAGING_PREFIX) for p in out.iterdir())


def test_a_live_export_s_staging_folder_is_left_alone(tmp_path):
    out = tmp_path / "d"
    with atomic_directory(out) as stage:
        (stage / "x.txt").write_text("x")
        assert remove_stale_staging(out, min_age_s=0) == [] and stage.is_dir()
    assert (out / "x.txt").read_text() == "x" and not (out / ".lock").exists()


def test_an_old_staging_folder_without_a_lock_is_stale(tmp_path):
    old = tmp_path / f"{STAGING_PREFIX}aaaaaaaaaaaa"
    old.mkdir()
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert remove_stale_staging(tmp_path) == [old] and not old.exists()


def test_a_large_export_draws_its_progress_on_stderr(tmp_path):
    stream = io.StringIO()
    with StagingProgress(tmp_path, 60 * 10**6, stream=stream, every_s=0.01) as progress:
        (tmp_path / "part.bin").write_bytes(b"\0" * 3_000_000)
        deadline = time.monotonic() + 30
        while "3 MB of about 60 MB" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert progress.shown and "writing the export: 3 MB of about 60 MB" in stream.getvalue()
    assert stream.getvalue().endswith("\n")


def test_a_small_export_draws_nothing(tmp_path):
    stream = io.StringIO()
    with StagingProgress(tmp_path, 1000, stream=stream, every_s=0.01):
        pass
    assert stream.getvalue() == ""
