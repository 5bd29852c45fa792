"""explain's notes under the time table: a MoE plan's routing load and what its fused grouped MLP
saves (or why it saves nothing), what a model's gated delta nets or Mamba mixers keep and run
(and its DeepSeek sparse attention, `planner.cli.explain_dsa`), what the layers kept in bf16 cost
an FP8 / NVFP4 plan, what FP8 attention saves it, what Megatron's deterministic mode costs it,
where the host's eager kernel issue floors the layers and what the shared experts' overlap would
save (with the memory either switch adds: `planner.cli.switch_notes`), what an offloaded
optimizer takes of the host and adds to the step, what deferred output-layer weight gradients
hold, where torchtitan's V schedules place the stages, and whether the plan is in a regime where
measured steps run well behind the model (`planner.model.known_gaps`); and which of them suggest
gives its first pick."""

from __future__ import annotations

from dataclasses import replace

from planner.cli.explain_attention import flex_text
from planner.cli.explain_dsa import dsa_text
from planner.cli.switch_notes import (
    SWITCH_ADVICE_SHARE,
    added,
    change_text,
    host_text,
    shared_overlap_text,
)
from planner.inputs.hybrid import ATTENTION, GDN, MAMBA
from planner.inputs.layout import Layout
from planner.inputs.moe_checks import fusable_activation
from planner.inputs.plan import Job
from planner.inputs.units import GIB, shown
from planner.model import activations as act
from planner.model import (
    attention_time,
    cost,
    determinism,
    host_memory,
    layer_time,
    memory,
    mixers,
    rank_mix,
    stage_activations,
    stage_time,
)
from planner.model.known_gaps import (
    FOLDED_MOE_GAP,
    ONE_MICRO_BATCH_GAP,
    in_folded_moe_regime,
    in_one_micro_batch_regime,
)
from planner.model.output_time import deferred_wgrad
from planner.model.performance import Performance
from planner.model.routing_load import memory_loads, rank_budget, stash_load, step_load
from planner.model.schedule import schedule_name
from planner.search.rules.fused_mlp import RULES as FUSED_MLP_RULES


def notes(
    job: Job, layout: Layout, perf: Performance, headroom_pct: float = memory.DEFAULT_HEADROOM_PCT
) -> list[str]:
    """The notes that apply to the plan, in order; the advice to switch something on
    (`planner.cli.switch_notes`) weighed at the command's `headroom_pct`."""
    texts = (
        routing_text(job, layout),
        linear_mixer_text(job, layout),
        dsa_text(job, layout),
        fused_mlp_text(job, layout, perf),
        shared_overlap_text(job, layout, perf, headroom_pct),
        bf16_layers_text(job, layout, perf),
        fp8_attention_text(job, layout, perf),
        deterministic_text(job, layout, perf),
        host_text(job, layout, perf, headroom_pct),
        optimizer_offload_text(job, layout, perf),
        deferral_text(job, layout, perf),
        v_placement_text(job, layout),
        one_micro_batch_text(job, layout),
        folded_moe_text(job, layout),
        flex_text(job, layout),
    )
    return [n for n in texts if n]


def first_pick_notes(
    job: Job, layout: Layout, perf: Performance, headroom_pct: float
) -> list[tuple[str, str]]:
    """(lead, note) of the notes suggest gives its first pick, in order, each as explain gives
    it: the host-bound, one-micro-batch and folded-MoE notes ("#1 is"), and the shared experts'
    overlap suggest leaves off, as NVIDIA's recipes do ("#1:")."""
    texts = (
        ("#1 is", host_text(job, layout, perf, headroom_pct)),
        ("#1 is", one_micro_batch_text(job, layout)),
        ("#1 is", folded_moe_text(job, layout)),
        ("#1:", shared_overlap_text(job, layout, perf, headroom_pct)),
    )
    return [(lead, n) for lead, n in texts if n]


