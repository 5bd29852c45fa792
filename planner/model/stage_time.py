"""What one pipeline stage (rank) runs per micro-batch, the pieces `planner.model.cost` assembles
into the step time: the layer times of a layout, the layers each rank runs, and the EP and
CPU-offload traffic its overlap leaves exposed (`planner.model.stage_offload`).

Layer times (`layout_times`): each kind of layer's (`ModelArch.kinds`: a transformer's dense and
MoE layers, a hybrid stack's Mamba, attention, MLP and MoE layers) and the output layer's times of
`planner.model.layer_time`,
memoised per job and per layout without the fields they do not read (`_layer_key`: the search
scores thousands of layouts that differ only in pipeline, data-parallel, sharding and overlap
fields). Per rank (`planner.model.rank_mix`): its decoder layers of each kind, plus on the MTP
rank each MTP layer (a decoder layer of the last layer's kind, or a hybrid stack's MTP pattern;
bf16 ones under Megatron's NVFP4, `mtp_precision`) and on the last rank the output layer, once
more per MTP depth, wherever the MTP layers sit; with block full recompute only
the first recompute_num_layers layers of each chunk are recomputed (Megatron --recompute-method
block).

EP overlap and CPU offloading exposure: `planner.model.ep_overlap` (`ep_exposed`, `a2a_floor`,
re-exported here) and `planner.model.stage_offload`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from operator import itemgetter

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import embedding_grads, fsdp2, t5
from planner.model.bf16_layers import bf16_twin
from planner.model.ep_overlap import a2a_floor as a2a_floor
from planner.model.ep_overlap import ep_exposed as ep_exposed
from planner.model.gemm import Gpu
from planner.model.host_floor import issued_layer
from planner.model.job_memo import JobMemo
from planner.model.layer_keys import LAYER_CORES
from planner.model.layer_parts import ATTENTION_CORES, PARTS
from planner.model.layer_time import Layer, gpu_of, layer_time
from planner.model.layer_tp import TP_CHARGES
from planner.model.mtp_precision import mtp_quantised
from planner.model.output_time import mtp_projection, output_layer_time
from planner.model.vision_time import EncoderTime, block_of, encoder_time

LAYER_TIMES: JobMemo[tuple[object, ...], tuple[Gpu, tuple[Layer, ...], float, Layer | None]] = (
    JobMemo()
)
"""Layer times per job and per layout with the fields the layer times do not read set to fixed
values (`_layer_key`, keyed by `_memo_key`: the same equality as a plain tuple), with the
layout's MTP projection (`output_time.mtp_projection`; None without MTP layers): the search
scores thousands of layouts that differ only in those fields;
and under `_dense_memo_key` a kind without experts alone (no output layer), shared by
layouts that differ only in their experts, and under ("heads", ...) the output layer and MTP
projection alone (`_HEADS_READ`). Cleared by benchmarks/fit_constants.py when it
changes a layer_time constant."""

ENCODER_TIMES: JobMemo[tuple[object, ...], EncoderTime] = JobMemo()
"""A vision encoder's time per job and `_memo_key` (`vision_time.encoder_time`), beside
LAYER_TIMES and cleared with it."""


_FIXED: dict[str, object] = {
    "pp": 1,
    "dp": 1,
    "vpp": 1,
    "zero_stage": 1,
    "pipeline_layers": None,
    "pipeline_layout": None,
    "recompute_method": "uniform",
    "recompute_num_layers": 1,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "ep_comm_overlap": False,
    "overlap_p2p_comm": True,
    "overlap_grad_reduce": True,
    "overlap_param_gather": True,
    "cpu_offloading_num_layers": 0,
    "offload_modules": (),
    "microbatch_group_size_per_vp_stage": None,
}
"""The fields `_layer_key` fixes, and their fixed values. Offloading is among them: a layer's
time per micro-batch carries its activations' one-way transfer time whether or not it is
offloaded (`Layer.offload`); how many layers or which modules are offloaded is the stage's
business (`stage_offload.offload_exposed`, `stage_offload.fine_offload_exposed`). So is the
interleaved schedule's micro-batch group, which only orders the micro-batches (DeepSeek-V3 on
2,048 H800: 2,162 keys with it, 1,801 without; tests/model/test_layer_group_key.py)."""


def _layer_key(lay: Layout) -> Layout:
    """The layout as the layer times see it: pipeline, data-parallel, sharding, offloading and
    the schedule's overlap and micro-batch group fields (`_FIXED`) do not change one layer's
    time per micro-batch."""
    return lay.with_(**_FIXED)


_READ = tuple(f.name for f in fields(Layout) if f.name not in _FIXED)
_READ_VALUES = itemgetter(*_READ)
"""A layout's `__dict__` to its `_READ` values, as a tuple (one C call)."""


