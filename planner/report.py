"""Plain dictionaries for `--json` output (DESIGN.md section 2 keys). Pure: no printing."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from planner import params
from planner.arch import ModelArch
from planner.cost import Performance
from planner.hardware import GpuSpec
from planner.layout import Layout
from planner.memory import MemoryReport, StageMemory
from planner.units import GIB


def _gib(nbytes: float) -> float:
    return round(nbytes / GIB, 3)


def layout_dict(layout: Layout) -> dict[str, Any]:
    d = asdict(layout)
    d["etp"] = layout.expert_tp
    d["pipeline_layers"] = list(layout.pipeline_layers) if layout.pipeline_layers else None
    return d


def stage_dict(st: StageMemory) -> dict[str, Any]:
    return {
        "stage": st.stage,
        "layers": st.layers,
        "weights_gib": _gib(st.weights),
        "grads_gib": _gib(st.grads),
        "optimizer_gib": _gib(st.optimizer),
        "activations_gib": _gib(st.activations),
        "other_gib": _gib(st.other),
        "total_gib": _gib(st.total),
    }


def memory_dict(rep: MemoryReport) -> dict[str, Any]:
    return {
        "peak_gib": _gib(rep.peak),
        "capacity_gib": _gib(rep.capacity),
        "physical_gib": _gib(rep.physical),
        "headroom_pct": rep.headroom_pct,
        "worst_stage": rep.worst.stage,
        "stages": [stage_dict(st) for st in rep.stages],
    }


def model_dict(arch: ModelArch, full: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = arch.model_dump() if full else {"name": arch.name}
    d["params_total"] = params.params_total(arch)
    d["params_active"] = params.params_active(arch)
    return d


def gpu_dict(gpu: GpuSpec) -> dict[str, Any]:
    return gpu.model_dump(mode="json")


def performance_dict(perf: Performance) -> dict[str, Any]:
    b = perf.breakdown
    return {
        "step_time_s": round(perf.step_time_s, 4),
        "tokens_per_s_per_gpu": round(perf.tokens_per_s_per_gpu, 1),
        "model_tflops_per_gpu": round(perf.model_tflops_per_gpu, 1),
        "mfu": round(perf.mfu, 4),
        "model_flops_per_step": perf.model_flops_per_step,
        "hardware_flops_per_step": perf.hardware_flops_per_step,
        "causal_attention_halved": False,
        "bottleneck": perf.bottleneck(),
        "breakdown_s": {k: round(float(v), 4) for k, v in asdict(b).items()},
    }


def plan_dict(
    arch: ModelArch, layout: Layout, rep: MemoryReport, perf: Performance
) -> dict[str, Any]:
    """The object `check --json` and `explain --json` print (DESIGN.md section 2 keys)."""
    return {
        "fits": rep.fits,
        "memory": memory_dict(rep),
        "performance": performance_dict(perf),
        "model": model_dict(arch),
        "parallel": layout_dict(layout),
    }