def routing_text(job: Job, layout: Layout) -> str | None:
    """A MoE plan's routing load: how many routed tokens the busiest expert-parallel rank runs
    per layer over its even share in the step time (`routing_load.step_load`), and in memory
    (`routing_load.memory_loads`: HybridEP's budget, the paged stash)."""
    if not job.arch.is_moe:
        return None
    load, (kept, working) = step_load(job, layout), memory_loads(job, layout)
    if layout.ep <= 1:
        why = "one expert-parallel rank: each runs its own tokens' copies"
    elif job.moe_router_force_load_balancing and job.framework == "torchtitan":
        why = (
            "forced balance, torchtitan's round robin: exact shares, remainders on the first ranks"
        )
    elif job.moe_router_force_load_balancing:
        why = "forced balance, random routing: sampling noise only"
    else:
        experts = job.arch.num_moe_experts or 1
        why = (
            f"learned routing: the busiest of {layout.ep} ranks of {experts // layout.ep:g} "
            "experts, each expert's load spread about its share"
        )
    if job.moe_expert_capacity_factor is not None:
        why += f", capacity factor {job.moe_expert_capacity_factor:g}"
    budget = rank_budget(job, layout)
    if budget is not None:
        why += f", HybridEP's budget {budget:g} drops beyond it"
        uncapped = step_load(replace(job, moe_expert_rank_capacity_factor=None), layout)
        if uncapped > budget:  # the busiest rank's expected copies exceed the budget
            why += f": about {1 - budget / uncapped:.0%} of that rank's copies every layer"
    text = (
        f"MoE routing: the busiest expert-parallel rank runs {load:.3f}x its share in the step "
        f"time ({why}), {kept:.2f}x in memory"
    )
    if budget is not None and job.moe_paged_stash:
        whose = (
            "the paged stash's"
            if kept <= stash_load(job, budget)
            else "the dropless load a step that overflows the paged stash reruns at"
        )
        running = "the budget's" if working <= budget else "the rerun's"
        return f"{text} ({whose}; the layer running holds {working:.2f}x, {running})"
    return f"{text} (the budget's rows)" if budget is not None else text


MIXER_NAMES = {"gdn": "a gated delta net", "mamba": "a Mamba-2 mixer"}


def linear_mixer_text(job: Job, layout: Layout) -> str | None:
    """A model with linear-time mixers (`planner.model.mixers`): how many of its layers mix with
    one, what the mixer's block keeps per token on a GPU against an attention block's, and what
    its chunked kernels run per micro-batch."""
    arch = job.arch
    found = [(k, mixers.of(k)) for k in arch.layer_kinds]
    linear = [(k, m) for k, m in found if m is not None]
    if not linear:
        return None
    kind, module = linear[0]
    assert kind.mixer is not None and module is not None
    sh = stage_activations.shard(job, layout)
    alone = {"gdn": GDN, "mamba": MAMBA}[kind.mixer]  # the mixer's block alone, recompute applied
    per_token = act.layer_bytes(arch, alone, sh) / sh.tokens
    fwd, bwd = module.scan_time(arch, layer_time.gpu_of(job), sh.tokens, layout.tp)
    text = (
        f"{len(linear)} of {arch.num_layers} layers mix with {MIXER_NAMES[kind.mixer]}: its block "
        f"keeps {per_token / 1e3:.1f} kB a token on each GPU"
    )
    if any(k.mixer == "attention" for k in arch.layer_kinds):
        text += (
            f" (an attention block {act.layer_bytes(arch, ATTENTION, sh) / sh.tokens / 1e3:.1f})"
        )
    return text + (
        f", and its chunked kernels run {fwd * 1e3:.2f} + {bwd * 1e3:.2f} ms forward and "
        "backward per micro-batch"
    )


