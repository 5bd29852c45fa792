"""A pipeline stage's data-parallel sync and optimizer step, the pieces
`planner.model.rank_sync.stage_sync` puts together: what `planner.model.cost.estimate` adds to
the step after the pipeline, from the stage where the two take longest.

Sync: the stage's gradient reduction and parameter gathers (`planner.model.dp_sync` through
`planner.model.pools`; over several distributed-optimizer instances `planner.model.dp_instances`;
torchtitan's FSDP2 in `planner.model.fsdp2`), hidden under the windows
its forward and backward leave (the stage's layers, its output layers and, on the first rank, a
vision encoder: `cost.estimate` passes them), what hides still holding `comms.sm_share` of the
SMs.

Optimizer: memory-bound, pass by pass as Megatron-Core's distributed optimizer runs them
(`optimizer_time`): for each parameter of the shard a GPU updates, the copy of its gradient into
an fp32 main gradient (bf16 buffers only), the gradient norm's read, Adam's (the gradient,
ADAM_GRAD_READ_BYTES, and its master weight and two moments read and written, Job.optimizer_bytes
each way: 28 bytes with fp32 moments, 20 with bf16 ones) and the copy of the master weight back
to the model's 16-bit weight (`param_copy_bytes`: in fp32 training, where no master is kept, Adam
reads and writes the fp32 parameter in its place and nothing is copied back; under the
precision-aware optimizer TE's FusedAdam writes the weight itself and round-trips its 16-bit
states through fp32 copies, `adam_step.state_pass_bytes`); fp16's unscaling of the main
gradients (`planner.model.loss_scale`); and the zeroing of
the stage's whole gradient buffer before the next step, at HBM_EFFICIENCY x HBM bandwidth.
torchtitan's FSDP2 makes only the norm's and Adam's passes (its fp32 shard is the master; its
gradients are freed, not zeroed). A CPU-offloaded optimizer (`Job.optimizer_offload_fraction`)
updates its share on the host (`planner.model.optimizer_offload`), under which the GPU updates the
rest. Muon (`Job.optimizer`) adds its Newton-Schulz iterations over the decoder's matrices
(`planner.model.muon_time`).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_instances, dp_sync, optimizer_offload, shared_link
from planner.model.adam_step import state_pass_bytes, te_master, weight_write_bytes
from planner.model.fp32 import keeps_master, value_bytes
from planner.model.gemm import Gpu
from planner.model.loss_scale import unscale_bytes
from planner.model.rank_states import copies_main_grads
from planner.model.schedule import Chunks
from planner.model.shard import BF16
from planner.model.stage_params import quantised_decoder_params, quantised_params

ADAM_GRAD_READ_BYTES = 4.0
"""Adam reads each parameter's fp32 gradient once (the master weight and moments are read and
written: `Job.optimizer_bytes` each way)."""

GRAD_NORM_READ_BYTES = 4.0
"""The gradient norm (clip_grad_norm) reads each updated parameter's fp32 main gradient once:
Megatron-Core d98e8a64 DistributedOptimizer.get_main_grads_for_grad_norm takes the shard's main
gradients only, not the whole local buffer."""
MAIN_GRAD_COPY_BYTES = 2.0 + 4.0
"""Per updated parameter whose 16-bit gradient the step copies (`rank_states.copies_main_grads`):
the copy of its reduced gradient into an fp32 main gradient, read 2 and write 4 (d98e8a64
DistributedOptimizer._copy_model_grads_to_main_grads, `shard_model_grad.float()`, on the shard's
range only; with fp32 buffers `.float()` returns the buffer itself and nothing moves, and the
precision-aware optimizer mostly reads the buffer in place)."""
PARAM_COPY_BYTES = 4.0 + 2.0
"""Per updated parameter: the fp32 master weight read and the model's 16-bit weight written
after the update (d98e8a64 _copy_main_params_to_model_params), a pass apart from Adam's."""


