"""Host memory of fine-grained offloading is the first step's: every group copied
(planner.model.host_memory.activation_bytes).

Oracle: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py.
The first step is the warm-up: every chunk handler is new and `is_warmup` (:981), so
should_bulk_offload returns True for every group (:1211-1212) before it reads the group's
`offload` flag or the last rank's rule (:1214-1225); the offload margin, the delta across
pipeline ranks and the activation offload fraction are set after that step, in
post_warmup_callback (:609-668, called from reset at its end, :560-562, schedules.py:2100). The
host copies stay pinned: OffloadTensorPool keeps every tensor it made (allocate :241-244; reset
:347-359 returns them to its free list), the MoE groups' copies (no pool, :403-406) go to
PyTorch's caching host allocator, which keeps freed blocks. So the host holds, at its most, the
warm-up step's copies of every group of the in-flight micro-batches, whatever the fraction; the
steady steps copy fewer into the same blocks.

Hand count on Mixtral 8x7B (h 4096, expert FFN 14336, gated, top-2 of 8) at seq 6144, tp 1,
pp 4, vpp 8, ep 8: one MoE layer a chunk, 16 micro-batches; rank 0 holds its warm-up's
2 (pp - 1) + (vpp - 1) x pp = 6 + 28 = 34 chunk micro-batches and the next forward's: 35
(in_flight, schedules.py get_pp_rank_microbatches)."""

from __future__ import annotations

import pytest
from test_offload_fraction_groups import mixtral

from planner.model import host_memory
from planner.model.stage_activations import shard


def _per_chunk(fraction: float) -> float:
    """X: one Mixtral layer's two groups, expert_fc1's bf16 fc1 input and moe_act's gated fc1
    output with its fp32 probability, per routed pair (test_offload_fraction_groups)."""
    j, lay = mixtral(("expert_fc1", "moe_act"), fraction)
    sh = shard(j, lay)
    assert sh.pad_pairs == 0
    n = 6144 * 2 * sh.moe_load  # routed pairs on a GPU's layer
    return n * 4096 * 2 + n * (2 * 14336 * 2 + 4)


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_the_warmup_step_copies_every_group(fraction: float) -> None:
    # 35 chunk micro-batches in flight on rank 0, each both groups (X), at any fraction: the
    # warm-up copies them all. Before: the steady step's, 35 x expert_fc1's at 0.5 and nothing
    # at 0 (int(2 x 1) = 2 of 2 stay).
    j, lay = mixtral(("expert_fc1", "moe_act"), fraction)
    roundup = host_memory._roundup(j, shard(j, lay))
    want = 35 * _per_chunk(fraction) * roundup
    assert host_memory.activation_bytes(j, lay) == pytest.approx(want)
