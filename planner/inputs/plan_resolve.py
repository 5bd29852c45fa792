"""The plan's references resolved: `[model]` (a zoo name, a Hugging Face config.json path relative
to the plan file, or inline Megatron fields) into a ModelArch, and a one-kind `[cluster]` (a
catalog GPU with the plan's overrides) into a ClusterSpec. Heterogeneous pools are
`planner.inputs.pools`. The Hugging Face importer is imported when a plan names a config.json.

Inline fields are a model file's (`planner.inputs.arch_fields`), so they may carry the model's own
`name`, as `suggest --write-plan` writes a model read from a file and the NeMo reader labels a
recipe it changed ("llama3.1-8b+overrides"). That name may not be a zoo model's, unless every
field given is that model's own, nor a path: `name = "llama3.1-8b"` beside `num_layers = 16`
would otherwise be an inline model shown as the zoo's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.errors import InputError, spelled
from planner.inputs.files import is_dir, is_file, validate
from planner.inputs.hardware import ClusterSpec
from planner.inputs.pools import check_one_kind, one_kind


def resolve_model_table(table: dict[str, Any], path: Path | None) -> ModelArch:
    """`[model]`: exactly one of name = zoo name, hf_config = path, or inline Megatron fields."""
    where = str(path) if path else "<plan>"
    base = path.parent if path else None
    if "name" in table and len(table) > 1:
        _check_inline_name(table, where)
    if "name" in table and len(table) == 1:
        ref = table["name"]
        if not isinstance(ref, str) or not ref:
            raise InputError(
                f"{where}: model.name: expected a zoo name or a path (got {spelled(ref)})"
            )
        if not catalog.looks_like_path(ref):
            if not catalog.has_model(ref):
                err = catalog.unknown_name("model", ref, sorted(catalog.models()))
                raise InputError(f"{where}: model.name: {err}")
            return catalog.resolve_model(ref, base)
        try:  # a model file: what is wrong with it, under the plan's field
            return catalog.resolve_model(ref, base)
        except InputError as e:
            raise InputError(f"{where}: model.name: {e}") from None
    if "hf_config" in table:
        if len(table) != 1:
            extra = sorted(set(table) - {"hf_config"})
            raise InputError(f"{where}: model: hf_config cannot be combined with {extra}")
        ref = table["hf_config"]
        if not isinstance(ref, str) or not ref:
            raise InputError(f"{where}: model.hf_config: expected a path (got {spelled(ref)})")
        hf_path = Path(ref) if base is None or Path(ref).is_absolute() else base / ref
        if not is_file(hf_path):
            what = (
                "is a directory"
                if is_dir(hf_path)
                else "not a regular file"
                if _exists(hf_path)
                else "no such file"
            )
            raise InputError(f"{where}: model.hf_config: {what}: {hf_path} (got {spelled(ref)})")
        from planner.inputs.hf_import import load_hf_config

        return load_hf_config(hf_path)
    if not table:
        raise InputError(f"{where}: model: give name, hf_config, or the architecture fields")
    inline = {"name": "inline", "source": f"inline in {where}", **table}
    return validate(ModelArch, inline, path, prefix="model")


LABELS = ("name", "source", "display_name")
"""A model's fields that label it and change no size."""


def _check_inline_name(table: dict[str, Any], where: str) -> None:
    """`name` beside the architecture fields: refused where it names a zoo model the fields
    change, or a path (a reference is given alone: name, hf_config or the fields, one of them)."""
    ref = table["name"]
    fields = sorted(set(table) - {"name"})
    rule = (
        "give exactly one of name (a zoo model or a model file, alone), hf_config, or the "
        "architecture fields inline (under a name that is no zoo model's)"
    )
    if isinstance(ref, str) and ref and catalog.looks_like_path(ref):
        raise InputError(
            f"{where}: model: name = {spelled(ref)} is a model file, and {fields} are given "
            f"beside it: {rule}"
        )
    if set(fields) - set(ModelArch.model_fields):
        return  # an unknown key: the inline fields' validation names it
    if not isinstance(ref, str) or not catalog.has_model(ref):
        return  # the inline model's own name (validated with its fields)
    zoo = catalog.get_model(ref)
    changed = [
        k for k in fields if k not in LABELS and _plain(table[k]) != _plain(getattr(zoo, k, None))
    ]
    if changed:
        raise InputError(
            f"{where}: model: name = {spelled(ref)} is a zoo model, and {changed} are given "
            f"beside it with values of their own: {rule}"
        )


def _plain(value: Any) -> Any:
    """A field's value with lists and tuples alike, to compare a TOML value with a model's."""
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value


def _exists(path: Path) -> bool:
    """Whether anything is at the path (a device such as /dev/null, a pipe); False for a name
    the system refuses."""
    try:
        return path.exists()
    except OSError:
        return False


def resolve_cluster(section: ClusterSection, path: Path | None) -> ClusterSpec:
    """A catalog GPU with the plan's overrides (gpus_per_node, memory_gib, power_limit_w,
    hbm_bandwidth_tb_per_s, tiers, host_memory_gib_per_node) applied."""
    check_one_kind(section, str(path) if path else "<plan>")
    return one_kind(section, path, "cluster")
