"""A decoder layer's tensor-parallel charges per micro-batch: its TP collectives (Megatron's f and g
operators, `tensor_parallel_layer`, on `planner.model.comms`' collectives), what of them hides
under the layer's own GEMMs and what the hidden part still costs, and the same without
--tp-comm-overlap (what decides whether the overlap pays). `planner.model.layer_time` times the
layer's compute and calls it.

Overlapped traffic is not free: a collective hidden under compute holds `comms.sm_share` of the
SMs (COMM_KERNEL_SMS of the GPU's), so the compute under it runs that much longer; each hidden TP
second adds that share to the layer's exposed TP time (`Layer.tp`). torchtitan's async TP hides
the forward TP collectives too, each under its GEMM less one chunk (`planner.model.async_tp`), and
so does Megatron's --tp-comm-overlap, each collective with or beside its own GEMM as Transformer
Engine's userbuffers pipeline it (`planner.model.tp_overlap`); there the GEMMs of its pipelined and
bulk overlaps run on the SMs the userbuffers leave them for their whole length instead (its held
seconds). Context parallelism's ring hops (`planner.model.cp_time`) are point-to-point sends,
which NCCL runs on a channel or two per peer (NCCL_NCHANNELS_PER_NET_PEER, 2 by default), not a
collective's SMs: not charged."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.arch import ModelArch
from planner.inputs.hardware import ClusterSpec
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.userbuffers import slot_map
from planner.model import async_tp, comms, dsa_comm, gemm_shapes, tp_overlap
from planner.model.fp32 import value_bytes
from planner.model.job_memo import JobMemo

_Gemms = tuple[Sequence[tuple[float, float, float, float]], Sequence[float]]
_Charges = tuple[float, float, float, float]

TP_CHARGES: JobMemo[tuple[object, ...], _Charges] = JobMemo()
"""`tp_charges` per job and what it reads: the search times one layer's attention at the same
TP degree, tokens and recompute under many expert layouts (EP, expert TP, token dispatcher),
whose routed-expert GEMMs the TP charges never read."""


def tp_charges(
    job: Job,
    lay: Layout,
    kind: LayerKind,
    gemms: _Gemms,
    t: float,
    n_fwd: int,
    modules: tuple[str, ...],
) -> _Charges:
    """(shown, hidden, traffic, shown without the TP overlap) seconds of a layer's TP
    collectives per micro-batch (`Layer.tp`, `tp_hidden`, `tp_traffic`, `tp_plain`): the hidden
    part still holds comms.sm_share of the SMs the GEMMs under it run on, or under userbuffers
    the overlaps' SM margin holds its share of their GEMMs (`tp_overlap.layer_traffic`'s held
    seconds). `gemms`: the layer's linear GEMM shapes and forward seconds; t its tokens.
    Remembered per job on exactly what it reads besides the job: the collectives' constants
    (`comms.constants`); of the layout its TP degree, sequence parallelism, TP overlap and
    whether its experts sit on the gathered input (`experts_on_gathered_input`;
    `async_tp.applies` reads nothing else); the kind, tokens, forward passes and recompute
    modules; and of the GEMMs only the shapes and seconds before an MoE block (`_read_gemms`):
    an MoE block's windows are 0 whatever its GEMMs (`column_parallel_windows`,
    `async_tp.row_parallel_windows`), and MLA's windows read the mixer's "mla_up" GEMMs
    alone."""
    memo = TP_CHARGES.of(job)
    shapes, times = gemms
    n = _read_gemms(job.arch, kind, len(times))
    on_gathered = experts_on_gathered_input(job, lay)
    layout = (lay.tp, lay.sequence_parallel, lay.tp_comm_overlap, on_gathered)
    key = (
        *comms.constants(),
        kind,
        *layout,
        t,
        n_fwd,
        modules,
        tuple(shapes[:n]),
        tuple(times[:n]),
    )
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _tp_charges(job, lay, kind, gemms, t, n_fwd, modules)
    return hit


def _read_gemms(arch: ModelArch, kind: LayerKind, n: int) -> int:
    """How many of a layer's n linear GEMMs (`gemm_shapes.linear_gemms`' order) its TP charges
    read: those before its MoE block (the last block, `gemm_shapes.gemm_blocks`), else all."""
    blocks = gemm_shapes.gemm_blocks(arch, kind)
    if blocks and blocks[-1][0] == "moe":
        return blocks[-1][1].start
    return n


def _tp_charges(
    job: Job,
    lay: Layout,
    kind: LayerKind,
    gemms: _Gemms,
    t: float,
    n_fwd: int,
    modules: tuple[str, ...],
) -> _Charges:
    """`tp_charges`, computed."""
    arch, tp, share = job.arch, lay.tp, comms.sm_share(job.cluster, job.gemm_sm_margin)
    shapes, times = gemms
    keep = tp_blocks(job, lay, kind)
    windows, widths = column_parallel_windows(arch, shapes, times, kind), None
    if latents_gathered(job, kind):
        windows, widths = _mla_windows(arch, times, kind, windows)
        widths = _kept(widths, keep)
    cols = _kept(windows, keep)
    size = t * arch.hidden_size * value_bytes(job)  # the activations' dtype: 4 in fp32
    exposed, hidden = tensor_parallel_layer(
        job.cluster, tp, size, n_fwd, lay.sequence_parallel, cols,
        job.tp_backward_overlap, regather=not job.sp_keeps_gathered_input, widths=widths,
        gathered=gathered_share(job), grad_gathered=grad_output_share(job),
    )  # fmt: skip
    plain = exposed + share * hidden
    shown = None
    if async_tp.applies(job, lay):  # torchtitan's async TP: forward and backward pipelined
        row_w = _kept(async_tp.row_parallel_windows(arch, times, kind), keep)
        exposed, hidden = async_tp.layer_traffic(job.cluster, tp, size, n_fwd, cols, row_w)
    elif lay.tp_comm_overlap and lay.sequence_parallel:  # Transformer Engine's userbuffers
        row_w = _kept(async_tp.row_parallel_windows(arch, times, kind), keep)
        slots = slot_map(job.tp_overlap_cfg)
        fp8 = job.precision == "fp8"
        exposed, hidden, held = tp_overlap.layer_traffic(
            job.cluster, tp, size, n_fwd, (cols, row_w), fp8, slots
        )
        shown = exposed + held
    # a checkpointed MLP / MoE block re-runs its forward TP collectives (one block's pair)
    rerun = {"mlp"} if kind.ffn == "dense" else set()
    if kind.moe and keep[-1]:
        rerun = {"moe", "shared_experts"}
    again = 0.0
    if rerun & set(modules):
        again = comms.all_reduce(size, comms.place(job.cluster, 1, tp))
    if PER_OP in modules:  # torchtitan's per-op replay: each block's input gather again
        again += sum(keep) * _regather(job, lay, size)
    again += dsa_comm.indexer_gathers(job, lay, kind, t, n_fwd, modules)  # DSA's own gathers
    shown = exposed + share * hidden if shown is None else shown
    return shown + again, hidden, exposed + hidden + again, plain + again


PER_OP = "per_op"
"""The pseudo-module `replayed` adds to a per-op policy's (empty) recompute modules."""