def fused_mlp_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """A MoE plan with `moe_fused_grouped_mlp`: the seconds per step its fused kernels save
    (`moe_time.fused_mlp_saving`), or, where they do not run (`Job.grouped_mlp_fused`), that
    the experts are timed unfused and why. A Megatron MoE plan without it whose layout allows it
    (`planner.search.rules.fused_mlp`) and whose kernels would run: what turning it on would save,
    from SWITCH_ADVICE_SHARE of the step."""
    if not job.moe_fused_grouped_mlp:
        return _fused_mlp_advice(job, layout, perf)
    if not job.grouped_mlp_fused:
        gpu, lacks = job.cluster.gpu, []
        if not gpu.is_blackwell:
            lacks.append(f"a Blackwell GPU (it runs on {gpu.name})")
        if not (job.quantised and job.quant_recipe in ("mxfp8", "nvfp4")):
            lacks.append('fp8_recipe "mxfp8" or precision "fp4"')
        return (
            "fused grouped MLP: Transformer Engine fuses the experts' MLP only on Blackwell "
            f"with MXFP8 or NVFP4; this plan lacks {' and '.join(lacks)}, so its experts are "
            "timed unfused"
        )
    saved = -added(perf, replace(job, moe_fused_grouped_mlp=False), layout)
    return (
        "fused grouped MLP: the experts' activation and quantisation in the GEMM epilogues "
        + saving_text(saved, perf.step_time_s, "unfused")
    )


def saving_text(saved: float, step_s: float, without: str) -> str:
    """ "save S s of the T s step `without`", or, where the feature saves less than the
    thousandth of a second the notes print (or costs time), that it saves nothing here with
    both steps (not "save -0.000 s")."""
    if round(saved, 3) > 0:
        return f"save {saved:.3f} s of the {step_s + saved:.3f} s step {without}"
    return f"save nothing here (the step takes {step_s:.3f} s, {step_s + saved:.3f} s {without})"


def _fused_mlp_advice(job: Job, layout: Layout, perf: Performance) -> str | None:
    """`fused_mlp_text` for a plan without the fused grouped MLP."""
    fused = replace(job, moe_fused_grouped_mlp=True)
    usable = job.framework == "megatron" and job.arch.is_moe and fusable_activation(job.arch)
    refused = any(rule(fused, layout) for rule in FUSED_MLP_RULES)
    if not usable or not fused.grouped_mlp_fused or refused:
        return None
    saved = added(perf, fused, layout)
    if saved < SWITCH_ADVICE_SHARE * perf.step_time_s:
        return None
    flags = "--use-transformer-engine-op-fuser"
    if job.arch.gated_linear_unit:
        flags += " --moe-mlp-glu-interleave-size 32"
    return (
        f"fused grouped MLP: off; training.moe_fused_grouped_mlp = true (Megatron {flags}) would "
        f"save {saved:.3f} s of the {perf.step_time_s:.3f} s step"
    )


def bf16_layers_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """An FP8 / NVFP4 plan's decoder layers kept in bf16 (`planner.model.bf16_layers`): how many,
    and the seconds per step they add over running them in the plan's precision."""
    start, end = job.bf16_layers_at_start, job.bf16_layers_at_end
    if not job.quantised or not (start or end):
        return None
    extra = added(perf, replace(job, bf16_layers_at_start=0, bf16_layers_at_end=0), layout)
    which = " and ".join(f"{side} {n}" for side, n in (("first", start), ("last", end)) if n)
    return (
        f"bf16 layers: the {which} decoder layers run in bf16 (--first-last-layers-bf16), "
        f"{change_text(extra, perf.step_time_s)} against {job.precision} everywhere"
    )


