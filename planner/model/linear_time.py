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
from planner.model import fsdp2, gemm, gemm_shapes, layer_tp, sm_count
from planner.model.fp32 import gemm_peak
from planner.model.gemm import Gpu, gemm_time, grouped_rows, quant_bytes


class LinearTimes(NamedTuple):
    """A layer's linear GEMMs per micro-batch (`linear_times`), in `gemm_shapes.linear_gemms`'
    order: their (M, K, N, count) shapes, parts ("expert", "shared", ...), forward seconds, the
    seconds of their inputs' and output gradients' quantisation, and of the weights' (once per
    step, less what recurs per use). Tuples throughout: the layer memos keep them
    (`planner.model.layer_parts`)."""

    shapes: tuple[tuple[float, float, float, float], ...]
    parts: tuple[str, ...]
    times: tuple[float, ...]
    casts: tuple[float, ...]
    weight_cast: float
    per_use: tuple[float, float] = (0.0, 0.0)
    """Of `weight_cast`, the seconds that recur in every micro-batch's forward and backward
    (`per_use_weight_cast`); the rest runs once per step."""


def linear_times(
    job: Job, lay: Layout, gpu: Gpu, kind: LayerKind, t: float, load: float
) -> LinearTimes:
    """The linear layers of one layer of `kind` for `t` tokens per TP group at routing `load`:
    routed experts as a grouped GEMM with row-tile padding; FP8 adds the recipe's quantisation of
    each GEMM's input and output gradient per micro-batch (weights: once per step,
    `weight_cast`); the routed experts in their own precision and recipe (`experts_recipe`:
    torchtitan's in bf16 unless float8_experts); every GEMM on the SMs `Job.gemm_sm_margin`
    leaves it."""
    quant, expert_quant = _quants(job)
    bf16_experts = job.quantised and experts_recipe(job) is None  # beside quantised linears
    on_shard = lay.sequence_parallel and layer_tp.latents_gathered(job, kind)
    shapes = gemm_shapes.linear_gemms(
        job.arch, t, lay.tp, lay.ep, lay.expert_tp, kind, load, on_shard
    )
    parts = gemm_shapes.linear_gemm_parts(job.arch, kind)
    eager = eager_float8(job, lay)
    readers = input_casts(job, kind)
    times: list[float] = []
    casts: list[float] = []
    weight_cast = expert_weight = 0.0
    slower = margin_slowdown(job)
    for (m, k, n, c), part, r in zip(shapes, parts, readers, strict=True):
        rows = grouped_rows(m) if part == "expert" else m
        peak, e, q = gpu.peak_linear, gpu.e_linear, quant
        if part == "expert":
            q = expert_quant
            if bf16_experts:  # in the parameters' dtype (TF32 in an fp32 model)
                peak, e = gemm_peak(job, gpu), gpu.e_bf16
        times.append(slower * gemm_time(rows, k, n, peak, gpu.ridge, e, c))
        if eager is not None and part != "expert":  # torchao's Float8Linear, op by op
            casts.append(c * eager.operand * (r * m * k + m * n) / gpu.hbm)
            weight_cast += c * (eager.weight_fwd + eager.weight_bwd) * k * n / gpu.hbm
            continue
        casts.append(c * q * (m * k + m * n) / gpu.hbm)
        weight_cast += c * q * k * n / gpu.hbm
        expert_weight += c * q * k * n / gpu.hbm if part == "expert" else 0.0
    per_use = per_use_weight_cast(job, lay, weight_cast, expert_weight)
    return LinearTimes(
        tuple(shapes), tuple(parts), tuple(times), tuple(casts), weight_cast, per_use
    )


def _quants(job: Job) -> tuple[float, float]:
    """`gemm.quant_bytes` of the linear layers' operands and of the routed experts' (0 where
    they run in bf16 beside quantised linear layers, `experts_recipe`)."""
    if not job.quantised:  # fp32's GEMMs run at its TF32 peak_linear
        return 0.0, 0.0
    blackwell = job.cluster.gpu.is_blackwell
    quant = quant_bytes(job.quant_recipe, blackwell, job.compiled)
    recipe = experts_recipe(job)
    if recipe is None:
        return quant, 0.0
    return quant, quant if recipe == job.quant_recipe else quant_bytes(
        recipe, blackwell, job.compiled
    )


