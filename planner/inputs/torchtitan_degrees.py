"""A torchtitan TOML's parallelism degrees (`parallelism.*_degree`), as torchtitan's ParallelDims
checks them, each no larger than a cluster may be."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError, spelled
from planner.inputs.hardware import MAX_GPUS
from planner.inputs.torchtitan_pipeline import get


def degree(doc: dict[str, Any], where: str, key: str) -> int:
    """A parallelism degree (default 1): at least 1, as torchtitan's ParallelDims asserts for
    every degree but dp_shard (distributed/parallel_dims.py:45-46 at e347b1e5, :175-176 at
    b5bcd76c: "Parallelism degree should be >= 1, except for dp_shard"), whether or not it is
    used (an expert degree of a dense model too)."""
    value = get(doc, where, "parallelism", key, int, 1)
    if value < 1:
        raise InputError(
            f"{where}: parallelism.{key}: must be at least 1 (got {spelled(value)}): "
            "torchtitan's ParallelDims asserts every degree but data_parallel_shard_degree >= 1"
        )
    return _at_most_gpus(value, where, key)


def _at_most_gpus(value: int, where: str, key: str) -> int:
    """A degree no larger than a cluster may be (hardware.MAX_GPUS)."""
    if value > MAX_GPUS:
        raise InputError(f"{where}: parallelism.{key}: at most {MAX_GPUS:,} (got {spelled(value)})")
    return int(value)


def degrees(doc: dict[str, Any], where: str, num_gpus: int | None) -> dict[str, int]:
    """replicate, shard (-1 resolved), tp, pp, cp and the GPUs they multiply to."""

    rep = degree(doc, where, "data_parallel_replicate_degree")
    shard = get(doc, where, "parallelism", "data_parallel_shard_degree", int, -1)
    tp, pp, cp = (
        degree(doc, where, "tensor_parallel_degree"),
        degree(doc, where, "pipeline_parallel_degree"),
        degree(doc, where, "context_parallel_degree"),
    )
    if shard < 1 and shard != -1:
        raise InputError(
            f"{where}: parallelism.data_parallel_shard_degree: must be at least 1, or -1 for "
            f"the GPUs the other degrees leave (got {spelled(shard)})"
        )
    _at_most_gpus(shard, where, "data_parallel_shard_degree")
    if shard == -1:
        if num_gpus is None:
            raise InputError(
                f"{where}: parallelism.data_parallel_shard_degree: {shard} (the rest) needs "
                "--num-gpus"
            )
        shard = num_gpus // (rep * tp * pp * cp)
    world = rep * shard * tp * pp * cp
    if num_gpus is not None and num_gpus != world:
        raise InputError(
            f"{where}: parallelism: the degrees multiply to {world} GPUs (replicate {rep} x shard "
            f"{shard} x cp {cp} x tp {tp} x pp {pp}), not --num-gpus {num_gpus}"
        )
    return {"rep": rep, "shard": shard, "tp": tp, "pp": pp, "cp": cp, "world": world}
