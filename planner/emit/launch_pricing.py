"""The plan as each launch target runs it (`planner.emit.launch`), so that a launched file's
header predicts the job it starts: what Megatron-LM and Megatron-Bridge have no switch for or run
otherwise than the plan names is set as they run it, and said in the file's notes
(`Plan.launch_notes`); `check` and `suggest` say the same (`megatron_lm_launched_note`,
`bridge_launched_note`). torchtitan's kernels and dropout, which its targets have no setting for,
likewise (`planner.emit.torchtitan_kernels`)."""

from __future__ import annotations

from dataclasses import replace

from planner.emit import megatron
from planner.emit.prediction import HEADROOM
from planner.emit.torchtitan_kernels import TORCHTITAN_TARGETS, torchtitan_launched
from planner.inputs.errors import InputError
from planner.inputs.job import Job
from planner.inputs.plan import Plan
from planner.inputs.units import against, gib_text, over
from planner.model import adam_step, cost, memory
from planner.search.rules import graphs

FLAGLESS = (
    ("fused_norm", True, "runs Megatron-Core's fused norms"),
    ("sp_keeps_gathered_input", False, "re-gathers the sequence-parallel input in backward"),
    (
        "tp_backward_overlap",
        True,
        "overlaps its column-parallel backward's TP collectives with the dgrad and wgrad GEMMs",
    ),
)
"""The flagless training-code choices (`megatron.unflagged`): (the Job field, the value
Megatron-Core runs, what the launched job then does, in words)."""


def core_launched(plan: Plan) -> tuple[Job, tuple[str, ...], tuple[str, ...]]:
    """(the job as Megatron-Core runs it, the notes saying so, the plan settings that plan it):
    the training-code choices neither Megatron-LM nor Megatron-Bridge has a switch for
    (`megatron.unflagged`) are launched as Megatron-Core runs them: its fused norms
    (fused_norm), its sequence-parallel backward that re-gathers its input
    (sp_keeps_gathered_input), its column-parallel backward that overlaps the TP collectives
    with the GEMMs (tp_backward_overlap), its vocab-parallel cross entropy over the local logits
    (cross_entropy "pytorch" / "gathered"; `Job.megatron_loss` then says which of its kernels
    the target writes). (PyTorch's per-op recompute policy has no Megatron flag either, but the
    rules refuse it before any launch: `rules.selective_policy`, which `launch` checks first.)"""
    job = plan.job
    changed: dict[str, object] = {}
    notes, settings = [], []
    for field, launched, runs in FLAGLESS:
        if getattr(job, field) != launched:
            changed[field] = launched
            settings.append(f"{field} = {str(launched).lower()}")
            notes.append(
                f"training.{field} = {str(not launched).lower()} has no Megatron flag: this job "
                f"{runs}, as planner launch predicts it"
            )
    if job.cross_entropy != "fused":
        changed["cross_entropy"] = "fused"  # its note: `cross_entropy_note`, once the loss is set
        settings.append('cross_entropy = "fused"')
    if not changed:
        return job, (), ()
    return replace(job, **changed), tuple(notes), tuple(settings)  # type: ignore[arg-type]


LOSS_KERNELS = {
    "native": "its compiled fused kernel (cross-entropy loss fusion, impl native)",
    "te": "Transformer Engine's fused kernel (cross-entropy loss fusion, impl te)",
    "unfused": "its unfused kernel (no cross-entropy loss fusion)",
}
"""`Job.megatron_loss` -> the vocab-parallel cross entropy a launched job runs, in words."""


def cross_entropy_note(plan: Plan, run: Job) -> tuple[str, ...]:
    """The note for a plan whose cross_entropy ("pytorch", "gathered") no Megatron target has a
    switch for, naming the loss `run` (the launched job) runs; () where the plan's is fused."""
    if plan.job.cross_entropy == "fused" or run.megatron_loss is None:
        return ()
    return (
        f"training.cross_entropy = {plan.job.cross_entropy!r} has no Megatron flag: this job "
        f"runs Megatron's vocab-parallel cross entropy, {LOSS_KERNELS[run.megatron_loss]}, as "
        "planner launch predicts it",
    )


POOL_TARGETS = ("slurm", "torchrun", "megatron-args")
"""The targets that launch a plan over pools (planner.emit.pools)."""

MEGATRON_LM_TARGETS = ("megatron-args", "torchrun", "slurm", "k8s")
"""The targets that run Megatron-LM's own pretrain_gpt.py (d98e8a64)."""


