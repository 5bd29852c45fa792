"""The model's constants that a cluster's own logs may refit (`planner calibrate`), and the one
way to change them: `calibrated` (a scope) or `apply` (the rest of the process).

Each is a module-level constant read at call time where it is defined and documented; this
module only names them, with the range a profile may set and how far a cluster plausibly sits
from the default (`spread`: the standard deviation of the constant's natural log across
clusters, the prior a fit starts from). Changing one forgets every memoised result
(`JobMemo.forget_all`).

- gemm_efficiency: `layer_time.GEMM_EFFICIENCY_MAX`, the best fraction of the GPU's MAMF a GEMM
  reaches (clocks under a power cap, the cuBLAS / TE version);
- attention_efficiency: `layer_time.ATTENTION_EFFICIENCY`, the attention kernels' speed;
- scaleup_bandwidth / scaleout_bandwidth: `comms.SCALEUP_BUS_EFFICIENCY` /
  `SCALEOUT_BUS_EFFICIENCY`, the achieved fraction of the NVLink and the network tiers' bus
  bandwidth (NCCL tuning, a congested spine);
- latency_scale: `comms.LATENCY_SCALE`, every collective's and point-to-point's latency;
- step_overhead_s: `cost.STEP_OVERHEAD_S`, the fixed time of a step (optimizer launch, data
  loader, logging) that no layout changes, on the reference host (`host.HOST_CPU_SLOWDOWN`);
- layer_issue_s: `host.HOST_LAYER_ISSUE_S`, the reference host's time to issue one dense layer's
  forward (the floor under small layers; every other layer kind's is a multiple of it);
- activation_scale: `memory.ACTIVATION_SCALE`, activations and transient buffers against what
  the model derives (weights, gradients and optimizer states are counted exactly).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from planner.model import comms, cost, host, layer_time, memory
from planner.model.job_memo import JobMemo


@dataclass(frozen=True)
class Constant:
    """One refittable constant: where it lives, its allowed range, and its prior spread."""

    key: str
    module: ModuleType
    attr: str
    lo: float
    hi: float
    spread: float
    """Standard deviation of log(value) across clusters (of the value itself for a `linear` one):
    the prior a calibration starts from."""
    kind: Literal["time", "memory"]
    what: str
    linear: bool = False
    """An additive constant (seconds): fitted as itself, `spread` in its unit, not as a log."""

    @property
    def value(self) -> float:
        return float(getattr(self.module, self.attr))


CONSTANTS: tuple[Constant, ...] = (
    Constant(
        "gemm_efficiency",
        layer_time,
        "GEMM_EFFICIENCY_MAX",
        0.2,
        1.0,
        0.15,
        "time",
        "best fraction of the GPU's measured matmul peak a GEMM reaches",
    ),
    Constant(
        "attention_efficiency",
        layer_time,
        "ATTENTION_EFFICIENCY",
        0.05,
        2.0,
        0.4,
        "time",
        "attention kernels' speed",
    ),
    Constant(
        "scaleup_bandwidth",
        comms,
        "SCALEUP_BUS_EFFICIENCY",
        0.2,
        1.0,
        0.25,
        "time",
        "achieved fraction of the scale-up (NVLink) tier's bus bandwidth",
    ),
    Constant(
        "scaleout_bandwidth",
        comms,
        "SCALEOUT_BUS_EFFICIENCY",
        0.1,
        1.0,
        0.3,
        "time",
        "achieved fraction of the network tiers' bus bandwidth",
    ),
    Constant(
        "latency_scale",
        comms,
        "LATENCY_SCALE",
        0.1,
        20.0,
        0.7,
        "time",
        "multiplier on every collective's and point-to-point's latency",
    ),
    Constant(
        "step_overhead_s",
        cost,
        "STEP_OVERHEAD_S",
        0.0,
        10.0,
        0.2,
        "time",
        "fixed seconds per step that no layout changes",
        linear=True,
    ),
    Constant(
        "layer_issue_s",
        host,
        "HOST_LAYER_ISSUE_S",
        0.0,
        0.05,
        0.002,
        "time",
        "seconds the reference host takes to issue one dense layer's forward kernels",
        linear=True,
    ),
    Constant(
        "activation_scale",
        memory,
        "ACTIVATION_SCALE",
        0.5,
        2.0,
        0.15,
        "memory",
        "activations and transient buffers against the model's derivation",
    ),
)
BY_KEY = {c.key: c for c in CONSTANTS}
DEFAULTS: dict[str, float] = {c.key: c.value for c in CONSTANTS}
"""The values the model ships with (read at import, before any calibration)."""


def current() -> dict[str, float]:
    return {c.key: c.value for c in CONSTANTS}


def apply(values: Mapping[str, float]) -> None:
    """Set constants by key (unknown keys are a bug: profiles are validated before this)."""
    for key, value in values.items():
        c = BY_KEY[key]
        setattr(c.module, c.attr, value)
    JobMemo.forget_all()


def reset() -> None:
    """The shipped constants again (after a command applied a profile)."""
    if current() != DEFAULTS:
        apply(DEFAULTS)


@contextmanager
def calibrated(values: Mapping[str, float]) -> Iterator[None]:
    """The constants set to `values` inside the block, restored after it."""
    before = current()
    apply(values)
    try:
        yield
    finally:
        apply(before)