def _memo_key(lay: Layout) -> tuple[object, ...]:
    """`_layer_key(lay)` as a plain tuple, cheaper to build and hash: the values of the fields
    `_layer_key` keeps (`_READ`, in field order). Two layouts have equal tuples exactly when
    their `_layer_key`s are equal, as those set every other field to the same constants
    (`_FIXED`)."""
    return _READ_VALUES(lay.__dict__)


_DENSE: dict[str, object] = {
    "ep": 1,
    "etp": None,
    "moe_token_dispatcher_type": "alltoall",
    "moe_flex_dispatcher_backend": "deepep",
}
"""The expert fields `_dense_key` fixes, and their fixed values."""


def _dense_key(key: Layout) -> Layout:
    """A `_layer_key` as the dense layer's time sees it: no expert field reaches it (expert
    parallelism, expert TP, the token dispatcher only shape the MoE layer;
    tests/search/test_scaling_memo.py checks the times bit for bit)."""
    return key.with_(**_DENSE)


def _dense_memo_key(kind: LayerKind, key: Layout) -> tuple[object, ...]:
    """`LAYER_TIMES`' key of a kind without experts on the layer key `key` (`_made`'s): the
    kind's name, and `_dense_key(key)` as a flat tuple (its data-parallel size, set in test mode,
    and its `_READ` values), equal exactly when those layouts are (every other field of theirs
    is fixed), and cheaper to build, hash and compare."""
    d = {**key.__dict__, **_DENSE}
    return ("dense", kind.name, d["dp"], *_READ_VALUES(d))


@dataclass(frozen=True)
class LayoutTimes:
    """What every rank of one layout shares: the GPU, micro-batches per step, the time of a layer
    of each kind the model has (`ModelArch.kinds`, in order) and of the output layer (and the
    layers' times without recompute, which block recompute runs on the rest of a chunk), and the
    rank holding the MTP layers."""

    gpu: Gpu
    m: int
    layers: tuple[Layer, ...]
    out: float
    plain: tuple[Layer, ...]
    mtp_rank: int | None
    bf16: tuple[Layer, ...] = ()
    """Each kind's layer as the job's bf16 layers run it (`bf16_layers`; empty without them)."""
    bf16_plain: tuple[Layer, ...] = ()
    """The same without recompute (block full recompute's other layers)."""
    encoder: EncoderTime = field(default_factory=EncoderTime)
    """The first rank's own work per micro-batch: a vision encoder (`vision_time`; zero without
    one) and the word embedding's dense backward (`embedding_grads.backward_time`)."""
    mtp_proj: Layer | None = None
    """One MTP depth's projection (`output_time.mtp_projection`), in the MTP rank's mix once per
    depth (`rank_mix`); None without MTP layers."""
    mtp_layers: tuple[Layer, ...] = ()
    """Each kind's layer as the MTP layers run it where that is not as the decoder's: Megatron's
    NVFP4 jobs run them in bf16 (`mtp_precision`), as the bf16 twin; empty otherwise."""
    mtp_plain: tuple[Layer, ...] = ()
    """The same without recompute (block full recompute leaves the MTP layers whole)."""

    @property
    def dense(self) -> Layer:
        """A transformer's dense layer (the first kind)."""
        return self.layers[0]


