"""The wheel: it carries the data directories where `catalog.data_dir` looks for them, and the
`planner` console script.

Builds the wheel once per session with `python -m build --wheel --no-isolation` (build and
hatchling are test dependencies), then reads it with zipfile.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from paths import REPO

import planner

DATA_DIRS = ("hardware_catalog", "model_zoo")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(REPO)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def repo_files(directory: str) -> list[Path]:
    root = REPO / directory
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_wheel_name_has_version(wheel: Path) -> None:
    assert wheel.name.startswith(f"planner-{planner.__version__}-")
    assert wheel.name.endswith("-py3-none-any.whl")


@pytest.mark.parametrize("directory", DATA_DIRS)
def test_every_data_file_is_in_the_wheel(directory: str, wheel: Path, names: set[str]) -> None:
    files = repo_files(directory)
    assert files, f"{directory}/ is empty in the repo"
    with zipfile.ZipFile(wheel) as zf:
        for path in files:
            rel = path.relative_to(REPO).as_posix()
            arc = f"planner/{rel}"
            assert arc in names, f"{rel} missing from the wheel (expected at {arc})"
            assert zf.read(arc) == path.read_bytes(), f"{arc} differs from {rel}"


def test_catalog_data_dir_layout(names: set[str]) -> None:
    # catalog.data_dir looks in planner/<name> first: these exact paths must exist
    assert "planner/hardware_catalog/gpus/h100-sxm-80gb.toml" in names
    assert "planner/model_zoo/llama3.1-405b.toml" in names
    # and the data is not also dumped at the top level of site-packages
    assert not any(n.startswith(("hardware_catalog/", "model_zoo/")) for n in names)


def test_every_module_is_in_the_wheel(names: set[str]) -> None:
    # every module, and the data files read next to them (megatron_flags.txt: Megatron's flags)
    for path in sorted((REPO / "planner").rglob("*")):
        if path.suffix not in (".py", ".txt"):
            continue
        arc = path.relative_to(REPO).as_posix()
        assert arc in names, arc
    assert not any(n.startswith("tests/") for n in names)


def test_console_script_entry_point(wheel: Path, names: set[str]) -> None:
    ep = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(ep).decode()
    parser = configparser.ConfigParser()
    parser.read_string(text)
    assert parser["console_scripts"]["planner"].strip() == "planner.cli:main"


def test_unpacked_wheel_finds_its_own_data(wheel: Path, tmp_path: Path) -> None:
    # Import planner from the unpacked wheel (ahead of the editable install on sys.path), from a
    # directory with no repo around it, and load the catalog: data_dir must find planner/<name>.
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    script = (
        "import planner, planner.inputs.catalog as c; "
        "print(planner.__file__); print(c.data_dir('hardware_catalog')); "
        "print(c.data_dir('model_zoo')); print(len(c.gpus()), len(c.models()))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    module, gpu_dir, zoo_dir, counts = proc.stdout.splitlines()
    assert Path(module).is_relative_to(site)
    assert Path(gpu_dir) == site / "planner" / "hardware_catalog"
    assert Path(zoo_dir) == site / "planner" / "model_zoo"
    n_gpus = len(list((REPO / "hardware_catalog" / "gpus").glob("*.toml")))
    n_models = len(list((REPO / "model_zoo").glob("*.toml")))
    assert counts == f"{n_gpus} {n_models}"
