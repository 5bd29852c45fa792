"""Model states and data-parallel traffic of torchtitan's FSDP2 (`fully_shard`), with and without
pipeline parallelism: what `planner.model.memory` counts for a plan with framework =
"torchtitan" in place of Megatron's ZeRO stages.

Mechanisms, from the code (not fitted to any published memory figure):

- torchtitan (pytorch/torchtitan e347b1e5, models/llama3/infra/parallelize.py `apply_fsdp`):
  `fully_shard` on the embedding, on every transformer block, on [norm, output] and on the root,
  with MixedPrecisionPolicy(param_dtype bf16, reduce_dtype float32) and training.dtype float32:
  each GPU keeps its 1/N shard of the fp32 parameters (the master weights; AdamW's exp_avg and
  exp_avg_sq beside them, fp32) and of the fp32 gradients, N = data_parallel_shard_degree x cp
  (the "fsdp" mesh, distributed/parallel_dims.py), experts over efsdp = dp_shard x cp x tp /
  (ep x etp). HSDP's replicate degree multiplies nothing here: each replica holds a full shard set.
- reshard_after_forward policy: "always" True, "never" False, "default" `not pp_enabled` ("for
  PP, by default do not reshard after forward to avoid per-microbatch all-gathers"); [norm,
  output] reshard only under "always" (FSDP would prefetch them right back).
- torch.distributed.pipelining (torch/distributed/pipelining/stage.py
  `backward_maybe_with_nosync`): every backward but a schedule's last runs with
  set_requires_gradient_sync(False) and set_reshard_after_backward(False); the last calls the
  FSDP post-backward itself (once a step, or once per pipeline schedule where a step runs
  several: `planner.model.titan_accumulation`, whose sub-steps this module prices). So under PP a
  stage's parameters stay unsharded (bf16) from their first all-gather to the schedule's last
  backward, whatever reshard_after_forward says once a
  backward has run (so "always" is counted like "default" at the peak: a bound, it only
  re-gathers parameters a forward freed), and its gradients accumulate unsharded across the
  micro-batches: FSDPParam.to_accumulated_grad_if_needed upcasts the bf16 unsharded gradient to
  reduce_dtype (fp32) and accumulate_unsharded_grad_if_needed adds each later one into it, so 4
  bytes per parameter of the stage live through the step, and a bf16 gradient of one block on
  top while autograd writes it.
- Without PP (torchtitan train.py: no no_sync in gradient accumulation) every backward
  reduce-scatters each block's gradient as it completes: one block's bf16 gradient plus its fp32
  copy (foreach_reduce's reduce-scatter input in reduce_dtype) at a time, and the parameters of
  the block being run and the one prefetched unsharded (two blocks), the output layer kept from
  the forward to the backward unless "always".
- torch.distributed.pipelining's receive buffers (stage.py: `_create_act_recv_info` and
  `_create_grad_recv_info`, each called once per micro-batch when the schedule sets up, each
  buffer a `_make_tensor_from_meta` on the device, kept across steps): every pipeline stage but
  the first holds one activation buffer per micro-batch of the step, every stage but the last
  one gradient buffer, each the stage boundary tensor: torchtitan's blocks end in sequence-
  parallel local tensors, [micro-batch, seq / (cp x tp), hidden] in bf16 (`pipeline_buffers`).
- The [norm, output] unit's own gradients and reduce-scatter input, with the unchunked and the
  chunked loss, and the chunked loss's per-micro-batch collectives under PP:
  `output_layer_transient`, `per_micro_batch_output`.
- float8 (torchao Float8Linear) with enable_fsdp_float8_all_gather: the linear weights are
  gathered and kept unsharded in float8 (1 byte); otherwise in bf16 and cast per use.
- Megatron-LM's --use-torch-fsdp2 (`Layout.use_torch_fsdp2`) runs the same `fully_shard` with
  no MixedPrecisionPolicy, its own resharding flag, pp 1: `dtypes` and `policy` say how its
  buffers differ; `planner.model.torch_fsdp2` counts them.
"""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.layout import Layout
from planner.inputs.layout_split import stage_of
from planner.inputs.plan import Job
from planner.inputs.torchtitan import Reshard
from planner.model import comms, dp_sync
from planner.model.fp32 import weight_bytes
from planner.model.job_memo import JobMemo
from planner.model.params import output_params

