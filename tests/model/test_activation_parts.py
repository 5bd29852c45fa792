"""The activations' parts memo (`stage_activations.ACTIVATION_PARTS`): keyed without the
data-parallel size and the expert-parallel fields (`_PARTS_UNREAD`), and shared by `planner
scale`'s GPU counts (`scaling.job_at`). Oracle: `stage_activations.stage_activations`, which
computes a rank's activations afresh from the same shard and layer bytes with no memo, bit for
bit against what `memory.estimate` reads through the memos, filled first with every layout of
the problem (layouts that differ in their expert parallelism, dispatcher, EP overlap, recompute
and micro-batch among them), so that a key missing a field the parts read would hand one
layout another's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import memory
from planner.model.bf16_layers import bf16_ranges
from planner.model.job_memo import JobMemo
from planner.model.memory import ACTIVATION_SCALE, fragmentation
from planner.model.stage_activations import (
    ACTIVATION_PARTS,
    per_layer,
    shard,
    stage_activations,
)
from planner.search.scaling import job_at
from tests.model.test_layer_memos import problem_layouts
from tests.search.brute_force import make_job

NAMES = ["deepseek-v2-lite-16xh100", "qwen3-30b-a3b-64xh100", "mixtral-ep-overlap", "llama8b-fp8"]


def afresh(job: Job, lay: Layout) -> list[float]:
    """Each stage's activations as `memory.stage_memory` reports them, from `stage_activations`
    computed with no memo (the shard and layer bytes as `memory` makes them: 16-bit linear
    inputs where a rank's chunks hold the job's bf16 layers)."""
    out = []
    for rank, chunks in enumerate(lay.chunk_layers(job.arch.num_layers)):
        sh = shard(job, lay)
        per, quantised = per_layer(job.arch, sh), None
        if sh.quantised and bf16_ranges(job, chunks):
            quantised, sh = per, replace(sh, linear_bytes=sh.value_bytes)
            per = per_layer(job.arch, sh)
        acts = stage_activations(job, lay, rank, chunks, sh, per, quantised)
        out.append(acts * ACTIVATION_SCALE * fragmentation(job))
    return out


def through_memos(job: Job, lay: Layout) -> list[float]:
    """Each stage's activations in `memory.estimate`'s report (read through its memos)."""
    return [st.activations for st in memory.estimate(job, lay).stages]


@pytest.mark.parametrize("name", NAMES)
def test_parts_read_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = problem_layouts(name)
    lays = lays[:: max(len(lays) // 400, 1)]
    JobMemo.forget_all()
    warm = [through_memos(job, lay) for lay in lays]
    for lay, want in zip(lays, warm, strict=True):
        assert afresh(job, lay) == want, lay.describe()


def test_expert_parallel_variants_share_one_part_per_rank() -> None:
    # Mixtral 8x7B on 64 H100, tp 2 pp 4 dp 8: ep 1, 2, 4, 8 with each dispatcher, the EP
    # overlap on and off where it runs (ep > 1, alltoall), full recompute and none: 22 layouts
    # of 4 ranks. Their parts are shared where their shards are equal (the shard reads the
    # expert degrees and the dispatcher for the MoE layers' token loads: it is in the key), at
    # on average over 3 variants to each part here, while the activations of those that share
    # them differ (the dispatchers' tokens, the overlap's extra layer: `peak_bytes`' share)
    job = make_job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    JobMemo.forget_all()
    seen: dict[tuple[str, int], set[float]] = {}
    for recompute in ("none", "full"):
        base = Layout(tp=2, pp=4, dp=8, sequence_parallel=True, recompute=recompute)
        for ep in (1, 2, 4, 8):
            for dispatcher in ("alltoall", "allgather"):
                for overlap in {False, ep > 1 and dispatcher == "alltoall"}:
                    lay = base.with_(
                        ep=ep, moe_token_dispatcher_type=dispatcher, ep_comm_overlap=overlap
                    )
                    got = through_memos(job, lay)
                    assert got == afresh(job, lay), lay.describe()
                    for rank, acts in enumerate(got):
                        seen.setdefault((recompute, rank), set()).add(acts)
    asked = 22 * 4
    assert len(ACTIVATION_PARTS.of(job)) * 3 <= asked  # the variants share their parts
    assert all(len(v) > 1 for v in seen.values())  # yet the variants' activations differ


def test_scale_sizes_share_the_parts_bit_for_bit() -> None:
    # Mixtral 8x7B on 64 .. 4,096 H100: a rank's parts at one size are those of the same
    # layout's ranks at another (only dp differs), read through the memo the sizes share
    job = make_job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    lays = (
        Layout(tp=8, pp=4, dp=2, sequence_parallel=True, recompute="full"),
        Layout(tp=4, pp=2, dp=8, ep=8, cp=2, sequence_parallel=True, vpp=2),
        Layout(tp=2, pp=4, dp=8, ep=4, sequence_parallel=True, micro_batch_size=2),
    )
    sizes = (64, 512, 4096)
    JobMemo.forget_all()
    warm = {}
    for n in sizes:
        j = job_at(job, n)
        assert ACTIVATION_PARTS.of(j) is ACTIVATION_PARTS.of(job)
        for lay in lays:
            lay = lay.with_(dp=n // (lay.tp * lay.cp * lay.pp))
            warm[n, lay] = through_memos(j, lay)
    shared = len(ACTIVATION_PARTS.of(job))
    assert shared < sum(map(len, warm.values()))  # the sizes read one another's parts
    for (n, lay), want in warm.items():
        JobMemo.forget_all()
        alone = job_at(job, n)
        assert afresh(alone, lay) == want == through_memos(alone, lay), (n, lay.describe())


PP4: dict[str, object] = {"pp": 4, "dp": 1}
ONE: dict[str, object] = {"pp": 1, "dp": 4}
EMBEDDING = "account_for_embedding_in_pipeline_split"
LLAMA_8B_VARIANTS: tuple[tuple[dict[str, object], dict[str, object]], ...] = (
    ({}, {"cp": 2, "dp": 1}),
    ({}, {"tp": 4, "dp": 1}),
    ({}, {"pp": 4, "dp": 1}),
    ({}, {"vpp": 2}),
    ({}, {"pipeline_layers": (12, 20)}),
    # 32 layers on 4 ranks, the loss counted as a layer: 9, 8, 8, 7; the embedding too: 8, 9, 8, 7
    ({**PP4, "account_for_loss_in_pipeline_split": True}, {EMBEDDING: True}),
    ({**PP4, EMBEDDING: True}, {"account_for_loss_in_pipeline_split": True}),
    ({}, {"recompute": "full"}),
    ({"recompute": "full"}, {"recompute_method": "block", "recompute_num_layers": 2}),
    ({"recompute": "full"}, {"recompute_num_layers": 4}),
    ({}, {"recompute": "selective", "recompute_modules": ("core_attn", "mlp")}),
    ({}, {"micro_batch_size": 2}),
    ({}, {"sequence_parallel": False}),
    ({}, {"offload_modules": ("attn_norm", "qkv_linear")}),
    (ONE, {"cpu_offloading_num_layers": 8}),
)
"""(base, change): a field (or a field and what it needs) changed from the base, tp 2, pp 2 and
dp 2 with the base's own changes."""


@pytest.mark.parametrize("base, change", LLAMA_8B_VARIANTS, ids=lambda c: ",".join(c) or "-")
def test_a_field_the_parts_read_changes_their_key(
    base: dict[str, object], change: dict[str, object]
) -> None:
    # Llama 3.1 8B on 8 H100: the base's parts remembered first, then each variant's
    # activations read through the memo are its own (`afresh`), which differ from the base's
    job = make_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    first = Layout(tp=2, pp=2, dp=2, sequence_parallel=True).with_(**base)
    lay = first.with_(**change)
    JobMemo.forget_all()
    through_memos(job, first)
    assert through_memos(job, lay) == afresh(job, lay) != afresh(job, first)
