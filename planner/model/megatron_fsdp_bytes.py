"""Bytes per element of Megatron-FSDP's transient unit buffers (`megatron_fsdp`), by bucket
group, as Megatron-LM d98e8a64 allocates them; paths under megatron/core/distributed/fsdp/src/
megatron_fsdp/ (pgb: param_and_grad_buffer.py).

- A group's buffers are distributed only where its sharding group has more than one rank: the
  weight buffer where model_wbuf_dp_group.size() > 1 (pgb:2655-2657), the gradient buffer where
  main_buf_dp_group.size() > 1 (:2718), the experts' group being the expert-data-parallel one.
  A buffer that is not distributed hands out views of its persistent data (fetch_bucket,
  pgb:1328-1335): its gather and its gradients allocate nothing (planner counts that data whole
  as weights and gradients), though its bucket still counts toward the queue's capacity and the
  prefetch (bucket_index.size, pgb:3935-3948, :4487-4510). The one exception: a custom gradient
  communication dtype other than the buffer's makes the reduce allocate an unsharded bucket in
  it (:4063-4075), freed when popped like any other.
- Gradients: the unsharded bucket is fetched in --megatron-fsdp-grad-comm-dtype where set
  (pgb:3107-3111, allocated in it by allocate_bucket_storage :1400-1408, and reduced from it,
  :4056-4058), else in the group's gradient dtype (`Job.grad_bytes`): `Job.grad_comm_bytes`.
- Parameters (ZeRO 3): a group of FP8 parameters (--fp8-param-gather: Float8Tensor parameters,
  fp8_utils.py:848) has dtype "float8" (pgb:1795-1798) and a uint8 weight buffer (:2631-2632),
  1 B an element gathered in the forward. MXFP8 alone has a transpose buffer (:2634-2643,
  mixed_precision.py:183-185), which the backward gathers in place of the rowwise one
  (pgb:4657-4685, get_fsdp_buffer); the other recipes gather the rowwise buffer again and
  Transformer Engine builds the transpose of the unit being waited on (megatron_fsdp.py:496-498),
  dropped at its release (:627-628, unless --keep-fp8-transpose-cache). Counted at the unit's own
  backward (`Price.running`): that transpose (what planner's `quantised_weight_bytes` counts
  beside the data: 1 B on Hopper, none on Blackwell, the columnwise copy under blockwise
  scaling), and under MXFP8 its rowwise bucket, which a recomputed forward gathers beside the
  transpose window (the safe side without recompute). Unquantised groups gather in the
  parameters' dtype (`fp32.weight_bytes`); so do NVFP4's (--fp4-param-gather), as before: its
  FSDP path is not modelled."""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.bf16_layers import bf16_ranges
from planner.model.fp32 import weight_bytes
from planner.model.mtp_precision import mtp_quantised
from planner.model.schedule import Chunks

Unit = tuple[float, float]
"""(dense, expert) elements of one FSDP unit on one GPU."""

Pair = tuple[float, float]
"""(dense group, experts' group) bytes per element."""


class Price(NamedTuple):
    """Bytes per element of a unit's (dense, experts') bucket groups in Megatron-FSDP's
    transient buffers: its unsharded gradient bucket (`grad`), its gathered parameters in a
    forward window (`fwd`) and a backward window (`bwd`), what its own backward adds on top
    (`running`), its parameters in the double buffer's pools (`pool`) and what its own backward
    adds beside them (`pool_running`)."""

    grad: Pair
    fwd: Pair
    bwd: Pair
    running: Pair
    pool: Pair
    pool_running: Pair = (0.0, 0.0)


def uniform(grad: float, weight: float) -> Price:
    """Every group at `grad` bytes a gradient and `weight` a gathered parameter."""
    return Price((grad, grad), (weight, weight), (weight, weight), (0.0, 0.0), (weight, weight))


ELEMENTS = uniform(1.0, 1.0)
"""A price that counts elements."""