LAYOUT_TIMES: JobMemo[tuple[object, ...], LayoutTimes] = JobMemo()
"""`layout_times` per job and what it reads of the layout (`_times_key`, the micro-batches, the
recompute method and the MTP rank): the search asks for the times of most layouts several times
(their bounds, their estimates)."""

# the memos made with the layer times
LAYER_TIMES.clears(LAYER_CORES, PARTS, ATTENTION_CORES, TP_CHARGES, LAYOUT_TIMES)


def layout_times(job: Job, lay: Layout) -> LayoutTimes:
    """The `LayoutTimes` of a layout (its layer times from the memo), remembered
    (`LAYOUT_TIMES`)."""
    m = max(lay.num_microbatches(job.global_batch_size), 1)
    tkey = _times_key(job, lay)
    mtp = lay.mtp_rank(job.arch.num_layers, job.arch.mtp_num_layers)
    memo = LAYOUT_TIMES.of(job)
    encoder = job.vision_encoder is not None or job.t5_encoder is not None
    key = (*tkey, m, lay.recompute_method, block_of(lay) if encoder else None, mtp)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _layout_times(job, lay, tkey, m, mtp)
    return hit


def _layout_times(
    job: Job, lay: Layout, tkey: tuple[object, ...], m: int, mtp: int | None
) -> LayoutTimes:
    """`layout_times`, computed (`tkey`, `m` and `mtp` the layout's `_times_key`, micro-batches
    and MTP rank)."""
    gpu, layers, out_layer, proj = _times(job, lay, tkey)
    plain = layers
    if lay.recompute == "full" and lay.recompute_method == "block":
        lean = lay.with_(recompute="none")
        plain = _times(job, lean, _times_key(job, lean))[1]
    bf16: tuple[Layer, ...] = ()
    bf16_plain: tuple[Layer, ...] = ()
    if job.quantised and (job.bf16_layers_at_start or job.bf16_layers_at_end):
        twin = layout_times(bf16_twin(job), lay)
        bf16, bf16_plain = twin.layers, twin.plain
    # the first rank's word-embedding lookup's dense backward (each MTP depth's own lookup:
    # `output_time.mtp_projection`)
    enc = _encoder(job, lay)  # built whole: `dataclasses.replace` walks its fields each time
    bwd = enc.bwd + embedding_grads.backward_time(job, lay, gpu)
    encoder = EncoderTime(fwd=enc.fwd, bwd=bwd, tp=enc.tp)
    proj = None if mtp is None else proj
    out = LayoutTimes(gpu, m, layers, out_layer, plain, mtp, bf16, bf16_plain, encoder, proj)
    if mtp is not None and job.quantised and not mtp_quantised(job):  # NVFP4: bf16 MTP layers
        twin = layout_times(bf16_twin(job), lay)
        out = replace(out, mtp_proj=twin.mtp_proj, mtp_layers=twin.layers, mtp_plain=twin.plain)
    return out


_NO_ENCODER = EncoderTime()
"""A job without an encoder's (frozen: one for every layout)."""


def _encoder(job: Job, lay: Layout) -> EncoderTime:
    """The layout's vision (or T5) encoder time, once per job and layer key (ENCODER_TIMES)."""
    if job.vision_encoder is None and job.t5_encoder is None:
        return _NO_ENCODER
    memo = ENCODER_TIMES.of(job)
    key = (*_memo_key(lay), block_of(lay))
    if key not in memo:
        memo[key] = encoder_time(job, _layer_key(lay), gpu_of(job), block_of(lay))
    return memo[key]


_GPU = ("gpu",)
"""`LAYER_TIMES`' entry for the job's `gpu_of` (its first element), on which every layer time of
the job is computed."""