def fp8_attention_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """An FP8 / NVFP4 plan with FP8 attention: the seconds per step it saves over bf16 attention,
    and whether the forward kernel then waits on the GPU's exponential units or on the softmax's
    CUDA-core work (`planner.model.attention_time`), which FP8 does not speed up."""
    if not job.attention_in_fp8:
        return None
    saved = -added(perf, replace(job, fp8_attention=False), layout)
    t = layout.micro_batch_size * job.seq_length / layout.cp
    gpu = layer_time.gpu_of(job)
    core = attention_time.core_attention(
        job, gpu, t, job.seq_length, layout.tp, layer_time.ATTENTION_EFFICIENCY
    )
    text = "FP8 attention: the fused attention's matmuls in FP8 " + saving_text(
        saved, perf.step_time_s, "with bf16 attention"
    )
    if core.exp_bound:
        rate = job.cluster.gpu.exp_tera_per_s
        text += (
            f"; its forward waits on the exponential units ({rate:g} x 10^12/s on "
            f"{job.cluster.gpu.name}), which FP8 does not speed up"
        )
    elif core.alu_bound:
        text += (
            "; its forward waits on the softmax's FP32 work on the CUDA cores "
            f"({job.cluster.gpu.peak_tflops_fp32:g} TFLOP/s on {job.cluster.gpu.name}), which "
            "FP8 does not speed up"
        )
    return text


def deterministic_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """A plan in Megatron's deterministic mode (`planner.model.determinism`: the allocation fills'
    host operations and HBM writes, the deterministic attention backward): the seconds per step
    it adds over the same plan without it. torchtitan's mode is not priced: no note."""
    if not determinism.fills(job):
        return None
    extra = added(perf, replace(job, deterministic=False), layout)
    change = change_text(extra, perf.step_time_s, "add", "save", share=True)
    return (
        "deterministic mode: the allocation fills (host operations, HBM writes) and the "
        f"deterministic attention backward {change} against the same plan without "
        "--deterministic-mode"
    )


def optimizer_offload_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """A plan with the optimizer offloaded to the CPU (`planner.model.optimizer_offload`): the
    host memory it takes per GPU and per node (`host_memory.by_pool`: the busiest GPU's; on pools
    the pool whose nodes hold the most, with its own node size), the GPU memory it frees and the
    seconds per step it adds, both against the same plan with the optimizer on the GPU in the
    plan's moment dtype (without --optimizer-cpu-offload, --exp-avg-dtype bf16 reaches the GPU's
    Adam). The host's moments are fp32 whatever the plan's dtype: Megatron-LM d98e8a64 builds
    the host optimizer as torch AdamW (optimizer/__init__.py:11, :517-544) with no moment
    dtypes, on fp32 copies (param_update_in_fp32), whose moments are zeros_like them
    (`host_memory.HOST_OPTIMIZER_BYTES`)."""
    f = job.optimizer_offload_fraction
    if f <= 0:
        return None
    on_gpu = replace(job, optimizer_offload_fraction=0.0)
    h = max(host_memory.by_pool(job, layout), key=lambda h: h.optimizer * h.per_node)
    where = f" on pool {h.pool!r}" if h.pool else ""
    freed = memory.estimate(on_gpu, layout).peak - memory.estimate(job, layout).peak
    extra = added(perf, on_gpu, layout)
    moments = "moments"
    if job.optimizer_state_dtype != "fp32":
        moments = (
            f"moments in fp32 (the plan's {job.optimizer_state_dtype} moments do not reach "
            "Megatron's host optimizer)"
        )
    return (
        f"optimizer offloaded ({f:.0%} of it): {h.optimizer / GIB:.1f} GiB of pinned host memory"
        f" a GPU{where} ({h.optimizer * h.per_node / GIB:.0f} GiB a node of {h.per_node}) hold"
        f" its fp32 master, {moments} and gradient copy; it frees {freed / GIB:.1f} GiB at the "
        f"peak and its CPU update {change_text(extra, perf.step_time_s, 'adds', 'saves')} "
        f"against the optimizer on the GPU{_moments_on_gpu(job)}"
    )


def _moments_on_gpu(job: Job) -> str:
    """How the comparison's GPU optimizer keeps its moments, where not in fp32."""
    dtype = job.optimizer_state_dtype
    return "" if dtype == "fp32" else f" with {dtype} moments"


