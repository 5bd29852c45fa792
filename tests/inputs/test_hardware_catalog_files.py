"""Tests for planner.inputs.catalog.load_gpus on bad GPU directories: a copy loads, and a name that
is not its stem, two files with one name, an unknown key, a bad value or malformed TOML is
bad input naming the file and the field.

Oracle: the bundled h100-sxm-80gb.toml, copied and edited one thing at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.inputs import catalog
from planner.inputs.errors import InputError

# --- catalog.load_gpus on bad directories ---------------------------------------------------


@pytest.fixture
def h100_text() -> str:
    return (catalog.gpu_dir() / "h100-sxm-80gb.toml").read_text(encoding="utf-8")


def test_load_gpus_on_a_copy(tmp_path: Path, h100_text: str) -> None:
    (tmp_path / "h100-sxm-80gb.toml").write_text(h100_text, encoding="utf-8")
    assert list(catalog.load_gpus(tmp_path)) == ["h100-sxm-80gb"]


def test_name_differs_from_stem(tmp_path: Path, h100_text: str) -> None:
    path = tmp_path / "h100.toml"
    path.write_text(h100_text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        catalog.load_gpus(tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert "name" in message
    assert "'h100-sxm-80gb'" in message


def test_two_files_with_one_name(tmp_path: Path, h100_text: str) -> None:
    # Since the name must equal the stem, the second file is caught as a mismatch, naming it.
    (tmp_path / "h100-sxm-80gb.toml").write_text(h100_text, encoding="utf-8")
    second = tmp_path / "zz-copy.toml"
    second.write_text(h100_text, encoding="utf-8")
    with pytest.raises(InputError, match="h100-sxm-80gb") as info:
        catalog.load_gpus(tmp_path)
    assert str(second) in str(info.value)


def test_unknown_key(tmp_path: Path, h100_text: str) -> None:
    path = tmp_path / "h100-sxm-80gb.toml"
    path.write_text(h100_text.replace("tdp_w = 700", "tdp_w = 700\ntdp_watts = 700"), "utf-8")
    with pytest.raises(InputError, match="unknown key") as info:
        catalog.load_gpus(tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert "tdp_watts" in message


def test_bad_value_names_field(tmp_path: Path, h100_text: str) -> None:
    path = tmp_path / "h100-sxm-80gb.toml"
    path.write_text(h100_text.replace("tdp_w = 700", "tdp_w = -700"), "utf-8")
    with pytest.raises(InputError, match=r"tdp_w: .*\(got -700\)"):
        catalog.load_gpus(tmp_path)


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h100-sxm-80gb.toml"
    path.write_text('name = "h100-sxm-80gb"\ntdp_w = = 700\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"malformed TOML.*line 2") as info:
        catalog.load_gpus(tmp_path)
    assert str(path) in str(info.value)
