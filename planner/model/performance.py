"""What a step-time estimate returns: the step's seconds by cause (`StepBreakdown`), the
`Performance` built on them (throughput, MFU against the bf16 and the job's own peak), and how the
outputs name the largest cost (`COST_NAMES`, `Performance.bottleneck`). `planner.model.cost`
computes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.inputs.plan_types import Precision


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per step on the slowest pipeline stage, by cause."""

    compute: float
    recompute: float
    tp_comm_exposed: float
    tp_comm_hidden: float
    cp_comm_exposed: float
    cp_comm_hidden: float
    ep_comm_exposed: float
    ep_comm_hidden: float
    pp_comm_exposed: float
    dp_comm_exposed: float
    dp_comm_hidden: float
    bubble: float
    optimizer: float
    other: float
    offload_exposed: float = 0.0
    """CPU offloading's host transfers beyond the compute they overlap."""
    link_shared: float = 0.0
    """What the step waits, beyond the rest, for the one PCIe link a GPU without NVLink moves all
    its traffic over (`planner.model.shared_link`): 0 where the link keeps up."""

    @property
    def step_time(self) -> float:
        """Compute, recompute, every exposed communication, bubble, optimizer and other."""
        hidden = ("tp_comm_hidden", "cp_comm_hidden", "ep_comm_hidden", "dp_comm_hidden")
        return sum(float(getattr(self, f)) for f in self.__dataclass_fields__ if f not in hidden)


COST_NAMES = {
    # StepBreakdown field -> how output names it (everything but compute and hidden traffic)
    "recompute": "recompute",
    "tp_comm_exposed": "TP traffic",
    "cp_comm_exposed": "CP traffic",
    "ep_comm_exposed": "EP traffic",
    "pp_comm_exposed": "PP traffic",
    "dp_comm_exposed": "DP traffic",
    "bubble": "bubble",
    "optimizer": "optimizer",
    "other": "other",
    "offload_exposed": "host offload",
    "link_shared": "shared PCIe link",
}

BOTTLENECK_MIN_SHARE = 0.05
"""The share of the step time a cost besides compute must reach for `Performance.bottleneck` to
name it. Below it no single cost is worth a layout change: removing it entirely would gain less
than 5%, about the step-time model's own error (median |error| 4.0% on the 23 published runs it
is not fitted on, benchmarks/fidelity.py), so naming it ("top cost: optimizer" at 0.2% of the
step) would point at noise. A layout whose costs all stay below it is `COMPUTE_BOUND`."""


def peak_label(precision: Precision, tf32: Sequence[bool]) -> str:
    """`Performance.peak_name` of a job in `precision` on GPUs (one per pool) with (True) or
    without TF32 tensor cores: "TF32" for fp32 on GPUs that all have them, "FP32" on GPUs that
    have none, "TF32 / FP32" across pools of both; "" for the other precisions."""
    if precision != "fp32":
        return ""
    return "TF32" if all(tf32) else "FP32" if not any(tf32) else "TF32 / FP32"


HOST_ISSUE = "host kernel issue"
"""How `Performance.top_cost` names the host's eager kernel issue where it is the largest cost
besides compute (explain's note on it: "host-bound: issuing the layers' kernels eagerly adds
...")."""

COMPUTE_BOUND = "compute-bound"
"""What `Performance.bottleneck` says when no cost besides compute reaches BOTTLENECK_MIN_SHARE."""