def replayed(policy: str, modules: tuple[str, ...]) -> tuple[str, ...]:
    """The recompute modules `tp_charges` reads: Megatron's selective set, or under
    torchtitan's per-op policy `PER_OP`. Its save list keeps the reduce-scatters' outputs but
    not the all-gathers' (pytorch/torchtitan b5bcd76c distributed/activation_checkpoint.py:61-63;
    `planner.model.per_op_saved`), so the replay in the backward gathers each TP block's input
    again (with SP the Shard(1) -> Replicate gather before the attention and the MLP, e347b1e5
    models/llama3/infra/parallelize.py:223-238; without SP the block's output all-reduce, not
    saved either)."""
    return (*modules, PER_OP) if policy == PER_OP else modules


def _regather(job: Job, lay: Layout, size: float) -> float:
    """Seconds of one block's forward TP collective re-run by the per-op replay (`replayed`)."""
    group = comms.place(job.cluster, 1, lay.tp)
    if lay.sequence_parallel:
        return comms.all_gather(size * gathered_share(job), group)
    return comms.all_reduce(size, group)


FP8_GATHER_SCALE_BYTES = {"mxfp8": 1 / 32, "blockwise": 4 / 128, "nvfp4": 1 / 16}
"""Scale bytes per element Transformer Engine gathers beside quantised data: MXFP8 an E8M0 scale
per 32 values; blockwise (the activations' 1 x 128 tiles, TransformerEngine d0067d0d
pytorch/distributed.py `_all_gather_fp8_blockwise`, block_scaling_dim 1) a fp32 scale per 128;
NVFP4 an E4M3 scale per 16 (`_all_gather_nvfp4` :1435-1458, the scales' padding cut off
before the gather; its per-tensor amax is one fp32 value, not gathered: 0 here); delayed /
tensorwise one scalar per tensor (0 here)."""