BF16 = 2.0
FP32 = 4.0
ADAM = 8.0
"""AdamW exp_avg and exp_avg_sq in fp32 (torch.optim.AdamW on fp32 parameters)."""
ADAM_BF16 = 4.0
"""The two in bf16: `training.optimizer_state_dtype = "bf16"`, torchtitan b5bcd76c's optimizer
implementation "fused_opt_states_bf16" (components/optimizer/optimizer.py:109-123, :332-371:
zeros_like(p, dtype=torch.bfloat16) for each)."""


class Dtypes(NamedTuple):
    """Bytes per element of FSDP2's unsharded parameters (all-gather output), of the unsharded
    gradients autograd writes, and of foreach_reduce's reduce-scatter input (reduce_dtype)."""

    param: float
    grad: float
    reduce: float


TITAN = Dtypes(BF16, BF16, FP32)
"""torchtitan's MixedPrecisionPolicy(param_dtype bf16, reduce_dtype float32)."""


def dtypes(job: Job) -> Dtypes:
    """torchtitan's `TITAN`; under Megatron-LM's --use-torch-fsdp2, which gives fully_shard no
    mp_policy (Megatron-LM d98e8a64 torch_fully_sharded_data_parallel.py:82-85), the
    parameters' own dtype throughout: bf16 under Float16Module (training.py:2468-2470), fp32
    without --bf16 (`fp32.weight_bytes`; the gradients `Job.grad_bytes`, the same bytes)."""
    if job.framework == "torchtitan":
        return TITAN
    return Dtypes(weight_bytes(job), job.grad_bytes, job.grad_bytes)


def policy(job: Job, lay: Layout) -> Reshard:
    """The reshard_after_forward policy: torchtitan's `[torchtitan] reshard_after_forward`;
    Megatron-LM's one flag for every unit, the output layer's too (training.py:2627-2629,
    torch_fully_sharded_data_parallel.py:84): "always" unless
    --torch-fsdp2-no-reshard-after-forward, then "never"."""
    if job.framework == "torchtitan":
        return job.titan.reshard_after_forward
    return "always" if lay.torch_fsdp2_reshard_after_forward else "never"


def adam_bytes(job: Job) -> float:
    """Bytes per parameter of AdamW's two moments, by `Job.optimizer_state_dtype`."""
    return ADAM_BF16 if job.optimizer_state_dtype == "bf16" else ADAM


