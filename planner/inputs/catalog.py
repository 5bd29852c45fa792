"""Load and validate the data files: `hardware_catalog/gpus/*.toml` and `model_zoo/*.toml`.

Nothing is read at import time. Each file is validated at the boundary (pydantic, frozen,
extra="forbid"); a file whose `name` differs from its file stem, or two files with one name, are
errors that name the file, the field and the value. A GPU or model asked for by name is read from
its own file (`<name>.toml`, `_named`): a command that plans one job reads two files, not the
whole catalog, which is read to list the names, to suggest one for a name that has no file, or
when a file's `name` is not its stem (whose error it then raises).

The Hugging Face importer (`planner.inputs.hf_import`) is imported by `resolve_model` when a
config.json is asked for.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from planner.inputs.arch import ModelArch
from planner.inputs.errors import SPELLED_CHARS, InputError, spelled
from planner.inputs.files import is_file, load_toml, validate
from planner.inputs.hardware import GpuSpec

T = TypeVar("T", bound=BaseModel)

_PKG = Path(__file__).resolve().parent.parent
"""The `planner` package directory: the wheel ships the data directories inside it."""


def data_dir(name: str) -> Path:
    """`hardware_catalog` or `model_zoo`: inside the installed wheel, else at the repo root."""
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise InputError(f"data directory '{name}' not found next to {_PKG}")


def gpu_dir() -> Path:
    return data_dir("hardware_catalog") / "gpus"


def zoo_dir() -> Path:
    return data_dir("model_zoo")


def _load_dir(cls: type[T], directory: Path) -> dict[str, T]:
    """Every `*.toml` in a directory. Two files with one name, then a name that differs from
    its file stem, are errors naming the file, the field and the value."""
    found: dict[str, T] = {}
    origin: dict[str, Path] = {}
    for path in sorted(directory.glob("*.toml")):
        obj = validate(cls, load_toml(path), path)
        name = str(getattr(obj, "name", ""))
        if name in found:
            raise InputError(
                f"{path}: name: '{name}' is also defined in {origin[name]} (names must be unique)"
            )
        found[name] = obj
        origin[name] = path
    for name, path in origin.items():
        if name != path.stem:
            raise InputError(f"{path}: name: '{name}' does not match the file name '{path.stem}'")
    return found


def load_gpus(directory: Path | None = None) -> dict[str, GpuSpec]:
    """Every GPU in a catalog directory, by name."""
    return _load_dir(GpuSpec, directory or gpu_dir())


def load_models(directory: Path | None = None) -> dict[str, ModelArch]:
    """Every model in a zoo directory, by name."""
    return _load_dir(ModelArch, directory or zoo_dir())


@cache
def gpus() -> dict[str, GpuSpec]:
    """The bundled GPU catalog (loaded once, on first use)."""
    return load_gpus()


@cache
def models() -> dict[str, ModelArch]:
    """The bundled model zoo (loaded once, on first use)."""
    return load_models()


def unknown_name(kind: str, name: str, known: list[str]) -> InputError:
    """An error for an unknown catalog name, suggesting the closest known ones."""
    short = name.isprintable() and len(name) <= SPELLED_CHARS
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4) if short else []
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    # a NUL escaped, not printed; a fuzzer's 100,000 characters cut short (`spelled`)
    shown = f"'{name}'" if short else spelled(name)
    return InputError(f"unknown {kind} {shown}{hint} (`planner catalog list` shows them all)")


@cache
def _named(cls: type[T], directory: Path, name: str) -> T | None:
    """The entry `name` of a catalog directory, read from `<name>.toml` alone (once); None where
    there is no such file or its `name` is not `name` (the whole directory then decides)."""
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        return None
    path = directory / f"{name}.toml"
    if not is_file(path):  # a name the system refuses (too long) is no catalog entry either
        return None
    obj = validate(cls, load_toml(path), path)
    return obj if getattr(obj, "name", None) == name else None


def get_gpu(name: str) -> GpuSpec:
    found = _named(GpuSpec, gpu_dir(), name)
    if found is not None:
        return found
    table = gpus()
    if name not in table:
        raise unknown_name("GPU", name, sorted(table))
    return table[name]


def get_model(name: str) -> ModelArch:
    found = _named(ModelArch, zoo_dir(), name)
    if found is not None:
        return found
    table = models()
    if name not in table:
        raise unknown_name("model", name, sorted(table))
    return table[name]


def has_model(name: str) -> bool:
    """Whether the bundled zoo has a model of this name."""
    return _named(ModelArch, zoo_dir(), name) is not None or name in models()


def looks_like_path(ref: str) -> bool:
    return ref.endswith((".json", ".toml")) or "/" in ref or "\\" in ref


def resolve_model(ref: str, base_dir: Path | None = None) -> ModelArch:
    """A zoo name, an HF config.json path or a model TOML path (relative to base_dir)."""
    if not looks_like_path(ref):
        return get_model(ref)
    path = Path(ref)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if path.suffix == ".toml":
        doc = load_toml(path)
        if "peak_tflops_bf16" in doc and "num_layers" not in doc:
            name = doc.get("name")
            by = f"by its name ({name})" if isinstance(name, str) and name in gpus() else "by name"
            raise InputError(
                f"{path}: a GPU's TOML, not a model's: catalog GPUs are shown {by}, "
                "and a cluster takes one as [cluster] gpu"
            )
        return validate(ModelArch, doc, path)
    from planner.inputs.hf_import import load_hf_config

    return load_hf_config(path)