GATHER_DATA_BYTES = {"nvfp4": 0.5}
"""Data bytes per element of a quantised gather: NVFP4's E2M1 values, two to a byte; FP8's 1."""

ROWWISE_ONLY_GATHER = ("delayed", "tensorwise")
"""Recipes whose gathers move only the row-wise data: TE's per-tensor FP8 quantisers gather it
and build the transpose after (`supports_only_rowwise_all_gather`, tensor/float8_tensor.py
d0067d0d :190-194, :396-400; distributed.py `_all_gather_fp8`). The block-scaled ones gather
each usage the quantiser asks for (`_all_gather_mxfp8`, `_start_all_gather_fp8_blockwise`,
`_all_gather_nvfp4` :1435-1500: the row-wise and the column-wise data and scales apart)."""


def gathered_share(job: Job) -> float:
    """Bytes the sequence-parallel input all-gathers of `tensor_parallel_layer` (the forward
    gather and the backward re-gather) move per byte of the layer's activations. Megatron-LM
    FP8 / NVFP4 (Transformer Engine's linear layers): TE quantises the input before its NCCL
    gathers, so they move the quantised data and scales of one usage (TransformerEngine d0067d0d
    pytorch/module/layernorm_linear.py:296-313 and linear.py:403-411 the forward gather, row-wise
    only; layernorm_linear.py:773-791 the backward re-gather, column-wise only,
    module/_common.py:35-55); the reduce-scatters stay 16-bit. NVFP4: 4 bits and an E4M3 scale
    per 16 values, 0.5625 bytes (`fill_userbuffers_buffer_for_all_gather` has no NVFP4 path:
    module/base.py:754, so Userbuffers stay FP8-only, `tp_overlap`). torchtitan's TP plans gather
    in the activations' dtype (no Float8 TP styles at b5bcd76c). Else 1."""
    if job.framework != "megatron" or not job.quantised:
        return 1.0
    recipe = job.quant_recipe
    per_usage = GATHER_DATA_BYTES.get(recipe, 1.0) + FP8_GATHER_SCALE_BYTES.get(recipe, 0.0)
    return per_usage / value_bytes(job)


def grad_output_share(job: Job) -> float:
    """The same for the row-parallel linear's output-gradient gather: TE's linear.py d0067d0d
    :903-905 asks its grad-output quantiser for both usages (dgrad the row-wise, wgrad the
    column-wise) before the gather (module/base.py:1746-1750), so the block-scaled recipes (MXFP8,
    blockwise, NVFP4) move both, twice `gathered_share`; the per-tensor FP8 ones the row-wise
    data alone (`ROWWISE_ONLY_GATHER`)."""
    share = gathered_share(job)
    if job.framework != "megatron" or not job.quantised:
        return share
    return share if job.quant_recipe in ROWWISE_ONLY_GATHER else 2 * share