def param_copy_bytes(job: Job, zero_stage: int) -> float:
    """Per updated parameter, the copy of the master weight back to the model's weight after the
    update: PARAM_COPY_BYTES beside 16-bit weights; in fp32 training the master read and the
    fp32 weight written (4 + 4) where a master is kept (`fp32.keeps_master`: Megatron-FSDP's
    main weights, the precision-aware optimizer's), else nothing. Without a master Adam updates
    the fp32 parameter in place: FP32Optimizer steps the parameters themselves
    (optimizer/__init__.py:683-686), and the distributed optimizer's shard of an fp32 parameter
    is a view of it (distrib_optimizer.py:466-475), so its copy back
    (`shard_model_param.data.copy_(shard_main_param)`, :2886) copies a view of the parameter
    buffer onto the same elements, which PyTorch returns at once (pytorch 00f7c46a
    aten/src/ATen/native/Copy.cpp copy_impl: "Exit early if self and src are views of the
    same data")."""
    if not keeps_master(job, zero_stage):
        return 0.0
    return PARAM_COPY_BYTES if job.params_dtype != "fp32" else 4.0 + value_bytes(job)


def optimizer_time(job: Job, lay: Layout, dense: float, expert: float, gpu: Gpu) -> float:
    """Seconds of one stage's optimizer step, all memory-bound (module docstring): the passes
    over the shard this GPU updates (ZeRO >= 1: 1 / dp of the stage's parameters), and the
    zeroing of the stage's whole gradient buffer (Megatron's DDP zero_grad_buffer; counted so
    at every ZeRO stage, which keeps a higher stage never faster than a lower one, the
    dominance the search's stops rely on)."""
    shard_d, shard_e, always_bytes, update, held = _optimizer_bytes(job, lay)
    updated = dense / shard_d + expert / shard_e
    if job.framework == "torchtitan":
        return always_bytes * updated / gpu.hbm
    always = always_bytes * updated + held * (dense + expert)
    host = optimizer_offload.host_step_time(
        job, job.optimizer_offload_fraction * updated, job.optimizer_offload_overlap
    )
    return always / gpu.hbm + max(update * updated / gpu.hbm, host)


def optimizer_rates(job: Job, lay: Layout, gpu: Gpu) -> tuple[float, float]:
    """Seconds per dense and per expert parameter of a stage (`stage_params`) that
    `optimizer_time` is at least: it is this linear form of the stage's parameters, but for a
    CPU-offloaded share's host step, in a max with the GPU's update and so never below it
    (`optimizer_time`: always / hbm + max(update x updated / hbm, host), updated = dense /
    shard + expert / shard, always = bytes x updated + held bytes x (dense + expert))."""
    shard_d, shard_e, always_bytes, update, held = _optimizer_bytes(job, lay)
    per = always_bytes + update
    return (per / shard_d + held) / gpu.hbm, (per / shard_e + held) / gpu.hbm


