"""The Hagemann et al. 2023 layouts (arXiv:2311.05610) as planner jobs and layouts.

Data: benchmarks/data/hagemann_layouts.csv (numbers only, from the public repo
Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts @e13c2cb; see
benchmarks/data/hagemann_layouts.md). Settings per that note: A100 80 GB in
8-GPU nodes, bf16, ZeRO-1 with 16-bit gradients, 128,000-token vocabulary, a fixed 4,194,304-token
global batch; sequence parallelism only where the sheet records it. The training code is Aleph
Alpha's, not Megatron-LM: its loss runs on gathered logits (no vocab-parallel cross entropy), and
rows without the fused "RMS kernel" use PyTorch's RMSNorm, and its pipeline splits the embedding,
the layers, the final norm and the head as L + 3 equal items (`uniform_item_split`, the code's
default partition method; the paper does not name one, and the other, balanced by parameter
count, is a what-if: `balanced_item_split`).

Cluster, per the paper's experimental-setup section (OpenReview Y0AHNkVDeu; read in a public
Chinese-language reading note of it that links BBuf/how-to-optim-algorithm-in-cuda, as the paper
itself could not be fetched): 32 NVIDIA DGX A100 nodes of 8 A100 80 GB, third-generation NVLink
(600 GB/s) inside a node, NVIDIA Mellanox 200 Gb/s HDR InfiniBand between nodes; each layout ran
10 steps and the mean of the last 9 was recorded. That is the catalog a100-sxm-80gb as it stands
(NVLink3 300 GB/s per direction, 200 Gb/s HDR per GPU), so the rows use it unchanged.

What the training code did differently from Megatron-LM is modelled where it changes memory
(above) and in its TP collectives, which are plain blocking autograd functions
(`scaling/core/nn/linear/utils.py`: no backward overlap, `tp_backward_overlap=False`). Its
data-parallel sync (public Aleph-Alpha/scaling, `core/optimizer/optimizer.py`) runs
inside the optimizer step, after the whole backward: the gradients are all-reduced in fp32 and the
ZeRO-1 shards all-gathered in bf16, neither overlapped. The rows keep Megatron's overlapped
reduce-scatter because that is what the planner launches; benchmarks/ranking.py --residuals
measures how far the sweeps look like the serial sync instead, and `--dp-sync fp32_after_backward`
reruns them with it (`estimate`, `serial_dp_sync`: a setting of this training code, not of a
plan, so it lives here and not in planner).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, layer_time, params, stage_sync
from planner.model.dp_sync import data_parallel_groups
from planner.model.performance import Performance
from planner.model.shard import BF16, FP32
from planner.model.stage_params import stage_params

DpSync = Literal["megatron", "fp32_after_backward"]
"""How the data-parallel replicas synchronise: Megatron's overlapped sync (what planner
models and launches), or the training code's own fp32 all-reduce after the backward."""

CSV = Path(__file__).resolve().parent / "data" / "hagemann_layouts.csv"


@dataclass(frozen=True)
class Row:
    data: dict[str, str]
    job: Job
    layout: Layout
    dp_sync: DpSync = "megatron"

    @property
    def outcome(self) -> str:
        return self.data["outcome"]

    @property
    def group(self) -> str:
        """One measured sweep: model, sequence length, GPU count, source file."""
        d = self.data
        return f"{d['model']} s{d['seq_length']} n{d['num_gpus']} {Path(d['source_file']).stem}"

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        v = self.data["tokens_per_s_per_gpu"]
        return float(v) if v else None


KERNELS = ("flash_attention2", "flash_attentionv1.0.8", "flash_attention", "fused", "torch")


def uniform_item_split(num_layers: int, pp: int) -> tuple[int, ...] | None:
    """Decoder layers per stage when the embedding, the L layers, the final norm and the LM head
    (L + 3 items) are split uniformly, the first stages taking the remainder (Aleph-Alpha/scaling
    `pipe_partition_uniform`, its default `PipePartitionMethod.UNIFORM`)."""
    if pp == 1:
        return None
    base, extra = divmod(num_layers + 3, pp)
    sizes = [base + (1 if r < extra else 0) for r in range(pp)]
    sizes[0] -= 1  # embedding
    sizes[-1] -= 2  # final norm and LM head
    return tuple(sizes)


