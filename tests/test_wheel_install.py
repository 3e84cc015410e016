"""The wheel carries every package and every shipped resource, and a non-editable install of
it works when run from another folder (so the checkout is not what gets imported).

The wheel is built from a copy of the checkout (its tracked and not-ignored files, as
``pip install .`` would see them), so the test never writes build output into the tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _source_files() -> list[Path]:
    """The files ``pip install .`` would package from: git's tracked and not-ignored ones."""
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
        return [Path(p) for p in out.split("\0") if p and (ROOT / p).is_file()]
    skip = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis"}
    return [p.relative_to(ROOT) for p in ROOT.rglob("*")
            if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for rel in _source_files():
        if rel.parts[0].endswith(".egg-info"):
            continue  # stale build metadata must not decide what the wheel holds
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-cache-dir", "-q", str(src), "-w", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("attnexplorer-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "-q",
                           "--target", str(target), str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def _run_installed(target: Path, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(target), QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_wheel_holds_every_package_and_resource(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = [p.parent for p in (ROOT / "attnexplorer").rglob("__init__.py") if "__pycache__" not in p.parts]
    for package in packages:
        rel = package.relative_to(ROOT).as_posix()
        assert f"{rel}/__init__.py" in names, f"package {rel} is missing from the wheel (pyproject's packages list)"
    resources = [p for p in (ROOT / "resources").rglob("*") if p.is_file() and "__pycache__" not in p.parts
                 and p.suffix != ".pyc"]
    assert any(p.name == "attnexplorer.svg" for p in resources)
    for path in resources:
        rel = path.relative_to(ROOT / "resources").as_posix()
        assert f"attnexplorer/resources/{rel}" in names, f"resources/{rel} is missing from the wheel"
    entry_points = zipfile.ZipFile(wheel).read("attnexplorer-0.1.0.dist-info/entry_points.txt").decode()
    assert "attnexplorer = attnexplorer.cli:run" in entry_points


def test_installed_wheel_finds_its_own_resources(installed, tmp_path):
    code = ("import attnexplorer, attnexplorer.paths as p; "
            "print(attnexplorer.__file__); print(p.resources_dir()); print(p.app_icon_path(48)); "
            "print(p.resource_path(p.APP_ID + '.metainfo.xml'))")
    proc = _run_installed(installed, tmp_path, "-c", code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    for line in lines[:4]:
        path = Path(line)
        assert path.is_relative_to(installed), f"{line} is not inside the installed copy"
        assert path.exists()
    assert Path(lines[1]) == installed / "attnexplorer" / "resources"


def test_installed_wheel_lists_presets(installed, tmp_path):
    proc = _run_installed(installed, tmp_path, "-m", "attnexplorer", "presets")
    assert proc.returncode == 0, proc.stderr
    for name in ("pronoun", "dessert", "sine", "random"):
        assert any(line.startswith(f"{name}: ") for line in proc.stdout.splitlines()), proc.stdout


@pytest.mark.slow
def test_installed_wheel_passes_the_self_test(installed, tmp_path):
    proc = _run_installed(installed, tmp_path, "-m", "attnexplorer", "--self-test", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"installed at {installed / 'attnexplorer'}" in proc.stdout.splitlines()[0]
    assert proc.stdout.splitlines()[-1].startswith("self-test passed: ")


@pytest.mark.slow  # about 10 s: a fresh interpreter with torch, and the three rows
def test_installed_wheel_runs_the_cheapest_bench_rows(installed, tmp_path):
    # The bench's one quick real run (tests/test_bench.py has the rest): the command's entry in
    # an install, the row table, the JSON and its text report, with no window.
    from attnexplorer.bench.report import format_report
    from test_bench import ENGINE_FIELDS, FIT_STEPS_FIELDS, STAGES_FIELDS

    proc = _run_installed(installed, tmp_path, "-m", "attnexplorer", "bench", "--quick", "--only",
                          "engine,stages,fit_steps", "--device", "cpu", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert set(data) == {"machine", "targets", "date", "load_before", "load_after", "engine", "stages", "fit_steps",
                         "seconds", "row_seconds"}
    assert set(data["row_seconds"]) == {"engine", "stages", "fit_steps"}
    assert all(seconds >= 0 for seconds in data["row_seconds"].values())
    assert {"python", "cpu", "cores", "torch", "devices"} <= set(data["machine"])
    assert [row["n"] for row in data["engine"]] == [16, 256] and {row["device"] for row in data["engine"]} == {"cpu"}
    assert all(ENGINE_FIELDS <= set(row) and row["engine_ms"] > 0 and row["bare_ms"] > 0 for row in data["engine"])
    assert {row["positions"] for row in data["stages"]} == {"rope", "alibi", "rope+new"}
    assert all(STAGES_FIELDS <= set(row) and row["engine_ms"] > 0 for row in data["stages"])
    assert FIT_STEPS_FIELDS <= set(data["fit_steps"]) and data["fit_steps"]["steps_per_s"] > 0
    # The text report of those figures: their sections, and none of the rows not measured.
    report = format_report(data)
    assert "Engine vs bare torch" in report and "8 query heads sharing 2 K/V heads" in report
    assert "Fit a head (Adam, previous token, causal), CPU, no window: n = 16" in report
    for absent in ("Edit → every", "Dragging", "Heatmap", "Large session", "Start-up", "Fit in the window"):
        assert absent not in report
