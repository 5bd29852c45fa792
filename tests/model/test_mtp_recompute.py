"""MTP layers under full recompute, as Megatron-LM d98e8a64 runs them
(megatron/core/transformer/multi_token_prediction.py): uniform checkpoints them and asserts
recompute_num_layers == 1 (:1621-1627, "recompute_num_layers must be 1 for MTP recompute"); block
skips their recompute (:1630-1633, "not supported for MTP yet. Skipping recompute"), so they keep
what a layer keeps without recompute. planner counted them checkpointed under block (their input
alone) and let uniform run with groups of several layers.

Oracle for the memory: block with N at least each chunk's layer count checkpoints every decoder
layer, as uniform with N = 1 does (the same decoder bytes and working sets), so the MTP rank's
activations differ by the MTP layer's bytes without recompute less its input (hand: one depth)."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.job import Job
from planner.inputs.layout import Layout
from planner.model import activations, stage_activations
from planner.search.rules import violations

LAY = Layout(
    tp=2, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True, recompute="full",
    pipeline_layers=(16, 15, 15, 15),
)  # fmt: skip


def _raw(j: Job, lay: Layout, rank: int) -> float:
    """The rank's activation bytes before fragmentation (`stage_activations`)."""
    sh = stage_activations.shard(j, lay)
    chunks = lay.chunk_layers(j.arch.num_layers)[rank]
    return stage_activations.stage_activations(
        j, lay, rank, chunks, sh, stage_activations.per_layer(j.arch, sh)
    )


def test_block_recompute_leaves_the_mtp_layer_whole() -> None:
    j = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)  # one MTP depth, on rank 3
    uniform = LAY.with_(recompute_method="uniform", recompute_num_layers=1)
    block = LAY.with_(recompute_method="block", recompute_num_layers=16)  # every chunk's all
    assert not violations(j, uniform) and not violations(j, block)
    rank = 3  # the last: one micro-batch in flight under 1F1B
    sh = stage_activations.shard(j, block)
    (kind,) = [k for k, n in zip(j.arch.kinds, j.arch.mtp_counts(), strict=True) if n]
    whole = activations.layer_bytes(j.arch, kind, sh, recompute=False)
    inp = stage_activations.per_layer(j.arch, sh).dense
    assert _raw(j, block, rank) - _raw(j, uniform, rank) == pytest.approx(whole - inp, rel=1e-9)
    assert whole > 10 * inp  # a whole MoE layer holds far more than its input


@pytest.mark.parametrize(
    ("method", "n", "refused"),
    [("uniform", 1, False), ("uniform", 2, True), ("block", 2, False)],
)
def test_uniform_groups_of_several_layers_are_refused_with_mtp(
    method: str, n: int, refused: bool
) -> None:
    lay = LAY.with_(recompute_method=method, recompute_num_layers=n)
    mtp = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)
    names = [v.field for v in violations(mtp, lay)]
    assert ("parallel.recompute_num_layers" in names) == refused
    # a model without MTP runs uniform groups of any size
    dense = job("llama3.1-70b", "h100-sxm-80gb", 64, 4096, 64)
    assert not violations(dense, lay.with_(ep=1, etp=1, pipeline_layers=None))