def _layer_dp(job: Job, lay: Layout) -> int:
    """The data-parallel size the layer times see: 1 (`_FIXED`) but in test mode (its per-layer
    checks visit every data-parallel rank, `host.realtime_test_s`) and where torchtitan's float8
    FSDP all-gather runs (`fsdp2.float8_gather`, which reads dp: the gathered float8 weight
    serves both GEMMs, `linear_time.weights_cast_per_use`): the layout's own there."""
    return lay.dp if job.test_mode or fsdp2.float8_gather(job, lay) else 1


def _times_key(job: Job, lay: Layout) -> tuple[object, ...]:
    """`LAYER_TIMES`' key of a layout: its `_memo_key`, and its `_layer_dp` where that is not 1."""
    tkey = _memo_key(lay)
    dp = _layer_dp(job, lay)
    return (*tkey, dp) if dp != 1 else tkey


def _times(
    job: Job, lay: Layout, tkey: tuple[object, ...]
) -> tuple[Gpu, tuple[Layer, ...], float, Layer | None]:
    """(GPU, each kind's layer, output layer, MTP projection) times of a layout (`tkey` its
    `_times_key`), from one memo entry. A kind without experts is memoised under `_dense_key`
    (no expert field reaches it); the output layer and the MTP projection
    (`output_time.mtp_projection`, None without MTP layers) under the fields they read
    (`_HEADS_READ`)."""
    memo = LAYER_TIMES.of(job)
    hit = memo.get(tkey)
    if hit is None:
        hit = memo[tkey] = _made(job, lay, memo)
    return hit


def _made(
    job: Job,
    lay: Layout,
    memo: dict[tuple[object, ...], tuple[Gpu, tuple[Layer, ...], float, Layer | None]],
) -> tuple[Gpu, tuple[Layer, ...], float, Layer | None]:
    """`_times`' memo entry of a layout, computed (its dense kinds from their own entries)."""
    plain_key = _layer_key(lay)
    dp = _layer_dp(job, lay)
    key = plain_key.with_(dp=dp) if dp != 1 else plain_key
    if _GPU not in memo:  # the job's GPU, once for all its layer times
        memo[_GPU] = (gpu_of(job), (), 0.0, None)
    gpu = memo[_GPU][0]
    cores = LAYER_CORES.of(job)
    layers: list[Layer] = []
    for kind in job.arch.kinds:
        if kind.moe:
            one = layer_time(job, key, gpu, kind, cores)
            layers.append(issued_layer(one, job, key, kind))
            continue
        dkey = _dense_memo_key(kind, key)
        hit = memo.get(dkey)
        if hit is None:
            dense = _dense_key(key)
            one = layer_time(job, dense, gpu, kind, cores)
            if job.t5_encoder is not None:  # a T5 decoder layer's cross-attention
                one = t5.cross_attention(job, dense, gpu, one)
            hit = memo[dkey] = (gpu, (issued_layer(one, job, dense, kind),), 0.0, None)
        layers.append(hit[1][0])
    hkey = (_HEADS, *_HEADS_VALUES(key.__dict__))
    if hkey not in memo:
        proj = mtp_projection(job, plain_key, gpu) if job.arch.mtp_num_layers else None
        memo[hkey] = (gpu, (), output_layer_time(job, key, gpu), proj)
    _, _, out_layer, proj = memo[hkey]
    return gpu, tuple(layers), out_layer, proj


_HEADS = "heads"
_HEADS_READ = ("micro_batch_size", "cp", "tp", "sequence_parallel")
_HEADS_VALUES = itemgetter(*_HEADS_READ)
"""The layout fields the output layer (`output_time.output_layer_time`) and an MTP depth's
projection (`output_time.mtp_projection`) read: `LAYER_TIMES` keeps the two under
(_HEADS, their values), shared by the many layer keys that differ in nothing else."""