def eager_float8(job: Job, lay: Layout) -> gemm.EagerFloat8 | None:
    """The bytes of torchtitan's float8 linears' casts where the model runs eager
    (`gemm.eager_float8`: `[torchtitan] compile` off, or a configuration compiling the loss
    alone, which planner reads as compile off; torchtitan e347b1e5 compiles the transformer
    blocks, Float8Linear inside, only with compile.enable and "model" in compile.components,
    models/llama3/infra/parallelize.py:107-123); None elsewhere (compiled: `gemm.quant_bytes`'s
    fused casts). With the float8 FSDP all-gather (`fsdp2.float8_gather`) the gathered weight
    is float8 already and neither GEMM casts it (float8_linear.py:68-69, :125-127): its
    backward copy is left (`gemm.FP8_LAYOUT_COPY_BYTES`), and the shard's casts before each
    gather stand as one cast of the weight per step."""
    if not (job.framework == "torchtitan" and job.quantised) or job.compiled:
        return None
    bytes_ = gemm.eager_float8(job.quant_recipe)
    if bytes_ is not None and fsdp2.float8_gather(job, lay):
        return bytes_._replace(weight_bwd=gemm.FP8_LAYOUT_COPY_BYTES)
    return bytes_


def input_casts(job: Job, kind: LayerKind) -> tuple[int, ...]:
    """How many float8 casts read each of the layer's `linear_gemms`' input where torchtitan's
    float8 runs eager (`eager_float8`): its models run the attention's wq, wk and wv as three
    nn.Linear and a gated MLP's (or shared experts') w1 and w3 as two (e347b1e5
    models/llama3/model/model.py, models/moe/moe.py:63-65), each Float8Linear casting its own
    input (torchao float8_linear.py:56, :185), where planner's shapes fuse them: 3 on the QKV
    GEMM (not MLA's, whose projections are its entries already), 2 on a gated fc1; 1 elsewhere,
    and everywhere outside torchtitan (Transformer Engine's fused QKV and fc1)."""
    arch = job.arch
    parts = gemm_shapes.linear_gemm_parts(arch, kind)
    n = [1] * len(parts)
    if job.framework != "torchtitan":
        return tuple(n)
    if kind.mixer == "attention" and not arch.multi_latent_attention and parts:
        n[0] = 3
    for i, part in enumerate(parts):
        first = i == 0 or parts[i - 1] != part
        if arch.gated_linear_unit and part in ("mlp", "shared") and first:
            n[i] = 2
    return tuple(n)


def weights_cast_per_use(job: Job, lay: Layout) -> bool:
    """Whether the quantised linear layers cast their weights on every use rather than once per
    step: torchtitan's float8 (torchao Float8Linear casts the bf16 weight in each forward and
    again, in the other orientation, from the saved bf16 weight in each backward; pytorch/ao
    36027d82 torchao/float8/float8_linear.py:73, :131; nothing is cached across micro-batches,
    unlike Transformer Engine's is_first_microbatch), except where the float8 FSDP all-gather
    runs (`fsdp2.float8_gather`: the shard is cast before each gather and the gathered float8
    weight serves both GEMMs, which the once-per-step charge stands for)."""
    return job.framework == "torchtitan" and job.quantised and not fsdp2.float8_gather(job, lay)


def per_use_weight_cast(
    job: Job, lay: Layout, weights: float, experts: float
) -> tuple[float, float]:
    """Of the weights' quantisation seconds `weights` (of which `experts` the routed experts'),
    those each micro-batch's forward and backward run: all where `weights_cast_per_use`
    (eager: the forward's cast and the backward's cast and copy, `eager_float8`; compiled: half
    each); with the float8 FSDP all-gather the routed experts' still, half each (only
    Float8Linear weights are WeightWithDynamicFloat8CastTensor, torchao 36027d82
    float8_linear.py:324-333; its float8 grouped GEMM casts the bf16 expert weights in each
    forward and, transposed, in each backward, prototype/moe_training/fp8_grouped_mm.py:148,
    :241), and eager the linears' backward copy; (0, 0) elsewhere (Transformer Engine caches
    its FP8 weights across micro-batches)."""
    if not (job.framework == "torchtitan" and job.quantised):
        return 0.0, 0.0
    eager = eager_float8(job, lay)
    linears = weights - experts
    if eager is None:
        fwd = bwd = 0.0
    else:
        whole = eager.weight_fwd + eager.weight_bwd
        fwd, bwd = linears * eager.weight_fwd / whole, linears * eager.weight_bwd / whole
    if not weights_cast_per_use(job, lay):
        return experts / 2, (bwd if eager is not None else 0.0) + experts / 2
    if eager is None:
        fwd = bwd = linears / 2
    return fwd + experts / 2, bwd + experts / 2


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
