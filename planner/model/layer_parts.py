"""What a decoder layer's core (`layer_time._core`) computes that no token dispatcher reaches:
its linear GEMMs (`linear_time.linear_times`), its core attention (`attention_time`) and its
saved-activation bytes (`activation_bytes`), at the layer's routing load. The dispatchers change
the core only through the load (HybridEP's rank budget, `routing_load.rank_budget`), the token
permutations (`moe_time`) and the small kernels (`host.kernels`): layouts that differ only in
their dispatcher share these parts (`PARTS`, keyed by `parts_key`)."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations, attention_time, dsa, dsa_time, fp32, moe_activations
from planner.model.attention_time import Core
from planner.model.gemm import Gpu
from planner.model.job_memo import JobMemo
from planner.model.linear_time import LinearTimes, linear_times
from planner.model.ring_balance import ring_skew
from planner.model.shard import Shard

DISPATCHER_FIELDS = (
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "moe_flex_dispatcher_num_sms",
)
"""The layout fields that choose and size the token dispatcher: `parts` reads none of them (the
load, which HybridEP's budget may cap, is passed in and in the key)."""


class Parts(NamedTuple):
    """A layer's linear GEMMs (`linear_times`), its core attention's forward, backward and FP8
    quantisation seconds (0 without an attention mixer, and without flash attention outside
    fp32 training: `attention_time.core_timed`), and its saved and streamed activation bytes
    (`activation_bytes`)."""

    lin: LinearTimes
    attn_fwd: float
    attn_bwd: float
    attn_quant: float
    act_bytes: float
    ew_bytes: float


PARTS: JobMemo[tuple[object, ...], Parts] = JobMemo()
"""`parts` per job and `parts_key` (`layer_time` reads it where the caller remembers the layer
cores; cleared with them by `stage_time.LAYER_TIMES`)."""


ATTENTION_CORES: JobMemo[tuple[object, ...], Core] = JobMemo()
"""`attention_time.core_attention` per job and what it reads besides the job (`parts`' callers
that remember the parts remember these too, cleared with them by `stage_time.LAYER_TIMES`): the
layouts whose parts differ, in their expert degrees, pipeline or data-parallel size, mostly run
the same attention (a few dozen kernels over the thousands of parts the search makes)."""


def parts(
    job: Job,
    lay: Layout,
    gpu: Gpu,
    kind: LayerKind,
    t: float,
    load: float,
    efficiency: float,
    attention: dict[tuple[object, ...], Core] | None = None,
) -> Parts:
    """The layer's dispatcher-free parts for `t` tokens at routing `load`, its attention at
    `efficiency` (`layer_time.ATTENTION_EFFICIENCY`); the attention kernel from `attention`
    (`ATTENTION_CORES.of(job)`) where the caller gives it."""
    lin = linear_times(job, lay, gpu, kind, t, load)
    attn_fwd = attn_bwd = quant = 0.0
    if kind.mixer == "attention" and job.arch.has_dsa:  # sparse attention and its indexer
        sparse = dsa_time.core_time(job, gpu, t, job.seq_length, lay.tp, efficiency)
        attn_fwd, attn_bwd = sparse.fwd, sparse.bwd
    elif kind.mixer == "attention" and attention_time.core_timed(job):
        arch = job.arch
        window = arch.window_size if kind.window else None
        s = job.seq_length
        key = (gpu, t, s, lay.tp, efficiency, window)
        core = None if attention is None else attention.get(key)
        if core is None:
            core = attention_time.core_attention(job, gpu, t, s, lay.tp, efficiency, window)
            if attention is not None:
                attention[key] = core
        quant = core.quant
        skew = ring_skew(job, lay)  # CP without causal load balancing: the last rank's share
        attn_fwd, attn_bwd = skew * core.fwd, skew * core.bwd
    act_bytes, ew_bytes = activation_bytes(job, lay, kind, load)
    return Parts(lin, attn_fwd, attn_bwd, quant, act_bytes, ew_bytes)


def activation_bytes(job: Job, lay: Layout, kind: LayerKind, load: float) -> tuple[float, float]:
    """(saved, streamed): the saved-activation bytes of one layer per micro-batch
    (planner.model.activations, with fused norms, flash attention and bf16 inputs: the
    unfused-norm, s^2 and FP8 traffic are added apart; in fp32 training fp32 values and the
    unfused attention's s^2 scores, as memory counts them: `fp32.value_bytes`), and of them the
    proxy for the memory traffic of its elementwise kernels: all but a MoE layer's routed-expert
    input (`moe_activations.expert_input_bytes`), which only the token permutation writes and
    reads (`moe_time.permute_time` prices it; counting it here too priced it twice), and fp32's
    scores (`fp32.SCORE_BYTES` each), which `attention_time.unfused_fp32` streams with the
    attention. A MoE layer's routed pairs at `load`, the step's (`routing_load.step_load`, as its
    GEMMs and permutations), not memory's planning bound."""
    s_local = job.seq_length // lay.cp
    in_fp32 = job.params_dtype == "fp32"  # 4-byte values (`fp32.word`), unfused attention
    sh = Shard(
        tokens=s_local * lay.micro_batch_size,
        tp=lay.tp,
        sequence_parallel=lay.sequence_parallel,
        etp=lay.expert_tp,
        seq_per_cp_rank=s_local,
        seq_length=job.seq_length,  # the cp the mixers' widths read (`activations.cp_of`)
        micro_batch_size=lay.micro_batch_size,
        moe_load=load,
        linear_bytes=fp32.value_bytes(job),
        value_bytes=fp32.value_bytes(job),
        flash_attention=not in_fp32,
        attention_dropout=job.attention_dropout,  # (these three read only without flash attention)
        unfused_attention=job.unfused_attention,
        masked_softmax_fusion=job.masked_softmax_fusion,
        # TE's fused grouped MLP clamps gpt-oss's GLU inside its op (`moe_activations.clamp_widths`)
        te_grouped_mlp=job.moe_fused_grouped_mlp and job.framework == "megatron",
    )
    if job.arch.has_dsa:
        sh = replace(sh, **dsa.shard_fields(job, lay.tp))
    saved = activations.layer_bytes(job.arch, kind, sh, recompute=False)
    permuted = moe_activations.expert_input_bytes(job.arch, sh) if kind.moe else 0.0
    if kind.mixer == "attention" and job.arch.has_dsa:  # timed by dsa_time with the scores
        permuted += dsa.scores_kept(job.arch, sh)
    if kind.mixer == "attention" and in_fp32:  # streamed by unfused_fp32 (its dropout's not)
        heads = job.arch.num_attention_heads
        permuted += fp32.score_bytes(heads, s_local, lay.micro_batch_size, False) / lay.tp
    return saved, saved - permuted
