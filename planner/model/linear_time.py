"""A layer's linear GEMMs per micro-batch on one GPU: each on the additive roofline of
`planner.model.gemm` (routed experts as one grouped GEMM, each expert padded to the kernel's row
tile), the quantisation traffic of FP8 / NVFP4 recipes, and the SMs Transformer Engine's
NVTE_EXT_MARGIN_SM leaves them (`margin_slowdown`). `planner.model.layer_time` assembles them
into the layer's time; benchmarks/moe_layer.py reads them apart."""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import FLOAT8_EXPERTS_RECIPE
from planner.model import fsdp2, gemm_shapes, layer_tp, sm_count
from planner.model.fp32 import gemm_peak
from planner.model.gemm import Gpu, gemm_time, grouped_rows, quant_bytes


class LinearTimes(NamedTuple):
    """A layer's linear GEMMs per micro-batch (`linear_times`), in `gemm_shapes.linear_gemms`'
    order: their (M, K, N, count) shapes, parts ("expert", "shared", ...), forward seconds, the
    seconds of their inputs' and output gradients' quantisation, and of the weights' (once per
    step). Tuples throughout: the layer memos keep them (`planner.model.layer_parts`)."""

    shapes: tuple[tuple[float, float, float, float], ...]
    parts: tuple[str, ...]
    times: tuple[float, ...]
    casts: tuple[float, ...]
    weight_cast: float


def linear_times(
    job: Job, lay: Layout, gpu: Gpu, kind: LayerKind, t: float, load: float
) -> LinearTimes:
    """The linear layers of one layer of `kind` for `t` tokens per TP group at routing `load`:
    routed experts as a grouped GEMM with row-tile padding; FP8 adds the recipe's quantisation of
    each GEMM's input and output gradient per micro-batch (weights: once per step,
    `weight_cast`); the routed experts in their own precision and recipe (`experts_recipe`:
    torchtitan's in bf16 unless float8_experts); every GEMM on the SMs `Job.gemm_sm_margin`
    leaves it."""
    blackwell = job.cluster.gpu.is_blackwell
    quantised = job.quantised  # FP8 / NVFP4 (fp32's GEMMs run at its TF32 peak_linear)
    quant = quant_bytes(job.quant_recipe, blackwell, job.compiled) if quantised else 0.0
    expert_recipe = experts_recipe(job)
    bf16_experts = quantised and expert_recipe is None  # beside quantised linear layers
    expert_quant = quant
    if bf16_experts:
        expert_quant = 0.0
    elif expert_recipe is not None and expert_recipe != job.quant_recipe:
        expert_quant = quant_bytes(expert_recipe, blackwell, job.compiled)
    on_shard = lay.sequence_parallel and layer_tp.latents_gathered(job, kind)
    shapes = gemm_shapes.linear_gemms(
        job.arch, t, lay.tp, lay.ep, lay.expert_tp, kind, load, on_shard
    )
    parts = gemm_shapes.linear_gemm_parts(job.arch, kind)
    times: list[float] = []
    casts: list[float] = []
    weight_cast = 0.0
    slower = margin_slowdown(job)
    for (m, k, n, c), part in zip(shapes, parts, strict=True):
        rows = grouped_rows(m) if part == "expert" else m
        peak, e, q = gpu.peak_linear, gpu.e_linear, quant
        if part == "expert":
            q = expert_quant
            if bf16_experts:  # in the parameters' dtype (TF32 in an fp32 model)
                peak, e = gemm_peak(job, gpu), gpu.e_bf16
        times.append(slower * gemm_time(rows, k, n, peak, gpu.ridge, e, c))
        casts.append(c * q * (m * k + m * n) / gpu.hbm)
        weight_cast += c * q * k * n / gpu.hbm
    return LinearTimes(tuple(shapes), tuple(parts), tuple(times), tuple(casts), weight_cast)


def weights_cast_per_use(job: Job, lay: Layout) -> bool:
    """Whether the quantised linear layers cast their weights on every use rather than once per
    step: torchtitan's float8 (torchao Float8Linear casts the bf16 weight in each forward and
    again, in the other orientation, from the saved bf16 weight in each backward; pytorch/ao
    36027d82 torchao/float8/float8_linear.py:73, :131; nothing is cached across micro-batches,
    unlike Transformer Engine's is_first_microbatch), except where the float8 FSDP all-gather
    runs (`fsdp2.float8_gather`: the shard is cast before each gather and the gathered float8
    weight serves both GEMMs, which the once-per-step charge stands for)."""
    return job.framework == "torchtitan" and job.quantised and not fsdp2.float8_gather(job, lay)


def experts_recipe(job: Job) -> str | None:
    """How the routed experts' grouped GEMMs are quantised: the linear layers' recipe
    (`Job.quant_recipe`; Megatron's TEGroupedLinear quantises them as its linear layers), None
    where they run in bf16: a bf16 job, and a torchtitan one without `[torchtitan]
    float8_experts` (its float8 linear converter converts nn.Linear modules only, and the
    experts are grouped GEMMs: `planner.inputs.torchtitan.FLOAT8_EXPERTS`). torchtitan's float8
    experts scale rowwise whatever the linear recipe."""
    if not job.quantised:
        return None
    if job.framework != "torchtitan":
        return job.quant_recipe
    return FLOAT8_EXPERTS_RECIPE if job.titan.float8_experts else None


def wgrad_exempt(job: Job, lin: LinearTimes) -> float:
    """Forward seconds of the GEMMs among `lin` whose weight gradient a high-precision-wgrad
    recipe (torchao's rowwise_with_gw_hp, `layer_time`'s wgrad slowdown) leaves alone: under
    torchtitan the routed experts, which that recipe never reaches (in bf16 they are bf16
    already; in float8 torchao's grouped GEMM runs all three in float8, `experts_recipe`); 0
    elsewhere."""
    if job.framework != "torchtitan":
        return 0.0
    return sum(t for t, part in zip(lin.times, lin.parts, strict=True) if part == "expert")


def margin_slowdown(job: Job) -> float:
    """How much longer a decoder GEMM runs on the SMs `Job.gemm_sm_margin` leaves it
    (Transformer Engine's NVTE_EXT_MARGIN_SM: cuBLAS and its grouped GEMMs get `sm_count -
    margin` SMs, gemm.cpp and the grouped-GEMM wrappers): S / (S - margin)."""
    if not job.gemm_sm_margin:
        return 1.0
    sms = sm_count.gpu_sms(job.cluster)
    return sms / (sms - min(job.gemm_sm_margin, sms - 1))