def shard_groups(job: Job, lay: Layout) -> tuple[int, int]:
    """(dense, expert) FSDP2 shard sizes: dp_shard x cp and efsdp (the replicate degree out)."""
    rep = job.titan.dp_replicate
    return max(lay.dense_dp // rep, 1), max(lay.expert_dp // rep, 1)


def keeps_unsharded(job: Job, lay: Layout) -> bool:
    """Whether a stage's parameters stay gathered across its micro-batches: "never", or any
    policy under PP (see the module docstring)."""
    return policy(job, lay) == "never" or lay.pp > 1


def states(
    job: Job,
    lay: Layout,
    params: tuple[float, float],
    fp8_params: tuple[float, float],
    nlayers: int,
    output_params: float,
) -> tuple[float, float, float, float, float]:
    """(weights, grads, optimizer, gathered, transient) bytes on one GPU of a pipeline rank
    holding `params` (dense, expert) parameters, `fp8_params` of them float8 linear weights,
    `nlayers` blocks and `output_params` of the output layer (0 off the last rank): weights are
    the fp32 shards and the bf16 (float8) parameters kept gathered, grads the fp32 shards and
    under PP the unsharded fp32 gradients accumulated over the step; `gathered` is always 0
    (memory's FP8-cache slot) and `transient` the per-block buffers at the peak, or the output
    layer's gradients and reduce-scatter input where larger (`output_layer_transient`)."""
    dense, expert = params
    n_d, n_e = shard_groups(job, lay)
    weights = FP32 * (dense / n_d + expert / n_e)
    grads = FP32 * (dense / n_d + expert / n_e)
    optimizer = adam_bytes(job) * (dense / n_d + expert / n_e)
    # without data parallelism too: b5bcd76c's models/llama3/parallelize.py:57-77 calls
    # apply_fsdp_to_decoder whatever the degrees ("with shard_degree=1 it is a no-op for the
    # all-gather but still installs the MixedPrecisionPolicy"), so the bf16 unsharded copies
    # and, under PP, the fp32 accumulated gradients are there as on a mesh of many
    # float8 all-gather casts Float8Linear weights only (torchao's
    # WeightWithDynamicFloat8CastTensor): the routed experts, grouped GEMMs whatever their
    # precision (`[torchtitan] float8_experts`), are gathered in bf16
    fp8 = fp8_params[0]
    total = dense + expert
    gathered_bytes = BF16 * (total - fp8) + (1.0 if float8_gather(job, lay) else BF16) * fp8
    per_layer = total / nlayers if nlayers else 0.0
    per_layer_bytes = gathered_bytes / total * per_layer if total else 0.0
    if keeps_unsharded(job, lay):
        if lay.pp > 1:
            grads += FP32 * total  # unsharded gradients accumulated in reduce_dtype
        # the block gradient autograd writes (bf16) and foreach_reduce's fp32 input
        transient = (BF16 + FP32) * per_layer
        transient = output_layer_transient(job, lay, output_params, per_layer, transient)
        return weights + gathered_bytes, grads, optimizer, 0.0, transient
    # resharded after forward: the running and the prefetched block, the output layer kept
    # from forward to backward unless "always", one block's gradient in bf16 and fp32
    kept_output = BF16 * output_params if policy(job, lay) != "always" else 0.0
    transient = 2 * per_layer_bytes + (BF16 + FP32) * per_layer
    transient = output_layer_transient(
        job, lay, output_params, per_layer, transient, prefetched=per_layer_bytes
    )
    return weights + kept_output, grads, optimizer, 0.0, transient


def output_layer_transient(
    job: Job,
    lay: Layout,
    output_params: float,
    per_layer: float,
    block: float,
    prefetched: float = 0.0,
) -> float:
    """The transient bytes at the peak (`block`: a decoder block's, `states`) on the rank holding
    the output layer's `output_params` (its local, TP-split share: the weight is Shard(0) over
    TP, b5bcd76c models common decoder_sharding.py:370-371), `prefetched` the bf16 (float8)
    bytes of the last block, which the [norm, output] unit's pre-backward prefetches where the
    blocks reshard after forward (0 where they stay gathered, counted in the weights). [norm,
    output] is an FSDP unit whatever the degrees (distributed/fsdp.py:260-265;
    llama3/parallelize.py:57-77) with MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32)
    (config/configs.py:94,102; llama3/parallelize.py:71-72). FSDP2's post-backward (pytorch
    _fsdp_param_group.py `FSDPParamGroup.post_backward`, _fsdp_collectives.py `foreach_reduce`)
    allocates the fp32 reduce-scatter input and copies the unsharded gradient into it before
    dropping that gradient, and keeps the input referenced (comm_ctx.reduce_scatter_state) until
    the next unit's post-backward releases it before making its own.

    - Unchunked loss (`[torchtitan] loss_chunks` 1), without PP: at the loss's backward the
      output layer's bf16 gradient and its fp32 input (6 bytes per output parameter) beside the
      prefetched last block (and under "always" the output weight gathered again, 2); then the
      last block's backward runs beside the held input (4): `block` less that block's fp32
      input, not yet made.
    - Chunked loss (ChunkedLossWrapper, b5bcd76c components/loss.py:658-706): the output layer
      and the loss run chunk by chunk at the end of the forward, every decoder activation alive;
      gradient sync is off for chunks 0..N-2 and on for the last (:662-680), so FSDP2 upcasts
      the first chunk's bf16 gradient to fp32 (_fsdp_param.py `to_accumulated_grad_if_needed`),
      adds each later one into it (`accumulate_unsharded_grad_if_needed`) and at the last chunk
      copies the fp32 sum into the fp32 input: 8 bytes per output parameter (4 + 2 earlier),
      and under "always" the bf16 weight the wrapper gathers itself (:673); the last block's
      backward beside the held input as above. The wrapper gathers no decoder block.
    - Under PP every backward but the schedule's last runs with sync off (stage.py
      `backward_maybe_with_nosync`), so the grads (`states`) count the output layer's fp32
      sum (4) through the step. Unchunked, the schedule's last backward copies that sum into a
      fresh fp32 input (4 on top). Chunked, the wrapper turns sync on at each micro-batch's last
      chunk (`data_parallel_time` charges that reduce-scatter): the previous micro-batch's
      input (4, in the grads' place) is still held when the next loss accumulates (4 + 2 on
      top; 4 + 4 at its last chunk, the old input released first).

    The larger of these moments and `block`, each a bound of what is alive beside the peak's
    activations."""
    if output_params <= 0:
        return block
    d = dtypes(job)  # torchtitan's bf16 gradients, fp32 reduce input (bytes above: `TITAN`)
    chunked = job.titan.loss_chunks > 1
    if lay.pp > 1:
        return max(block, (d.reduce + (d.grad if chunked else 0.0)) * output_params)
    gathered = d.param * output_params if policy(job, lay) == "always" else 0.0
    if chunked:
        at_loss = 2 * d.reduce * output_params + gathered
    else:
        at_loss = (d.grad + d.reduce) * output_params + gathered + prefetched
    after = block - d.reduce * per_layer + d.reduce * output_params
    return max(block, at_loss, after)


def pipeline_buffers(job: Job, lay: Layout, rank: int) -> float:
    """Bytes of torch pipelining's per-micro-batch receive buffers on pipeline rank `rank` (0
    without pipelining or for Megatron-LM, whose p2p buffers are transient): its stages are
    k = c x pp + rank for chunk c (looped schedules' placement), or rank and 2 pp - 1 - rank in
    a V schedule (ZBVZeroBubble, DualPipeV: rank 0 holds the first and the last stage): the
    layout's placement (`Layout.v_stages`, `layout.stage_of`)."""
    if job.framework != "torchtitan" or lay.pp == 1:
        return 0.0
    m = max(lay.num_microbatches(job.global_batch_size), 1)
    boundary = lay.micro_batch_size * job.seq_length / (lay.cp * lay.tp) * job.arch.hidden_size
    stages = lay.pp * lay.vpp
    count = 0
    for k in range(stages):
        if stage_of(lay.pp, lay.v_stages, k)[0] == rank:
            count += (k != 0) + (k != stages - 1)
    return m * count * boundary * BF16


COLLECTIVES: JobMemo[tuple[object, ...], tuple[float, float]] = JobMemo()
"""`_collectives` per job and what it reads: the search times every micro-batch count and
recompute of a layout, whose parameters and groups, and so collectives, are the same."""


def _collectives(
    job: Job, n_params: float, stride: int, size: int, rep: int, gathered: float = BF16
) -> tuple[float, float]:
    """Seconds of one all-gather of `n_params` parameters at `gathered` bytes each (bf16; less
    with float8 all-gather) and of one reduce-scatter of their gradients in reduce_dtype
    (`dtypes`: fp32 in torchtitan, the parameters' dtype in Megatron-LM; with HSDP, the
    all-reduce of the shards over the replicas after it) over a shard group of `size` ranks
    `stride` apart."""
    reduce = dtypes(job).reduce
    shard = comms.place(job.cluster, stride, size)
    ag = comms.all_gather(n_params * gathered, shard) if size > 1 else 0.0
    rs = comms.reduce_scatter(n_params * reduce, shard) if size > 1 else 0.0
    if rep > 1:
        replicas = comms.place(job.cluster, stride * size, rep)
        rs += comms.all_reduce(n_params * reduce / size, replicas)
    return ag, rs


def float8_gather(job: Job, lay: Layout) -> bool:
    """Whether the float8 FSDP all-gather runs: `[torchtitan] float8_all_gather` where the
    parameters are sharded over data parallelism, as torchtitan e347b1e5 turns it on only with
    dp_shard > 1 (components/quantization/float8.py:87-90, `parallel_dims.dp_shard_enabled`);
    at dp_shard 1 the linear weights are gathered (kept) in bf16."""
    return job.titan.float8_all_gather and lay.dp // max(job.titan.dp_replicate, 1) > 1


def gathered_bytes_per_param(job: Job, lay: Layout, dense: float, fp8: float) -> float:
    """Bytes per dense parameter of FSDP2's all-gather: bf16, the `fp8` float8 linear weights
    at 1 byte where the float8 all-gather runs (`float8_gather`, as `states` keeps them
    gathered)."""
    if not float8_gather(job, lay) or dense <= 0:
        return dtypes(job).param
    fp8 = min(fp8, dense)
    return (BF16 * (dense - fp8) + 1.0 * fp8) / dense


def _passes(job: Job, lay: Layout, m: int) -> tuple[tuple[int, int, int, bool], ...]:
    """(count, gathers, reduces, backward) per kind of pass over a stage's blocks in one
    (sub-)step: how many such passes, whether each block all-gathers and reduce-scatters in it,
    and whether it runs in a backward (else a forward). Without PP, every micro-batch's forward
    gathers each block and its backward reduce-scatters it (torchtitan's trainer keeps gradient
    sync on across the accumulation; FSDP2 reshards after every backward,
    reshard_after_backward True), the backward gathering again unless "never" kept the
    forward's; under PP with "default"/"never" one gather in the first forward and one
    reduce-scatter in the schedule's last backward; "always" under PP re-gathers in every
    backward (and keeps it), so only the warm-up forwards gather."""
    reshard = policy(job, lay)
    if lay.pp == 1:
        return ((m, 1, 0, False), (m, int(reshard != "never"), 1, True))
    if keeps_unsharded(job, lay) and reshard != "always":
        return ((1, 1, 0, False), (1, 0, 1, True))
    return ((min(lay.pp, m), 1, 0, False), (m - 1, 1, 0, True), (1, 1, 1, True))


def data_parallel_time(
    job: Job,
    lay: Layout,
    dense: float,
    expert: float,
    fwd: float,
    bwd: float,
    m: int,
    layers: int = 1,
    fp8: float = 0.0,
    output: float = 0.0,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per step of one stage's FSDP2 traffic, the shape of
    `dp_sync.data_parallel`, `fwd` / `bwd` one micro-batch's forward and backward seconds on the
    stage, `layers` its blocks, `fp8` its float8 linear weights. Each block is an FSDP unit with
    its own collectives (`_passes` says which, per pass), each its own NCCL call paying its
    ring latency, prefetched one block ahead: FSDP2's forward prefetch and its backward prefetch
    of the next block (`dp_sync.unit_pipeline`, the physics of Megatron-FSDP's ZeRO 3 in
    `dp_sync._fsdp`). HSDP adds the all-reduce of the shards over the replicas after each
    reduce-scatter. An MoE model's dense and expert parameters (their own meshes) share the
    windows: FSDP2 issues every parameter group's all-gathers on one stream and its
    reduce-scatters on another (the comm context shared under the root), so their seconds add
    before the window comes off. `planner.model.rank_sync` charges it for torchtitan plans and
    Megatron's torch FSDP2 in place of Megatron's ZeRO traffic (`dp_sync.data_parallel`).

    `output`: the stage's output-layer parameters (TP-local; 0 off the last stage), which only
    the chunked loss under PP (`per_micro_batch_output`) takes out of the blocks' units."""
    rep = job.titan.dp_replicate
    n_d, n_e = shard_groups(job, lay)
    units = max(layers, 1)
    strides = ((lay.tp, n_d), (lay.expert_tp * lay.ep, n_e))
    own = per_micro_batch_output(job, lay, output)
    dense -= own
    per_param = (gathered_bytes_per_param(job, lay, dense, fp8), dtypes(job).param)
    ag = rs = 0.0
    for n_params, (stride, size), gathered in zip((dense, expert), strides, per_param, strict=True):
        hit = _memo_collectives(job, n_params / units, stride, size, rep, gathered)
        ag += hit[0]
        rs += hit[1]
    exposed = total = 0.0
    if ag + rs > 0:
        for count, gathers, reduces, backward in _passes(job, lay, m):
            per_unit = gathers * ag + reduces * rs
            window = (bwd if backward else fwd) / units
            exposed += count * dp_sync.unit_pipeline(per_unit, window, units)
            total += count * units * per_unit
    if own > 0:
        # the wrapper's own all-gather (:673, a blocking unshard nothing prefetches) shows;
        # the reduce-scatter of its last chunk runs on its stream under the compute before
        # the next micro-batch's loss (that micro-batch's forward at least, or the last's
        # backward)
        ag_o, rs_o = _memo_collectives(job, own, lay.tp, n_d, rep, BF16)
        exposed += m * (ag_o + max(rs_o - fwd, 0.0))
        total += m * (ag_o + rs_o)
    return exposed, max(total - exposed, 0.0)


def per_micro_batch_output(job: Job, lay: Layout, output: float) -> float:
    """The output-layer parameters (of the stage's `output`) that FSDP2 all-gathers and
    reduce-scatters once per micro-batch rather than with the blocks: all of them under PP with
    torchtitan's chunked loss, else 0. ChunkedLossWrapper (pytorch/torchtitan b5bcd76c
    components/loss.py:658-706) gathers the [norm, output] unit itself before the first chunk
    (:673), turns its gradient sync on for each micro-batch's last chunk (:677-680), and
    reshards it after the loss (:702-706); the PP schedule's no-sync (stage.py
    `backward_maybe_with_nosync`) covers the stage's backward, not the loss, which the last
    stage runs in its forward step, and the decoder's forward skips the output layer
    (models/common/decoder.py:293-298, trainer.py:498-513). Without PP the blocks' passes
    (`_passes`) already gather and reduce every unit every micro-batch."""
    if lay.pp == 1 or job.titan.loss_chunks == 1:
        return 0.0
    return max(output, 0.0)


def output_share(job: Job, lay: Layout, rank: int) -> float:
    """The output-layer parameters on one GPU of pipeline rank `rank`: its TP share on the
    output rank (as `rank_states` counts them for `states`), 0 elsewhere or when tied."""
    if rank != lay.output_rank:
        return 0.0
    return output_params(job.arch, job.arch.padded_vocab(lay.tp)) / lay.tp


def _memo_collectives(
    job: Job, n_params: float, stride: int, size: int, rep: int, gathered: float
) -> tuple[float, float]:
    """`_collectives` through `COLLECTIVES`; (0, 0) with nothing to move or no group."""
    if n_params <= 0 or size * rep <= 1:
        return 0.0, 0.0
    memo = COLLECTIVES.of(job)
    key = (n_params, stride, size, rep, gathered, *comms.constants())
    if (hit := memo.get(key)) is None:
        hit = memo[key] = _collectives(job, n_params, stride, size, rep, gathered)
    return hit