def sharded(job: Job, layout: Layout) -> tuple[bool, bool]:
    """Whether the (dense, experts') groups' buffers are distributed: their sharding group, the
    data-parallel (x context) ranks or the expert-data-parallel ones, over each distributed-
    optimizer instance's slice (HSDP), has more than one rank."""
    n = job.optimizer_instances
    return layout.dense_dp // n > 1, layout.expert_dp // n > 1


def grad_prices(job: Job, layout: Layout) -> Pair:
    """Bytes per element of the (dense, experts') groups' unsharded gradient buckets
    (module docstring): the communication dtype's where distributed; where not, none, unless a
    custom communication dtype differs from the buffer's (an fp16 one, or any in an fp16 run,
    counted as differing: the safe side)."""
    comm, dtype = job.grad_comm_bytes, job.fsdp_grad_comm_dtype
    # main_grad_dtype "bf16" is fp16 in an fp16 run: any 16-bit dtype there counted as differing
    custom = dtype is not None and (
        dtype != job.main_grad_dtype or "fp16" in (dtype, job.params_dtype)
    )
    d, e = sharded(job, layout)
    return (comm if d or custom else 0.0, comm if e or custom else 0.0)


def unit_price(job: Job, layout: Layout, quantised: bool) -> Price:
    """The price of a unit's groups (module docstring); `quantised`: the unit's GEMM weights are
    FP8 (not a bf16 layer of an FP8 model)."""
    grad = grad_prices(job, layout)
    none = (0.0, 0.0)
    if layout.zero_stage < 3:
        return Price(grad, none, none, none, none)
    d, e = sharded(job, layout)
    fp8 = quantised and job.low_precision_params and job.precision == "fp8"
    if not fp8:
        w = weight_bytes(job)
        on = (w if d else 0.0, w if e else 0.0)
        return Price(grad, on, on, none, on)
    mxfp8 = job.quant_recipe == "mxfp8"
    one = (1.0 if d else 0.0, 1.0 if e else 0.0)
    if mxfp8:  # the running unit's rowwise bucket, where distributed; in its pool when pooled
        return Price(grad, one, one, one, (2.0 * one[0], 2.0 * one[1]))
    transpose = transpose_bytes(job)  # Transformer Engine's, distributed or not
    both = (transpose, transpose)
    return Price(grad, one, one, both, one, both)


def transpose_bytes(job: Job) -> float:
    """Bytes per element of the transpose Transformer Engine builds for a non-MXFP8 FP8 weight
    in the backward: none on Blackwell under per-tensor scaling (no TN restriction), the data's
    byte on Hopper, and under blockwise scaling the columnwise byte with its fp32 scale per
    128 x 128 block (as `buffers.quantised_weight_bytes` counts it)."""
    if job.quant_recipe == "blockwise":
        return 1.0 + 4.0 / (128 * 128)
    return 0.0 if job.cluster.gpu.is_blackwell else 1.0


def chunk_prices(job: Job, layout: Layout, rank: int, chunks: Chunks) -> list[list[Price]]:
    """Each chunk's units' prices (`unit_price`) on pipeline rank `rank`, in
    `megatron_fsdp.chunk_units`' order:
    a decoder layer quantised unless it runs in bf16 (`bf16_layers.bf16_ranges`), an MTP layer
    where the MTP layers run quantised (`mtp_precision.mtp_quantised`)."""
    plain, fp8 = unit_price(job, layout, False), unit_price(job, layout, True)
    bf16 = {i for r in bf16_ranges(job, chunks) for i in r}
    out = [[plain if i in bf16 or not job.quantised else fp8 for i in c] for c in chunks]
    if rank == layout.mtp_rank(job.arch.num_layers, job.arch.mtp_num_layers) and out:
        depths = 1 if job.arch.mtp_use_repeated_layer else job.arch.mtp_num_layers
        mtp = fp8 if mtp_quantised(job) else plain
        out[-1] += [mtp] * (depths * len(job.arch.mtp_kinds))
    return out