def megatron_lm_launched(plan: Plan, target: str, headroom_pct: float = HEADROOM) -> Plan:
    """The plan as a Megatron-LM target launches it, so that the file's header predicts the
    run it starts.

    - FP8 attention: Megatron-LM d98e8a64 has no flag for it (TransformerConfig's
      fp8_dot_product_attention is left out of its command line, arguments.py:2333), so the
      attention runs in bf16; the plan is launched with `fp8_attention` off, said in the file's
      notes (`Plan.launch_notes`).
    - The loss: Megatron-LM refuses Transformer Engine's fused cross entropy (arguments.py asserts
      `--cross-entropy-loss-fusion` off with `--cross-entropy-fusion-impl te`: "disabled due to
      stability issues"; the Megatron-Core that Megatron-Bridge pins only warns). A plan timed
      with it (`Job.megatron_loss` "te", the default fused loss) is launched with Megatron-LM's
      compiled native fusion where that still fits (it holds one more fp32 copy of the local
      logits: `training.compiled_loss_fusion`), else with its unfused loss (no flag: TE's
      memory, twice its HBM traffic per logit); "fits" at `headroom_pct`, the headroom the
      plan was ranked and is checked with."""
    if target not in MEGATRON_LM_TARGETS:
        return plan
    job, core, _ = core_launched(plan)
    notes = (*plan.launch_notes, *core)
    if job.fp8_attention:
        job, notes = replace(job, fp8_attention=False), (*notes, megatron.FP8_ATTENTION_NOTE)
    if job.megatron_loss == "te":
        native = replace(job, compiled_loss_fusion=True)
        fits = memory.estimate(native, plan.require_layout(), headroom_pct).fits
        job = native if fits else replace(job, loss_fusion=False)
    notes = (*notes, *cross_entropy_note(plan, job))
    return plan if job is plan.job else replace(plan, job=job, launch_notes=notes)


BRIDGE_OPTIMIZER_NOTE = (
    'Megatron-Bridge\'s bf16 presets keep MixedPrecisionConfig.fp8_recipe = "tensorwise" '
    "(mixed_precision.py:50 @067f987d) and copy it onto OptimizerConfig (:138-156), so with the "
    "precision-aware optimizer Megatron-Core keeps its own fp32 master weights and copies the "
    "gradients into fp32 at the step (optimizer_config.py:407-414 @d98e8a64), where Megatron-LM "
    "keeps Transformer Engine's 16-bit remainder and reads them in place: the header predicts "
    "the former"
)


BRIDGE_GRAPHS = (
    "Megatron-Bridge captures per-layer CUDA graphs with Transformer Engine only: it raises on "
    'cuda_graph_impl "local" outside full-iteration graphs (utils/cuda_graph.py:146-154 '
    "@067f987d)"
)


def bridge_graphs(plan: Plan, job: Job) -> tuple[Job, tuple[str, ...]]:
    """(the job with the CUDA graphs Megatron-Bridge runs, the note saying so): per-layer graphs
    of the local implementation, or of none named (which the Megatron-LM targets launch as
    local), are launched as transformer_engine graphs (`BRIDGE_GRAPHS`), which capture the MoE
    router without its preprocess and then keep the pre-MLP norm's output
    (`graph_capture.keeps_pre_moe_norm`). Where Megatron-Core asserts against the launched
    graphs (`rules.graphs`: moe recompute with a captured router, transformer_config.py
    :2860-2869 @d98e8a64) the launch is refused, naming the field (InputError, exit 2)."""
    if not job.cuda_graphs or job.cuda_graph_impl in ("transformer_engine", "full_iteration"):
        return job, ()
    lay = plan.require_layout()
    run = replace(job, cuda_graph_impl="transformer_engine")
    found = graphs.module_conflict(run) or graphs.conflict(run, lay)
    if found is not None and found != (graphs.module_conflict(job) or graphs.conflict(job, lay)):
        # (what the plan's own graphs break, every target refuses: `common.cuda_graph_impl`)
        field, why = found
        raise InputError(
            f"{plan.path or '<plan>'}: {field}: {BRIDGE_GRAPHS}, and with those graphs {why}; "
            "launch with a Megatron-LM target (--target torchrun, megatron-args, slurm, k8s), "
            "which writes --cuda-graph-impl local"
        )
    named = repr(job.cuda_graph_impl) if job.cuda_graph_impl else "unset"
    note = (
        f"training.cuda_graph_impl {named}: {BRIDGE_GRAPHS}; this job runs transformer_engine "
        "graphs, as planner launch predicts it"
    )
    return run, (note,)


def bridge_launched(plan: Plan) -> Plan:
    """The plan as Megatron-Bridge launches it: its bf16 and bf16-with-NVFP4 presets give the
    optimizer fp8_recipe "tensorwise" (BRIDGE_OPTIMIZER_NOTE), which turns the precision-aware
    optimizer's decoupled path off (`Job.optimizer_fp8_recipe`); the FP8 presets set the plan's
    own recipe. Per-layer CUDA graphs run as Transformer Engine's (`bridge_graphs`)."""
    job, core, _ = core_launched(plan)
    job, graphed = bridge_graphs(plan, job)
    notes = (*plan.launch_notes, *core, *cross_entropy_note(plan, job), *graphed)
    if job.precision != "fp8" and adam_step.decoupled(job) and job.main_params_dtype == "fp32":
        job, notes = (
            replace(job, optimizer_fp8_recipe="tensorwise"),
            (*notes, BRIDGE_OPTIMIZER_NOTE),
        )
    return plan if job is plan.job else replace(plan, job=job, launch_notes=notes)


