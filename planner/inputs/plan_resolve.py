"""The plan's references resolved: `[model]` (a zoo name, a Hugging Face config.json path relative
to the plan file, or inline Megatron fields) into a ModelArch, and a one-kind `[cluster]` (a
catalog GPU with the plan's overrides) into a ClusterSpec. Heterogeneous pools are
`planner.inputs.pools`. The Hugging Face importer is imported when a plan names a config.json."""

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
