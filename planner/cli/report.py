"""Plain dictionaries for `--json` output (DESIGN.md section 2 keys). Pure: no printing."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from planner.cli import switch_notes
from planner.inputs import plan_writer, units
from planner.inputs.arch import ModelArch
from planner.inputs.hardware import GpuSpec
from planner.inputs.job_request import job_values
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, params, titan_accumulation
from planner.model.host_memory import HostMemory
from planner.model.known_gaps import optimistic
from planner.model.memory import MemoryReport, StageMemory
from planner.model.performance import Performance
from planner.model.torch_schedules import schedule_microbatches
from planner.ops import figures
from planner.ops import operations as ops
from planner.search.suggest import Infeasible
from planner.search.top_k import Candidate, SearchResult
from planner.search.twins import Row

if TYPE_CHECKING:
    from planner.search import pool_costs


def _gib(nbytes: float) -> float:
    return round(units.gib(nbytes), 3)


def layout_dict(layout: Layout) -> dict[str, Any]:
    d = asdict(layout)
    d["etp"] = layout.expert_tp
    if layout.dp_pools == 1:  # only with the data-parallel replicas across pools
        del d["dp_pools"]
    d["pipeline_layers"] = list(layout.pipeline_layers) if layout.pipeline_layers else None
    return d


def stage_dict(st: StageMemory) -> dict[str, Any]:
    pool = {"pool": st.pool, "gpu": st.gpu, "capacity_gib": _gib(st.capacity)} if st.pool else {}
    return {
        **pool,
        "stage": st.stage,
        "layers": st.layers,
        "weights_gib": _gib(st.weights),
        "grads_gib": _gib(st.grads),
        "optimizer_gib": _gib(st.optimizer),
        "activations_gib": _gib(st.activations),
        "grad_copy_gib": _gib(st.grad_copy),
        **({"validation_gib": _gib(st.validation)} if st.validation else {}),
        "other_gib": _gib(st.other),
        "total_gib": _gib(st.total),
        "allocated_gib": _gib(st.allocated),
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


def performance_dict(
    perf: Performance, sparse_attention: bool, host_issue_s: float = 0.0
) -> dict[str, Any]:
    """`performance` of the JSON; `sparse_attention`, the model's attention is DeepSeek's sparse
    attention, whose model FLOPs (Megatron-LM's count) are still dense causal attention's: its
    MFU can pass 100% at long context (`sparse_attention_counted_dense`)."""
    b = perf.breakdown
    return {
        "step_time_s": round(perf.step_time_s, 4),
        "tokens_per_s_per_gpu": round(perf.tokens_per_s_per_gpu, 1),
        "model_tflops_per_gpu": round(perf.model_tflops_per_gpu, 1),
        "mfu": round(perf.mfu_bf16_peak, 4),  # DESIGN.md: MFU against the bf16 peak, and
        "mfu_bf16_peak": round(perf.mfu_bf16_peak, 4),  # labelled, the FP8 / FP4 peaks
        "mfu_fp8_peak": None if perf.mfu_fp8_peak is None else round(perf.mfu_fp8_peak, 4),
        "mfu_fp4_peak": None if perf.mfu_fp4_peak is None else round(perf.mfu_fp4_peak, 4),
        "model_flops_per_step": perf.model_flops_per_step,
        "hardware_flops_per_step": perf.hardware_flops_per_step,
        "causal_attention_halved": False,
        "sparse_attention_counted_dense": sparse_attention,
        "bottleneck": perf.bottleneck(host_issue_s),
        "host_issue_s": round(host_issue_s, 4),
        "breakdown_s": {k: round(float(v), 4) for k, v in asdict(b).items()},
        "stages": [
            {"stage": r, "forward_s": round(f, 6), "backward_s": round(bw, 6)}
            for r, (f, bw) in enumerate(perf.stages)
        ],
    }


def host_dict(host: HostMemory) -> dict[str, Any]:
    """`memory.host`: what a GPU's process pins for offloading and for staging its checkpoint
    saves (`planner.model.host_memory`), against its share of the node's host memory less the
    process's reserve."""
    return {
        "activations_gib": _gib(host.activations),
        "optimizer_gib": _gib(host.optimizer),
        "checkpoint_staging_gib": _gib(host.checkpoint),
        "total_gib": _gib(host.total),
        "capacity_gib": _gib(host.capacity),
        "share_gib": _gib(host.share),
        "share_assumed": host.assumed,
        "fits": host.fits,
    }


def plan_dict(
    arch: ModelArch,
    layout: Layout,
    rep: MemoryReport,
    perf: Performance,
    host: HostMemory,
    host_issue_s: float = 0.0,
) -> dict[str, Any]:
    """The object `check --json` and `explain --json` print (DESIGN.md section 2 keys); `fits`
    needs both the GPU's memory and the host's (`memory.host`); `host_issue_s`, the seconds the
    host's eager kernel issue adds to the step (`switch_notes.host_seconds`), which
    `performance.bottleneck` weighs."""
    return {
        "fits": rep.fits and host.fits,
        "memory": {**memory_dict(rep), "host": host_dict(host)},
        "performance": performance_dict(perf, arch.has_dsa, host_issue_s),
        "model": model_dict(arch),
        "parallel": layout_dict(layout),
    }


def operations_dict(o: ops.Operations) -> dict[str, Any]:
    """`explain --tokens ... --json`'s `operations` object, as `scale --json` prints it
    (`planner.ops.figures.operations_dict`: six significant digits, no figure that is not zero
    printed as 0.0)."""
    return figures.operations_dict(o)


def _parallel(job: Job, lay: Layout) -> dict[str, Any]:
    """The resolved layout (every field of `Layout`, the split as a plan spells it:
    `plan_writer.spelled`), with its micro-batches: not a `[parallel]` table (`plan_parallel`
    is)."""
    d = layout_dict(plan_writer.spelled(job, lay))
    d["num_microbatches"] = lay.num_microbatches(job.global_batch_size)
    # the pipeline schedules a step runs them in (torchtitan's gradient accumulation under
    # pipelining: `model.titan_accumulation`), each of `microbatches_per_schedule`
    d["pipeline_schedules"] = titan_accumulation.steps(job) if lay.pp > 1 else 1
    d["microbatches_per_schedule"] = schedule_microbatches(job, lay)
    return d


def plan_parallel(job: Job, lay: Layout) -> dict[str, Any]:
    """The `[parallel]` table `--write-plan` writes for the layout (`plan_writer.parallel_table`,
    the lines it leaves out dropped): any row, copied into a plan, checks as it was scored."""
    return {k: v for k, v in plan_writer.parallel_table(job, lay).items() if v is not None}


def candidate_dict(job: Job, c: Candidate, twins: tuple[Candidate, ...] = ()) -> dict[str, Any]:
    """A plan_dict plus `parallel.num_microbatches`, `plan_parallel` (the row as a plan's
    `[parallel]` table), `performance.optimistic` (the layout is in a regime where measured
    steps ran well behind the model: known_gaps.optimistic) and `equivalents`: the layouts
    folded into this one (planner.search.twins.Row), each as its `parallel` and
    `memory.peak_gib`."""
    host = host_memory.estimate(job, c.layout)
    issue = switch_notes.host_seconds(job, c.layout)
    d = plan_dict(job.arch, c.layout, c.memory, c.performance, host, issue)
    d["parallel"] = _parallel(job, c.layout)
    d["plan_parallel"] = plan_parallel(job, c.layout)
    d["performance"]["optimistic"] = optimistic(job, c.layout)
    titan = getattr(c, "titan", None)  # a torchtitan search's settings (titan_variants)
    if titan is not None:
        d["torchtitan"] = titan.model_dump()
    d["equivalents"] = [
        {"parallel": _parallel(job, t.layout), "memory": {"peak_gib": _gib(t.memory.peak)}}
        for t in twins
    ]
    return d


def job_dict(job: Job, defaulted: tuple[str, ...] = ()) -> dict[str, Any]:
    """The job suggest planned (its framework too: a torchtitan job's candidates read
    differently); `defaulted`: its fields neither a job file nor a flag set."""
    return {**job_values(job), "framework": job.framework, "defaulted": list(defaulted)}


def suggest_dict(
    job: Job,
    res: SearchResult,
    rows: list[Row[Candidate]] | None = None,
    defaulted: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`suggest --json`: the candidates (with the twins `rows` folded into each; the first with
    `notes`, the notes the text gives it, each as explain's `notes` words it), the job (with
    `defaulted`: the fields neither a job file nor a flag set) and the search's counts."""
    twins = [r.equivalents for r in rows] if rows is not None else [()] * len(res.candidates)
    candidates = [candidate_dict(job, c, t) for c, t in zip(res.candidates, twins, strict=True)]
    if res.candidates and not job.pools:  # the notes the text gives #1, as explain's `notes`
        from planner.cli import explain_notes  # suggest's alone: check does not load it

        top = res.candidates[0]
        notes = explain_notes.first_pick_notes(
            job, top.layout, top.performance, top.memory.headroom_pct
        )
        candidates[0]["notes"] = [note for _, note in notes]
    return {
        "candidates": candidates,
        "job": job_dict(job, defaulted),
        "search": {
            "space_size": res.space_size,
            "structures": res.structures,
            "expanded": res.expanded,
            "scored": res.scored,
            "certified": True,  # the search always stops on a certified bound
            "seconds": round(res.seconds, 3),
            "rejected": dict(res.rejected),
        },
    }


def infeasible_dict(
    why: Infeasible, res: SearchResult, job: Job | None = None, defaulted: tuple[str, ...] = ()
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "candidates": [],
        "binding": why.binding,
        "changes": why.changes,
        "search": {"space_size": res.space_size, "rejected": dict(res.rejected)},
    }
    if job is not None:
        d["job"] = job_dict(job, defaulted)
    return d


def slow_link_dict(link: pool_costs.SlowLink) -> dict[str, Any]:
    """JSON `performance.between_pools`: the link between pools' part of the step."""
    if link.data_parallel_s is not None:  # the data-parallel replicas span the pools
        return {
            "crossing": "data-parallel gradient all-reduce",
            "data_parallel_on_link_s": round(link.data_parallel_s, 4),
            "step_time_added_s": round(link.added_s, 4),
            "share": round(link.share, 4),
        }
    return {
        "hop_ms": round(link.hop_s * 1e3, 3),
        "crossings": link.crossings,
        "step_time_added_s": round(link.added_s, 4),
        "share": round(link.share, 4),
    }


def slow_link_text(link: pool_costs.SlowLink) -> str:
    """explain's line on the link between pools (a change that rounds away as 0, not -0)."""
    added = f"it adds {units.shown(link.added_s * 1e3, 0):,.0f} ms per step over the pools' own "
    added += f"link ({units.shown(link.share, 3):.1%} of the step)"
    if link.data_parallel_s is not None:
        return (
            "link between pools: the data-parallel replicas span the pools (one distributed-"
            "optimizer instance per pool); only the gradient all-reduce between the instances "
            f"crosses, {link.data_parallel_s * 1e3:,.0f} ms per step on the link (the stage "
            f"that spends the most there, hidden or not); {added}; the pipeline and the TP, CP "
            "and EP groups stay inside each pool"
        )
    return (
        f"link between pools: {link.crossings} crossing(s) of {link.hop_s * 1e3:,.1f} ms per "
        f"message each way; {added}; TP, CP, EP and DP groups stay inside each pool (a stage "
        "is tp x cp x dp consecutive ranks), only pipeline sends cross"
    )