def latents_gathered(job: Job, kind: LayerKind) -> bool:
    """Megatron-Core's multi-latent attention: its down-projections are whole on every TP rank
    and the TP group gathers their latents, not the layer's h-wide input, for the
    column-parallel up-projections (multi_latent_attention.py d98e8a64). torchtitan's MLA
    replicates the attention's input over TP before its projections (the h-wide gather)."""
    mla = job.arch.multi_latent_attention and kind.mixer == "attention"
    return mla and job.framework == "megatron"


def _mla_windows(
    arch: ModelArch, times: Sequence[float], kind: LayerKind, windows: tuple[float, ...]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The blocks' windows and gathered widths with the attention block's (the first) as
    Megatron's MLA has them: the latents' width over h (`gemm_shapes.mla_gathered_width`), under the
    up-projections' GEMMs (the column-parallel ones reading the gathered latents)."""
    parts = gemm_shapes.linear_gemm_parts(arch, kind)
    up = sum(x for x, part in zip(times, parts, strict=True) if part == "mla_up")
    width = gemm_shapes.mla_gathered_width(arch) / arch.hidden_size
    return (up, *windows[1:]), (width,) + (1.0,) * (len(windows) - 1)


def tp_blocks(job: Job, lay: Layout, kind: LayerKind) -> tuple[bool, ...]:
    """Per block of the layer (`gemm_shapes.gemm_blocks`), whether it runs the TP collectives of
    `tensor_parallel_layer` on its h-wide input. A mixer or a dense MLP does. An MoE block
    does only where a TP-sharded MLP reads the gathered input: a shared expert beside the routed
    ones (Megatron-Core's SharedExpertMLP, a ColumnParallelLinear / RowParallelLinear pair on the
    layer's TP group; torchtitan's dense-family plan for shared_experts), or torchtitan's routed
    experts sharded over TP without expert parallelism (its MoE wrapper replicates the input over
    TP only when EP is off: common moe_sharding.py `_moe_sharding_config` @b5bcd76c).
    Otherwise the token dispatcher routes each rank's own sequence shard (Megatron-LM
    token_dispatcher.py @d98e8a64: the input is [S/TP, B, H]) and any expert-TP gather of the
    routed copies is the dispatcher's traffic (`dispatch.moe_dispatch`)."""
    shared = bool(job.arch.moe_shared_expert_intermediate_size)
    gathered = shared or experts_on_gathered_input(job, lay)
    return tuple(block != "moe" or gathered for block, _ in gemm_shapes.gemm_blocks(job.arch, kind))


def experts_on_gathered_input(job: Job, lay: Layout) -> bool:
    """torchtitan without expert parallelism: its routed experts are TP-sharded on the MoE
    block's all-gathered input, a dense MLP's traffic (`tp_blocks`), not a dispatcher's."""
    return job.framework == "torchtitan" and lay.ep == 1


def _kept(windows: tuple[float, ...], keep: tuple[bool, ...]) -> tuple[float, ...]:
    return tuple(w for w, k in zip(windows, keep, strict=True) if k)


def column_parallel_windows(
    arch: ModelArch,
    shapes: Sequence[tuple[float, float, float, float]],
    times: Sequence[float],
    moe: bool | LayerKind,
) -> tuple[float, ...]:
    """Seconds of each block's column-parallel forward GEMMs (those reading the h-wide layer
    input; one backward GEMM, dgrad or wgrad, takes as long): what the block's backward TP
    collectives can run under (`gemm_shapes.gemm_blocks`: the attention's QKV or down-projections, a
    Mamba mixer's in_proj, fc1). An MoE block's collectives (where it has any, `tp_blocks`) are
    given no GEMM to hide under (0). `moe`: the layer's kind, or a transformer layer's
    MoE flag."""
    h = arch.hidden_size
    return tuple(
        0.0 if block == "moe" else sum(times[i] for i in idx[:-1] if shapes[i][1] == h)
        for block, idx in gemm_shapes.gemm_blocks(arch, moe)
    )


def tensor_parallel_layer(
    cluster: ClusterSpec,
    tp: int,
    act_bytes: float,
    n_fwd: int,
    sequence_parallel: bool,
    windows: tuple[float, ...],
    overlap_backward: bool = True,
    regather: bool = True,
    widths: tuple[float, ...] | None = None,
    gathered: float = 1.0,
    grad_gathered: float | None = None,
) -> tuple[float, float]:
    """(exposed, hidden) seconds of one decoder layer's TP traffic per micro-batch, S = t x h
    activation bytes. Each block (attention, MLP; a hybrid stack's layers have one, a Mamba mixer
    among them: one entry of `windows` per block) is a column-parallel linear and a row-parallel
    one (Megatron's f and g operators, Shoeybi et al. 2019 / Korthikanti et al. 2022):

    forward, per pass (n_fwd: 2 with full recompute): an all-reduce after each row-parallel
      linear, or with sequence parallelism an all-gather before the column-parallel one and a
      reduce-scatter after the row-parallel one; always exposed.
    backward, per block: the column-parallel linear's input gradient is all-reduced (with SP:
      reduce-scattered), and with SP the row-parallel linear's output gradient is all-gathered
      and, unless the gathered input was saved (`regather` False), the column-parallel input is
      all-gathered again for its weight gradient.

    `overlap_backward` (Megatron-LM's and Transformer Engine's column-parallel backward): the
    re-gather runs under the dgrad GEMM and the input-gradient all-reduce / reduce-scatter under
    the wgrad GEMM, each exposed only beyond that GEMM's time, the block's `windows` entry (its
    column-parallel forward GEMM time: dgrad and wgrad each equal it; 0 where nothing overlaps).
    Otherwise every collective blocks.

    `widths` (one per block, default 1): the column-parallel input's width over h, where a block
    gathers less than its input (Megatron-Core's MLA gathers its latents: `flops.
    mla_gathered_width`): the forward gather, the backward reduce-scatter (all-reduce without
    sequence parallelism) of that input's gradient and its re-gather move that many bytes; the
    row-parallel output's reduce-scatter (all-reduce) and its gradient's gather stay h wide.

    `gathered` (`gathered_share`): the bytes the sequence-parallel input all-gathers (its
    gather and re-gather) move per activation byte; `grad_gathered` (`grad_output_share`;
    None: `gathered`) the output gradient's gather; the reduce-scatters move the activations'
    own."""
    grad_gathered = gathered if grad_gathered is None else grad_gathered
    grp = comms.place(cluster, 1, tp)
    ar = comms.all_reduce(act_bytes, grp)
    half = comms.reduce_scatter(act_bytes, grp)
    exposed = hidden = 0.0
    for window, width in zip(windows, widths or (1.0,) * len(windows), strict=True):
        # forward: the all-reduce (with SP and a narrower input: its reduce-scatter and the
        # input's gather at its width); then (seconds, GEMM it can run under: 0 = none) of each
        # backward collective of the block
        if sequence_parallel:
            col = comms.reduce_scatter(width * act_bytes, grp)  # the input gradient's
            gather = comms.all_gather(gathered * width * act_bytes, grp)  # the input's
            grad_out = comms.all_gather(grad_gathered * act_bytes, grp)  # the output gradient's
            exposed += n_fwd * (gather + half)  # the input's gather, the output's reduce-scatter
            parts = [(grad_out, 0.0), (col, window)] + ([(gather, window)] if regather else [])
        else:
            exposed += n_fwd * ar
            parts = [(comms.all_reduce(width * act_bytes, grp), window)]
        for seconds, under in parts:
            shown = max(seconds - under, 0.0) if overlap_backward else seconds
            exposed += shown
            hidden += seconds - shown
    return exposed, hidden