def balanced_item_split(arch: ModelArch, pp: int) -> tuple[int, ...] | None:
    """Decoder layers per stage under Aleph-Alpha/scaling's other partition method
    (`PipePartitionMethod.BALANCED`, `pipe_partition_balanced`, the one its example config
    selects): the same L + 3 items weighted by parameter count, cut where the heaviest stage is
    as light as it can be, each stage taking as many items as fit under that bound from the
    left. The paper does not say which method its runs used; this is a what-if."""
    if pp == 1:
        return None
    weights = [
        params.embedding_params(arch),
        *(sum(params.layer_params(arch, i)) for i in range(arch.num_layers)),
        params.final_norm_params(arch),
        params.output_params(arch),
    ]

    def packed(bound: int) -> list[int]:
        """Items per stage, greedily from the left, no stage heavier than `bound`."""
        counts, load = [0], 0
        for w in weights:
            if counts[-1] and load + w > bound:
                counts.append(0)
                load = 0
            counts[-1] += 1
            load += w
        return counts

    lo, hi = max(weights), sum(weights)  # the lightest possible heaviest stage is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(packed(mid)) <= pp else (mid + 1, hi)
    counts = packed(lo) + [0] * pp
    first = 0
    layers = []
    for n in counts[:pp]:
        # items [first, first + n) hold the decoder layers with item index 1..L
        layers.append(max(0, min(first + n, arch.num_layers + 1) - max(first, 1)))
        first += n
    return tuple(layers)


SPLITS = ("uniform", "balanced")
"""The pipeline partition methods of the training code (`Assumptions.split`)."""


@dataclass(frozen=True)
class Assumptions:
    """How the rows describe what the paper does not record: its runs' settings and the network
    the code achieved. The defaults are the modelled ones; each other value is a what-if
    (benchmarks/ranking.py options of the same names).

    nvlink_scale, ib_scale  the scale-up (NVLink) / scale-out (InfiniBand) tier's bandwidth
                            times this, 1 = the catalog A100 node (8 x 200 Gb/s HDR)
    split                   the code's pipeline partition method: "uniform" (its default) or
                            "balanced" (`balanced_item_split`)
    dp_sync                 "megatron" keeps the overlapped reduce-scatter the planner
                            launches; "fp32_after_backward" is the public code's own sync
                            (`serial_dp_sync`)
    """

    nvlink_scale: float = 1.0
    ib_scale: float = 1.0
    split: str = "uniform"
    dp_sync: DpSync = "megatron"

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.nvlink_scale <= 0 or self.ib_scale <= 0:
            raise ValueError(
                f"bandwidth factors must be > 0, got NVLink x{self.nvlink_scale:g}, "
                f"InfiniBand x{self.ib_scale:g}"
            )

    def describe(self) -> str:
        """The what-ifs in force, e.g. ", NVLink x0.5, balanced pipeline split" ("" if none)."""
        out = f", NVLink x{self.nvlink_scale:g}" if self.nvlink_scale != 1 else ""
        out += f", InfiniBand x{self.ib_scale:g}" if self.ib_scale != 1 else ""
        out += f", {self.split} pipeline split" if self.split != "uniform" else ""
        return out + (f", {self.dp_sync} DP sync" if self.dp_sync != "megatron" else "")


MODELLED = Assumptions()
"""The settings the benchmarks model the rows with."""