def _optimizer_bytes(job: Job, lay: Layout) -> tuple[int, int, float, float, float]:
    """`optimizer_time`'s coefficients: the (dense, expert) shards a GPU updates 1 / of, the
    bytes per updated parameter every step moves on the GPU, those of the GPU's update (in a
    max with a CPU-offloaded share's host step; torchtitan: 0, in the first), and the bytes
    per parameter the stage holds (the gradient buffer's zeroing; torchtitan: 0)."""
    # over one of the distributed optimizer's instances (`Job.optimizer_instances`), as
    # rank_states.updated_params shards them; HFSDP's optim strategy shards over all of them
    n = job.optimizer_instances if dp_instances.applies(job, lay) else 1
    if lay.zero_stage == 3 and job.outer_dp_sharding_strategy == "optim":
        n = 1
    shard_d = max(lay.dense_dp // n, 1) if lay.zero_stage >= 1 else 1
    shard_e = max(lay.expert_dp // n, 1) if lay.zero_stage >= 1 else 1
    if job.framework == "torchtitan":
        # FSDP2 keeps the fp32 parameter shard itself (the all-gather casts it to bf16), reduces
        # gradients straight into fp32 shards and frees them (zero_grad(set_to_none=True)): no
        # copy either way, no zeroing
        per_updated = GRAD_NORM_READ_BYTES + ADAM_GRAD_READ_BYTES + 2 * job.optimizer_bytes
        return shard_d, shard_e, per_updated, 0.0, 0.0
    # the CPU-offloaded share (optimizer_offload) is updated on the host, while the GPU updates
    # the rest: Adam's passes and the master's copy back over the GPU's share only
    on_gpu = 1.0 - job.optimizer_offload_fraction
    # (fp32 training without a master: the fp32 parameter is read and written in its place)
    z = lay.zero_stage
    copy_back = param_copy_bytes(job, z)
    if te_master(job, z):  # TE's kernel writes the weight: no copy back (adam_step)
        copy_back = weight_write_bytes(job)
    passes = state_pass_bytes(job, z)  # its 16-bit states' fp32 round trips
    update = on_gpu * (ADAM_GRAD_READ_BYTES + copy_back + passes) + 2 * job.optimizer_bytes
    copy = MAIN_GRAD_COPY_BYTES if copies_main_grads(job, z) else 0.0
    copy += unscale_bytes(job, z)  # fp16's unscaling of the main gradients
    return shard_d, shard_e, GRAD_NORM_READ_BYTES + copy, update, job.grad_bytes


def gathers_in_grad_buffer(job: Job, lay: Layout) -> bool:
    """Whether the distributed optimizer gathers the MXFP8 weights through the gradient buffer
    in bf16: MXFP8 with fp8_param_gather at ZeRO 1 (Megatron's DDP; Megatron-FSDP, ZeRO >= 2,
    turns the reuse off, arguments.py:1137 d98e8a64). There the buffer of the quantised weights
    is one shared buffer in the gradient dtype (param_and_grad_buffer.py:1160-1179), whose
    param_data is bf16: the buffer itself under bf16 gradients, a bf16 view of its first half
    under fp32 ones. TE cannot map MXFP8 storage into a parameter buffer (TransformerEngine
    002a3e57 tensor/utils.py replace_raw_data raises NotImplementedError for MXFP8Tensor;
    Megatron's arguments.py:1580-1586 says so), so --reuse-grad-buf-for-mxfp8-param-ag is the
    path that runs, and the one `planner.emit.megatron` emits with it."""
    return (
        job.framework != "torchtitan"
        and job.precision == "fp8"
        and job.fp8_recipe == "mxfp8"
        and job.low_precision_params
        and lay.zero_stage == 1
    )


def gather_zero_time(job: Job, lay: Layout, rank: int, chunks: Chunks, gpu: Gpu) -> float:
    """Seconds per step of zeroing the gradient buffer a second time where the MXFP8 weights are
    gathered through it (`gathers_in_grad_buffer`): after each bucket's all-gather,
    _post_param_sync quantises the gathered bf16 values into TE's storage and zeroes the
    bucket's param_data for the gradients to accumulate into (param_and_grad_buffer.py:301-335,
    `bucket.param_data.zero_()`), on top of the zero_grad_buffer before the step
    (training.py:3041, `optimizer_time`'s pass): BF16 bytes written per quantised weight of the
    rank (param_data is bf16 under either gradient dtype), at HBM bandwidth. 0 elsewhere."""
    if not gathers_in_grad_buffer(job, lay) or job.frozen_model:
        return 0.0
    fp8_dense, fp8_expert = quantised_params(job, lay, rank, chunks)
    return BF16 * (fp8_dense + fp8_expert) / gpu.hbm


def gathered_param_bytes(
    job: Job, lay: Layout, chunks: Chunks, dense: float, expert: float
) -> tuple[float, float]:
    """(dense, expert) bytes per parameter of the distributed optimizer's all-gather (and
    Megatron-FSDP's, ZeRO 3): the decoder layers' FP8 weights as 1-byte data with
    fp8_param_gather, NVFP4 weights as half a byte with fp4_param_gather (two values packed per
    uint8, param_and_grad_buffer.py d98e8a64: "the param buffer stores packed bytes (half the
    logical numel)") (ZeRO 1/2), the rest (and the decoder layers kept in bf16) bf16; in fp32
    training all fp32 (`fp32.value_bytes`: the parameter buffers take the parameters' dtype).
    MXFP8 weights gathered through the gradient buffer (`gathers_in_grad_buffer`) move bf16:
    the optimizer writes the fp32 master into that buffer as bf16
    (distrib_optimizer.py:2904-2930 `_copy_main_params_to_param_buffer`) and the all-gather
    runs on bucket.param_data (param_and_grad_buffer.py:521)."""
    if gathers_in_grad_buffer(job, lay):
        return BF16, BF16
    if not job.low_precision_params or lay.zero_stage not in (1, 2):
        plain = value_bytes(job)
        return plain, plain
    fp8_dense, fp8_expert = quantised_decoder_params(job, lay, chunks)
    saved = BF16 - (0.5 if job.precision == "fp4" else 1.0)

    def mean(fp8: float, n: float) -> float:
        return BF16 - saved * min(fp8, n) / n if n > 0 else BF16

    return mean(fp8_dense, dense), mean(fp8_expert, expert)


def dp_links(
    job: Job, lay: Layout, groups: tuple[comms.Group, comms.Group]
) -> tuple[bool, bool, bool, bool]:
    """Whether a stage's (TP, CP, expert all-to-all, host offload copies) traffic runs on a
    link its data-parallel `groups` use: a TP, CP or EP group whose bounding tier
    (`comms.Group.tier_name`: TP over 1 x tp, CP over tp x cp, EP over etp x ep as `comms.place`
    puts them) is one of the DP groups' (NVLink TP beside DP over the NIC is not; CP across nodes
    shares the NIC with DP across nodes, and NVLink CP the NVLink with NVLink DP); the host
    copies go over the GPU's link to host memory (`host_link`), off every tier. Where the GPU has
    no NVLink (`shared_link.applies`) its one PCIe link carries everything: all four are. In a
    full mesh (AMD's xGMI) a group inside it takes only the links to its own members: it shares
    one with DP only over a common peer (`_common_peer`)."""
    if shared_link.applies(job.cluster):
        return True, True, True, True
    cluster = job.cluster
    dp_tiers = {g.tier_name for grp in groups if grp.size > 1 for g in (grp, *grp.others)}
    inner = cluster.tiers[0]
    dp = [
        x for x, grp in zip(dp_sync.data_parallel_strides(lay), groups, strict=True) if grp.size > 1
    ]
    on = []
    for stride, size in ((1, lay.tp), (lay.tp, lay.cp), (lay.expert_tp, lay.ep)):
        tier = comms.place(cluster, stride, size).tier_name if size > 1 else None
        shared = tier in dp_tiers
        if shared and tier == inner.name and inner.mesh:  # only over their common peers
            shared = any(_common_peer((stride, size), d) for d in dp)
        on.append(shared)
    return on[0], on[1], on[2], False


def _common_peer(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two groups of (stride, size) ranks through one rank hold another rank in common:
    in a full mesh (`LinkTier.mesh`: AMD's xGMI, a link per pair of GPUs) each group uses the
    links to its own members only (`comms.mesh_link`), so two groups share a link only where
    they share a peer (the CP ring inside the dense DP group, dp x cp ranks tp apart, does; TP's
    neighbours and DP's ranks tp apart do not)."""
    (sa, na), (sb, nb) = a, b
    return bool({sa * i for i in range(1, na)} & {sb * j for j in range(1, nb)})


def other_link_seconds(
    job: Job,
    lay: Layout,
    groups: tuple[comms.Group, comms.Group],
    exposed: tuple[float, float, float, float],
) -> float:
    """Seconds per micro-batch of a stage's `exposed` (TP, CP, expert all-to-all, host offload
    copies) traffic that runs on links other than its data-parallel groups' (`groups`,
    `dp_sync.data_parallel_groups`; which are other: `dp_links`): time the stage waits with
    the DP stream free to send.

    The DP collectives run on NCCL's stream beside the compute stream (Megatron-LM d98e8a64
    param_and_grad_buffer.py:676-684, async under --overlap-grad-reduce; FSDP's streams, the
    same) for the stage's whole busy time, not only while it computes: the seconds the compute
    stream waits on another link's transfer are window too. A slower GPU lengthens the compute by
    at least what it shortens any one such wait (each is the transfer beyond the compute it
    runs under): with the waits in them, the windows no longer shrink as the compute grows.
    Approximations: on the 8-GPU NVLink boards a GPU's host copies and its GPUDirect traffic to
    the NIC cross the same x16 link to their PCIe switch (host_link: the copies take its
    uplink's share, half of it), contention not modelled, as `shared_link` leaves it on NVLink
    GPUs. Not counted: the pipeline's blocking sends (on the pipeline's own link, often the NIC
    DP uses), and the idle time after a stage's last backward while the drain reaches the first
    stage, which would need each stage's end from the schedule (`cost.estimate` adds the sync
    after the whole pipeline), nor each micro-batch's wait of a faster stage on the slowest (the
    pooled search's per-rank tail lines could not bound a tail that reads other ranks' times)."""
    return _off_dp(exposed, dp_links(job, lay, groups))


def dp_link_hidden(
    job: Job,
    lay: Layout,
    groups: tuple[comms.Group, comms.Group],
    hidden: tuple[float, float, float],
) -> float:
    """Seconds per micro-batch of a stage's `hidden` (TP, CP, expert all-to-all) traffic that
    runs on a link of its data-parallel `groups` (`dp_links`): seconds of the compute during
    which that link already carries another stream, so DP's collectives cannot use them. A
    second of compute hides at most a second of traffic on one link: where both took it whole,
    a slower GPU's longer compute hid its growth twice over (one more second of window for TP's
    or the CP ring's hidden traffic and one for DP's on the same NVLink or NIC), and the step
    predicted shorter (QA property test, a power cut: -0.17%). The host copies hidden under the
    compute of a PCIe-only GPU are left to its link's floor (`shared_link`, which counts them
    once each way), as before."""
    return _on_dp(hidden, dp_links(job, lay, groups))


def link_window_seconds(
    job: Job,
    lay: Layout,
    groups: tuple[comms.Group, comms.Group],
    exposed: tuple[float, float, float, float],
    hidden: tuple[float, float, float],
) -> float:
    """`other_link_seconds` of `exposed` less `dp_link_hidden` of `hidden`, the links sorted
    once: what a stage's waits add to its DP windows per micro-batch (`sync_windows`' extra)."""
    return window_extra(dp_links(job, lay, groups), exposed, hidden)


def window_extra(
    on: tuple[bool, bool, bool, bool],
    exposed: tuple[float, float, float, float],
    hidden: tuple[float, float, float],
) -> float:
    """`link_window_seconds` with the links (`on`: `dp_links` of the stage's job, layout and
    groups) sorted already: `cost.estimate` sorts them once for every rank of one GPU kind."""
    return _off_dp(exposed, on) - _on_dp(hidden, on)


def _off_dp(exposed: tuple[float, ...], on: tuple[bool, ...]) -> float:
    """The seconds of `exposed` on links DP does not use (`on`: `dp_links`)."""
    return sum(s for s, shared in zip(exposed, on, strict=True) if not shared)


def _on_dp(hidden: tuple[float, ...], on: tuple[bool, ...]) -> float:
    """The seconds of `hidden` (TP, CP, expert all-to-all) on links DP uses."""
    return sum(s for s, shared in zip(hidden, on[:3], strict=True) if shared)


def sync_windows(fwd: float, bwd: float, rec: float, extra: float) -> tuple[float, float]:
    """The (forward, backward) windows a stage's DP traffic hides in per micro-batch: its
    forward `fwd` and backward `bwd` (recompute `rec` in it) and the `extra` seconds it waits on
    other links (`other_link_seconds`) less those its own link carries other hidden traffic
    (`dp_link_hidden`; `extra` < 0 where those are more), split as its forward and backward
    compute without the recompute (fwd : bwd - rec; the exposed and hidden seconds are not timed
    pass by pass), so the split does not move with the recompute policy
    (`planner.search.fsdp_bound` splits its windows alike), each window at least 0."""
    plain = fwd + bwd - rec
    if extra == 0 or plain <= 0:
        return fwd, bwd
    return max(fwd + extra * fwd / plain, 0.0), max(bwd + extra * (bwd - rec) / plain, 0.0)