def one_micro_batch_text(job: Job, layout: Layout) -> str | None:
    """A plan with one micro-batch per step, tp > 1 or ep > 1, and at most ONE_MICRO_BATCH_TOKENS
    tokens per GPU per micro-batch: the regime where the MLPerf runs measured ONE_MICRO_BATCH_GAP
    longer steps than the model predicts (a caveat: the estimate is optimistic there, and no term
    of the model stands for the gap)."""
    if not in_one_micro_batch_regime(job, layout):
        return None
    parallel = ", ".join(f"{k} {v}" for k, v in (("tp", layout.tp), ("ep", layout.ep)) if v > 1)
    return (
        f"optimistic: one micro-batch per step with {parallel}; MLPerf runs of this kind "
        f"measured a median {ONE_MICRO_BATCH_GAP:.0%} longer steps than this model predicts "
        "(those with tp 1 and ep 1 matched it), so read the step time as a lower bound; more "
        "micro-batches per step, or more tokens per GPU, leave the regime"
    )


def deferral_text(job: Job, layout: Layout, perf: Performance) -> str | None:
    """A plan that defers the output layer's weight gradients to the pipeline flush
    (`Layout.defer_embedding_wgrad_compute`): what the last stage holds for them, its memory
    against the same plan without (`loss_activations.deferred_wgrad_bytes`, counted in the
    table), the GEMM seconds the flush runs (`output_time.deferred_wgrad`) and the step against
    the same plan without (`cost`: the last stage's backwards lose them, the flush shows what
    outlasts the other stages' cooldown)."""
    if not layout.defer_embedding_wgrad_compute:
        return None
    plain_layout = layout.with_(defer_embedding_wgrad_compute=False)
    held = memory.estimate(job, layout).stages[-1].total
    plain = memory.estimate(job, plain_layout).stages[-1]
    limit = layout.wgrad_deferral_limit or "every call"
    times, last = stage_time.layout_times(job, layout), layout.pp - 1
    chunks = layout.chunk_layers(job.arch.num_layers)[last]
    calls = rank_mix.rank_layers(job, layout, last, chunks, times)[1]  # its output layers
    flush = deferred_wgrad(job, layout, times.gpu, times.m, calls)
    change = perf.step_time_s / cost.estimate(job, plain_layout).step_time_s
    return (
        f"deferred output-layer weight gradients (limit {limit}): the last stage holds each "
        f"deferred call's input and logits gradient until the pipeline flush, "
        f"{(held - plain.total) / GIB:.2f} GiB of its {held / GIB:.1f} GiB; the flush runs "
        f"their {flush * 1e3:.1f} ms of GEMMs per step, the step {shown(change - 1, 3):+.1%} "
        "against the same plan without"
    )


def v_placement_text(job: Job, layout: Layout) -> str | None:
    """torchtitan's V schedules (`Layout.v_stages`): rank r holds stages r and 2 pp - 1 - r, so
    rank 0 the embedding, the output layer and the loss, as the table counts them."""
    if not layout.v_stages or layout.pp == 1:
        return None
    last = 2 * layout.pp - 1
    per_rank = "/".join(map(str, layout.stage_layers(job.arch.num_layers)))
    return (
        f"{schedule_name(job, layout)} places stages r and {last} - r on rank r: rank 0 holds "
        f"stages 0 and {last}, the embedding, the output layer and the loss; decoder layers per "
        f"rank {per_rank}"
    )


def folded_moe_text(job: Job, layout: Layout) -> str | None:
    """A Megatron MoE plan whose attention is tensor-parallel over experts that are not (tp > 1,
    expert tp 1, ep > 1): the regime where measured runs took FOLDED_MOE_GAP longer steps than the
    model predicts (a caveat, as `one_micro_batch_text`)."""
    if not in_folded_moe_regime(job, layout):
        return None
    return (
        f"optimistic: MoE with tp {layout.tp} attention over ep {layout.ep} experts at expert tp "
        f"1; Megatron runs of this kind (DeepSeek-V3, gpt-oss, H100 to GB300) measured a median "
        f"{FOLDED_MOE_GAP:.0%} longer steps than this model predicts (MoE runs at tp 1, or with "
        "the experts split as the attention, matched it within a median 5%), so read the step "
        "time as a lower bound and weigh a tp 1 layout against it"
    )
