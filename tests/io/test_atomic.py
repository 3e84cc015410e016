"""Atomic writes: the old file survives every failure; exports land whole or not at all."""

import os
import stat

import pytest

import attnexplorer.io.atomic as atomic
from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.io.atomic import WriteError, atomic_directory, atomic_write_bytes, atomic_write_text


def listing(folder):
    """Every file under ``folder`` with its bytes (folders as None)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def test_writes_and_replaces(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "first ü\n")
    assert p.read_text(encoding="utf-8") == "first ü\n"
    atomic_write_bytes(p, b"second")
    assert p.read_bytes() == b"second"
    assert [x.name for x in tmp_path.iterdir()] == ["a.txt"]  # no temporary left behind


def test_new_file_gets_umask_permissions_and_existing_keeps_its_own(tmp_path):
    p = tmp_path / "new.txt"
    old_umask = os.umask(0o022)
    try:
        atomic_write_text(p, "x")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    os.chmod(p, 0o600)
    atomic_write_text(p, "y")
    assert stat.S_IMODE(p.stat().st_mode) == 0o600


@pytest.mark.parametrize("broken", ["replace", "fsync", "write"])
def test_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch, broken):
    p = tmp_path / "s.json"
    p.write_text("old contents")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if broken == "write":
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                self.f.write(data[: len(data) // 2])  # half the data, then the disk fills
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    else:
        monkeypatch.setattr(atomic.os, broken, fail)
    with pytest.raises(WriteError) as info:
        atomic_write_text(p, "new contents that must not appear")
    assert str(info.value) == f"cannot write {p}: No space left on device"
    assert isinstance(info.value, AttnExplorerError)
    assert p.read_text() == "old contents"
    assert [x.name for x in tmp_path.iterdir()] == ["s.json"]


def test_plain_messages_for_missing_folder_and_folder_target(tmp_path):
    with pytest.raises(WriteError) as info:
        atomic_write_text(tmp_path / "missing" / "x.json", "{}")
    assert str(info.value) == f"cannot write {tmp_path / 'missing' / 'x.json'}: No such file or directory"
    (tmp_path / "d").mkdir()
    with pytest.raises(WriteError, match=r"cannot write .*/d: Is a directory"):
        atomic_write_text(tmp_path / "d", "{}")
    assert (tmp_path / "d").is_dir() and [x.name for x in tmp_path.iterdir()] == ["d"]


def test_interrupt_also_cleans_up(tmp_path, monkeypatch):
    p = tmp_path / "s.json"
    p.write_text("old")
    monkeypatch.setattr(atomic.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(p, "new")
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["s.json"]


# -- atomic_directory ---------------------------------------------------------------------

def test_directory_commit_merges_into_existing_out(tmp_path):
    out = tmp_path / "out"
    (out / "csv").mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    (out / "csv" / "old.csv").write_text("old")
    (out / "attention.json").write_text("stale")
    with atomic_directory(out) as stage:
        assert stage.parent == out.resolve() and stage.name.startswith(".")
        (stage / "attention.json").write_text("fresh")
        (stage / "csv").mkdir()
        (stage / "csv" / "X.csv").write_text("1,2")
    assert listing(out) == {"attention.json": b"fresh", "csv": None, "csv/X.csv": b"1,2", "csv/old.csv": b"old",
                            "keep.txt": b"mine"}


def test_directory_failure_changes_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "attention.json").write_text("previous run")
    before = listing(out)
    with pytest.raises(RuntimeError):
        with atomic_directory(out) as stage:
            (stage / "attention.json").write_text("half")
            (stage / "npy").mkdir()
            raise RuntimeError("the third file failed")
    assert listing(out) == before


def test_directory_failure_removes_folders_it_created(tmp_path):
    out = tmp_path / "new" / "deeper"
    with pytest.raises(AttnExplorerError):
        with atomic_directory(out) as stage:
            (stage / "a.npz").write_bytes(b"x")
            raise AttnExplorerError("bad input")
    assert list(tmp_path.iterdir()) == []


def test_directory_creates_missing_out(tmp_path):
    out = tmp_path / "a" / "b"
    with atomic_directory(out) as stage:
        (stage / "f.txt").write_text("x")
    assert listing(out) == {"f.txt": b"x"}


def test_directory_refuses_file_in_the_way_before_moving_anything(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "csv").write_text("a file named csv")
    before = listing(out)
    with pytest.raises(WriteError, match=r"cannot write .*csv: a file is in the way of a folder"):
        with atomic_directory(out) as stage:
            (stage / "attention.json").write_text("x")
            (stage / "csv").mkdir()
            (stage / "csv" / "X.csv").write_text("1")
    assert listing(out) == before


def test_directory_out_is_a_file_or_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(WriteError, match=r"is a file, not a folder"):
        with atomic_directory(f / "sub"):
            pass
    with pytest.raises(WriteError, match=r"is a file, not a folder"):
        with atomic_directory(f):
            pass
    assert f.read_text() == "x"


def test_directory_move_failure_is_a_write_error(tmp_path, monkeypatch):
    out = tmp_path / "out"

    def fail(*a):
        raise OSError(13, "Permission denied")

    with pytest.raises(WriteError, match=r"cannot write to .*out: Permission denied"):
        with atomic_directory(out) as stage:
            (stage / "x").write_text("1")
            monkeypatch.setattr(atomic.os, "replace", fail)
    assert not out.exists()