@dataclass(frozen=True)
class Performance:
    breakdown: StepBreakdown
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    model_tflops_per_gpu: float
    mfu: float
    """Model FLOPs / (step time x GPUs x dense peak of the job's precision): against the FP8
    (FP4) peak for an FP8 (NVFP4) job, the TF32 one for an fp32 job (its GEMMs' peak,
    `GpuSpec.peak_flops`) (`mfu_bf16_peak` / `mfu_fp8_peak` / `mfu_fp4_peak`, `peak_name` say
    which)."""
    stages: tuple[tuple[float, float], ...] = ()
    """Per pipeline stage, the (forward, backward) seconds of one micro-batch: the stage's time
    per micro-batch, exposed traffic included, split in proportion to its forward and backward
    (with recompute) compute. What the pipeline schedule is made of (planner.timeline)."""
    tails: tuple[float, ...] = ()
    """Per pipeline stage, the seconds a step adds after the pipeline for it: its exposed
    data-parallel sync and its optimizer step (`planner.model.stage_sync`); the step's
    `dp_comm_exposed` + `optimizer` are the largest's."""
    unscheduled_s: float = 0.0
    """Step seconds outside the per-stage micro-batch times and the step's tail (DP traffic,
    optimizer, fixed costs): the slowest stage's once-a-step FP8 weight casts and the deferred
    output-layer weight gradients' flush (part of `compute` and of `bubble`), which a drawn
    schedule adds after the pipeline (`planner.cli.timeline`)."""
    p2p_hop: float = 0.0
    """Seconds each overlapped point-to-point send (one micro-batch's activations or gradients)
    delays its receiver in the interleaved schedule; 0 in 1F1B, whose blocking sends are in the
    stage times."""
    p2p_blocking: tuple[float, ...] = ()
    """Per pipeline stage, the seconds of its blocking exchanges per micro-batch in the
    interleaved schedule without the p2p overlap (`blocking_p2p.exchanges`; not in `stages`):
    where a drawn schedule puts them, in its rank's ops in place of `p2p_hop`; () elsewhere."""
    peak_over_bf16: float = 1.0
    """The dense peak `mfu` is taken against over the bf16 dense peak: 1 for a bf16 job, the FP8
    / bf16 peak ratio (2 on Hopper) for an FP8 one, the FP4 / bf16 one for NVFP4, the TF32 /
    bf16 one (1/2) for fp32."""
    precision: Precision = "bf16"
    peak_name: str = ""
    """What `mfu_text` calls the peak `mfu` is taken against where it is not bf16's: "" for the
    precision's own name (FP8, FP4); for fp32 "TF32" (the tensor-core peak its GEMMs run at),
    or "FP32" on GPUs without TF32 tensor cores (`GpuSpec.peak_flops`; `peak_label`)."""

    @property
    def mfu_bf16_peak(self) -> float:
        """MFU against the bf16 dense peak, the usual convention whatever the precision."""
        return self.mfu * self.peak_over_bf16

    @property
    def mfu_fp8_peak(self) -> float | None:
        """MFU against the FP8 dense peak, for an FP8 job (None otherwise)."""
        return self.mfu if self.precision == "fp8" else None

    @property
    def mfu_fp4_peak(self) -> float | None:
        """MFU against the FP4 dense peak, for an NVFP4 job (None otherwise)."""
        return self.mfu if self.precision == "fp4" else None

    def mfu_text(self) -> str:
        """ "MFU 40.5% of the bf16 peak", and for an FP8 (NVFP4) job ", 20.3% of the FP8 (FP4)
        peak" after it, for an fp32 one ", 81.0% of the TF32 peak": both labelled (explain, the
        launch files' headers)."""
        text = f"MFU {self.mfu_bf16_peak:.1%} of the bf16 peak"
        if self.precision not in ("bf16", "fp16"):  # fp16's peak is bf16's (GpuSpec.peak_flops)
            name = self.peak_name or self.precision.upper()
            text += f", {self.mfu:.1%} of the {name} peak"
        return text

    def top_cost(self, host_issue_s: float = 0.0) -> tuple[str, float]:
        """(how output names the largest cost other than compute, its seconds): the largest of
        COST_NAMES, or HOST_ISSUE where `host_issue_s` is larger. `host_issue_s`: the seconds the
        host's eager kernel issue adds to the step, which sit inside `breakdown.compute` (the
        layers floored by it, `planner.model.host_floor`): the step less the same layout's with
        its layers captured in CUDA graphs (`planner.cli.switch_notes.host_seconds`), 0 where
        the caller does not weigh it."""
        b = self.breakdown
        field = max(COST_NAMES, key=lambda f: float(getattr(b, f)))
        seconds = float(getattr(b, field))
        if host_issue_s > seconds:
            return HOST_ISSUE, host_issue_s
        return COST_NAMES[field], seconds

    def bottleneck(self, host_issue_s: float = 0.0) -> str:
        """The largest cost other than compute (`top_cost`), e.g. "bubble", "TP traffic" or
        HOST_ISSUE, when it takes at least BOTTLENECK_MIN_SHARE of the step time; else
        COMPUTE_BOUND. (The suggest table's "top cost", explain's "largest cost besides
        compute", JSON `performance.bottleneck`.)"""
        name, seconds = self.top_cost(host_issue_s)
        if seconds < BOTTLENECK_MIN_SHARE * self.step_time_s:
            return COMPUTE_BOUND
        return name
