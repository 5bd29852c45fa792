"""`catalog.get_gpu` and `catalog.get_model` read one file (`catalog._named`, remembered per
name): each entry so read equals, field for field, the one the whole directory's load makes
(oracle `load_gpus` / `load_models`, the uncached readers); a name without its own file, or a file
whose `name` is not its stem, falls back to the whole directory and its errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.inputs import catalog
from planner.inputs.errors import InputError


def test_every_gpu_read_alone_equals_the_whole_catalog_s() -> None:
    whole = catalog.load_gpus()
    for name, gpu in whole.items():
        alone = catalog.get_gpu(name)
        assert alone.model_dump() == gpu.model_dump()
        assert catalog.get_gpu(name) is alone  # read once


def test_every_model_read_alone_equals_the_whole_zoo_s() -> None:
    whole = catalog.load_models()
    for name, arch in whole.items():
        alone = catalog.get_model(name)
        assert alone.model_dump() == arch.model_dump()
        assert catalog.has_model(name)


def test_unknown_names_still_suggest_from_the_whole_catalog() -> None:
    assert not catalog.has_model("llama3.1-8")
    with pytest.raises(InputError, match=re.escape("did you mean llama3.1-8b")):
        catalog.get_model("llama3.1-8")
    with pytest.raises(InputError, match=re.escape("unknown GPU '../gpus/h100-sxm-80gb'")):
        catalog.get_gpu("../gpus/h100-sxm-80gb")


def test_a_file_whose_name_is_not_its_stem_is_not_read_alone(tmp_path: Path) -> None:
    text = (catalog.gpu_dir() / "h100-sxm-80gb.toml").read_text(encoding="utf-8")
    (tmp_path / "other.toml").write_text(text, encoding="utf-8")
    assert catalog._named(type(catalog.get_gpu("h100-sxm-80gb")), tmp_path, "other") is None
    with pytest.raises(InputError, match="does not match the file name 'other'"):
        catalog.load_gpus(tmp_path)
