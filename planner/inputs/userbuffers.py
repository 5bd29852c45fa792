"""Transformer Engine's userbuffers configuration for Megatron's --tp-comm-overlap: per GEMM of a
TP block (qkv / proj for attention, fc1 / fc2 for the MLP; fprop, dgrad and wgrad), how its
collective overlaps it and how many SMs it holds (`planner.model.tp_overlap` prices each).

The defaults are Transformer Engine's own (transformer_engine/pytorch/module/base.py
`initialize_ub` @d0067d0d), what Megatron-LM uses without --tp-comm-overlap-cfg:

    ring_exchange  qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad   num_sm 1, no SM margin,
                                                                 tp chunks on the copy engines
    pipeline       proj_fprop, fc2_fprop                         num_sm 16, SM margin, 4 chunks
    bulk           qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad     num_sm 16, SM margin, whole

A run's own configuration (NeMo's and Megatron-Bridge's `ub_tp_comm_overlap_cfg`, Megatron-LM's
--tp-comm-overlap-cfg YAML) overrides a slot's keys one by one: `get_default_config(name)` (from
the slot's default method, or the method the configuration moves a bulk slot to) updated with
the keys given (`resolve`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

Method = Literal["ring_exchange", "pipeline", "bulk", "external"]
METHODS: tuple[Method, ...] = ("ring_exchange", "pipeline", "bulk", "external")

DEFAULT_METHODS: dict[str, Method] = {
    "qkv_fprop": "ring_exchange",
    "fc1_fprop": "ring_exchange",
    "proj_dgrad": "ring_exchange",
    "fc2_dgrad": "ring_exchange",
    "proj_fprop": "pipeline",
    "fc2_fprop": "pipeline",
    "qkv_dgrad": "bulk",
    "qkv_wgrad": "bulk",
    "fc1_dgrad": "bulk",
    "fc1_wgrad": "bulk",
    "proj_wgrad": "external",
    "fc2_wgrad": "external",
}
"""Each userbuffers slot's default overlap method (`initialize_ub`'s `methods`)."""

PIPELINE_SPLITS = 4
"""Chunks of a pipelined overlap (`initialize_ub` default `num_splits` but for ring_exchange)."""


@dataclass(frozen=True)
class UbSlot:
    """One GEMM's userbuffers overlap: its method, the SMs its communication kernel holds, whether
    the GEMM is launched on the SMs left (`set_sm_margin`), and its chunks (None: tp for a ring
    exchange, PIPELINE_SPLITS for a pipeline, whole for bulk)."""

    method: Method
    num_sm: int
    set_sm_margin: bool
    num_splits: int | None = None

    def chunks(self, tp: int) -> int:
        """Pieces the collective is cut into beside its GEMM (1: bulk, run whole)."""
        if self.method == "bulk":
            return 1
        if self.num_splits is not None:
            return self.num_splits
        return tp if self.method == "ring_exchange" else PIPELINE_SPLITS


def default_slot(method: Method) -> UbSlot:
    """`get_default_config` for a slot of this method."""
    ring = method == "ring_exchange"
    return UbSlot(method, 1 if ring else 16, not ring)


def resolve(overrides: Mapping[str, Mapping[str, object]] | None) -> tuple[tuple[str, UbSlot], ...]:
    """Every slot as a configuration leaves it: Transformer Engine's default for the slot (from
    the method the configuration gives a bulk slot, else its default method) updated with the
    keys the model reads (method, num_sm, set_sm_margin, num_splits; cga_size, aggregate,
    atomic_gemm, fp8_buf and the like are accepted and left aside). Unknown slot names raise
    KeyError, bad values ValueError."""
    out: list[tuple[str, UbSlot]] = []
    given = dict(overrides or {})
    unknown = set(given) - set(DEFAULT_METHODS)
    if unknown:
        raise KeyError(f"unknown userbuffers slot(s): {', '.join(sorted(unknown))}")
    for name, default in DEFAULT_METHODS.items():
        keys = dict(given.get(name, {}))
        method = _method(name, keys.get("method", default))
        slot = replace(default_slot(method if default == "bulk" else default), method=method)
        if "num_sm" in keys:
            slot = replace(slot, num_sm=_count(name, "num_sm", keys["num_sm"]))
        if "set_sm_margin" in keys:
            slot = replace(slot, set_sm_margin=bool(keys["set_sm_margin"]))
        if "num_splits" in keys:
            slot = replace(slot, num_splits=_count(name, "num_splits", keys["num_splits"]))
        out.append((name, slot))
    return tuple(out)


def _method(name: str, value: object) -> Method:
    for method in METHODS:
        if value == method:
            return method
    raise ValueError(f"{name}.method: {value!r} is not one of {', '.join(METHODS)}")


def _count(name: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}.{key}: {value!r} is not a positive integer")
    return value


TE_DEFAULT = resolve(None)
"""Transformer Engine's defaults for every slot."""


@lru_cache(maxsize=64)
def slot_map(cfg: tuple[tuple[str, UbSlot], ...]) -> Mapping[str, UbSlot]:
    """A resolved configuration (`resolve`, `Job.tp_overlap_cfg`) by slot name."""
    return dict(cfg)