def launched(plan: Plan, target: str, headroom_pct: float = HEADROOM) -> Plan:
    """The plan as `target` launches it (`megatron_lm_launched`, `bridge_launched`,
    `torchtitan_launched`), holding the job as written in `Plan.planned` where the launched one
    differs (the header's `prediction.planned_figures` prices both). Launching a launched plan
    again keeps the job first written there."""
    if target == "megatron-bridge":
        run = bridge_launched(plan)
    elif target in TORCHTITAN_TARGETS:
        run = torchtitan_launched(plan)
    else:
        run = megatron_lm_launched(plan, target, headroom_pct)
    if run is plan:
        return plan
    return replace(run, planned=plan.job if plan.planned is None else plan.planned)


def bridge_launched_note(plan: Plan, headroom_pct: float = HEADROOM) -> str | None:
    """What --target megatron-bridge changes of the plan (`bridge_launched`), with the peak it
    predicts; None where it launches the plan as it is."""
    run = bridge_launched(plan)
    if run is plan:
        return None
    lay = plan.require_layout()
    planned = memory.estimate(plan.job, lay).peak / 2**30
    return (
        "launch --target megatron-bridge predicts "
        f"{peak_text(memory.estimate(run.job, lay, headroom_pct))} "
        f"(the plan's {planned:.1f} GiB): {'; '.join(run.launch_notes[len(plan.launch_notes) :])}"
    )


def peak_text(report: memory.MemoryReport) -> str:
    """ "peak 61.2 GiB", and where it is over the usable memory ", which does not fit (77.3 GiB
    usable, 0.4 GiB over)": a launched run's peak as the notes give it, beside its capacity as
    `units.against` writes the two (never alike where they differ)."""
    if report.fits:
        return f"peak {gib_text(report.peak)} GiB"
    peak, cap = against(report.peak, report.capacity)
    return f"peak {peak} GiB, which does not fit ({cap} GiB usable, {over(report.shortfall)} over)"


def megatron_lm_launched_note(plan: Plan, headroom_pct: float = HEADROOM) -> str | None:
    """What the Megatron-LM targets (`MEGATRON_LM_TARGETS`) change of a plan
    (`megatron_lm_launched`: the loss of a plan ranked with Transformer Engine's fused cross
    entropy, FP8 attention), with the step and peak they predict, and how to plan with what they
    launch; None where they launch the plan as it is."""
    ran = megatron_lm_launched(plan, MEGATRON_LM_TARGETS[0], headroom_pct)
    if ran is plan:
        return None
    lay = plan.require_layout()
    ranked, run = cost.estimate(plan.job, lay), cost.estimate(ran.job, lay)
    peak = peak_text(memory.estimate(ran.job, lay, headroom_pct))
    targets = [t for t in MEGATRON_LM_TARGETS if not plan.job.pools or t in POOL_TARGETS]
    _, core, core_settings = core_launched(plan)
    changes = [f"has no flag for {n.split(' has no Megatron flag')[0]}" for n in core]
    settings = list(core_settings)
    if plan.job.cross_entropy != "fused":
        changes.append(
            f"has no flag for training.cross_entropy = {plan.job.cross_entropy!r}: they run "
            + LOSS_KERNELS[ran.job.megatron_loss or "unfused"]
        )
        if ran.job.compiled_loss_fusion and not plan.job.compiled_loss_fusion:
            settings.append("compiled_loss_fusion = true")
        elif ran.job.megatron_loss == "unfused" and plan.job.loss_fusion:
            settings.append("loss_fusion = false")
    if plan.job.megatron_loss == "te":
        native = ran.job.compiled_loss_fusion
        changes.append(
            "refuses Transformer Engine's fused cross entropy (the loss this plan names, as "
            "Megatron-Bridge runs it): they launch "
            + ("its compiled native fusion" if native else "its unfused loss")
        )
        settings.append("compiled_loss_fusion = true" if native else "loss_fusion = false")
    if plan.job.fp8_attention:
        changes.append("has no flag for FP8 attention: they run the attention in bf16")
        settings.append("fp8_attention = false")
    return (
        f"launch --target {', '.join(targets)} run Megatron-LM, which "
        f"{'; and which '.join(changes)}; predicted step {run.step_time_s:.3f} s (the plan's "
        f"{ranked.step_time_s:.3f} s), {peak}; to plan with that, set "
        f"{' and '.join(f'training.{s}' for s in settings)} (in a job file, suggest ranks with "
        "it)"
    )