def rows(
    path: Path = CSV,
    kernels: tuple[str, ...] = ("flash_attention2",),
    outcomes: tuple[str, ...] = ("ok", "oom"),
    assume: Assumptions = MODELLED,
) -> Iterator[Row]:
    """Every row with one of the given attention kernels and outcomes, described per `assume`."""
    gpu = catalog.get_gpu("a100-sxm-80gb")
    tiers = [
        t.model_copy(update={"bandwidth_gb_per_s_per_gpu": t.bandwidth_gb_per_s_per_gpu * x})
        for t, x in zip(gpu.tiers, (assume.nvlink_scale, assume.ib_scale), strict=True)
    ]
    with path.open(newline="") as f:
        for d in csv.DictReader(f):
            if d["attention_kernel"] not in kernels or d["outcome"] not in outcomes:
                continue
            n = int(d["num_gpus"])
            cluster = ClusterSpec(
                gpu=gpu, num_gpus=n, gpus_per_node=8, memory_gib=gpu.memory_gib, tiers=tiers
            )
            arch = catalog.get_model(f"hagemann-{d['model']}")
            job = Job(
                arch=arch,
                cluster=cluster,
                seq_length=int(d["seq_length"]),
                global_batch_size=int(d["global_batch_size"]),
                main_grad_dtype="bf16",
                fused_norm=d["rms_norm_kernel"] == "1",
                cross_entropy="gathered",
                fused_swiglu=False,
                sp_keeps_gathered_input=True,
                tp_backward_overlap=False,
                flash_attention=d["attention_kernel"].startswith("flash"),
            )
            layout = Layout(
                tp=int(d["tp"]),
                pp=int(d["pp"]),
                dp=int(d["dp"]),
                sequence_parallel=d["sequence_parallel"] == "1",
                micro_batch_size=int(d["micro_batch_size"]),
                zero_stage=1,
                recompute="full" if d["recompute"] == "full" else "none",
                pipeline_layers=(
                    uniform_item_split(arch.num_layers, int(d["pp"]))
                    if assume.split == "uniform"
                    else balanced_item_split(arch, int(d["pp"]))
                ),
            )
            yield Row(d, job, layout, assume.dp_sync)


def serial_dp_sync(job: Job, lay: Layout) -> tuple[float, float]:
    """(exposed DP seconds, optimizer seconds) per step of the public code's optimizer step
    (Aleph-Alpha/scaling `core/optimizer/optimizer.py`, `allreduce.py`): after the whole backward
    it all-reduces each stage's gradients in fp32, then with ZeRO all-gathers the updated bf16
    parameters, nothing overlapped (per parameter 2 x 4 bytes through the all-reduce's two ring
    phases plus 2 through the all-gather), on the groups and tiers planner places them
    (`dp_sync.data_parallel_groups`). As in `cost.estimate`, the stage whose sync and optimizer
    step take longest decides."""
    groups = data_parallel_groups(job.cluster, lay)
    gpu = layer_time.gpu_of(job)
    best = (0.0, 0.0)
    for rank, layers in enumerate(lay.chunk_layers(job.arch.num_layers)):
        dense, expert = stage_params(job, lay, rank, layers)
        exposed = 0.0
        for n_params, grp in zip((dense, expert), groups, strict=True):
            if n_params <= 0 or grp.size <= 1:
                continue
            exposed += comms.all_reduce(n_params * FP32, grp)
            exposed += comms.all_gather(n_params * BF16, grp) if lay.zero_stage else 0.0
        opt = stage_sync.optimizer_time(job, lay, dense, expert, gpu)
        if exposed + opt >= sum(best):
            best = (exposed, opt)
    return best


def estimate(job: Job, lay: Layout, dp_sync: DpSync = "megatron") -> Performance:
    """`cost.estimate`, with the training code's own DP sync in place of Megatron's where
    `dp_sync` says so (the rates scale with the step time)."""
    perf = cost.estimate(job, lay)
    if dp_sync == "megatron":
        return perf
    exposed, opt = serial_dp_sync(job, lay)
    b = replace(perf.breakdown, dp_comm_exposed=exposed, dp_comm_hidden=0.0, optimizer=opt)
    faster = perf.step_time_s / b.step_time
    return replace(
        perf,
        breakdown=b,
        step_time_s=b.step_time,
        tokens_per_s_per_gpu=perf.tokens_per_s_per_gpu * faster,
        model_tflops_per_gpu=perf.model_tflops_per_gpu * faster,
        mfu=perf.mfu * faster,
    )
