"""Fine-grained offloading's host transfers under block recompute (planner.model.stage_offload
with offload_chunks.chunk_copies).

Oracle: Megatron-LM d98e8a64 megatron/core/recompute.py:167-181 (block N checkpoints a chunk's
first N layers, whose no_grad forward saves nothing to offload, tensor_parallel/random.py:616;
the others run as they are, each offloading as a layer without recompute does), and hand
arithmetic: Llama 3.1 8B's core_attn group, 8192 tokens x 20,480 bytes a layer."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import host_link, stage_offload, stage_time


def test_block_recompute_moves_the_whole_layers_groups() -> None:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    link = host_link.host_link_bandwidth(j)
    plain = Layout(dp=8, offload_modules=("core_attn",))
    chunks = plain.chunk_layers(32)[0]
    block = plain.with_(recompute="full", recompute_method="block", recompute_num_layers=8)
    t = stage_time.layout_times(j, block)
    # 24 of 32 layers move their group one way
    want = 24 * 8192 * 20480 / link
    assert stage_offload.offload_one_way(j, block, chunks, t) == pytest.approx(want)
    assert stage_offload.offload_one_way(j, plain, chunks, t) == pytest.approx(want * 32 / 24)
    # uniform recompute checkpoints every layer: nothing moves
    uniform = block.with_(recompute_method="uniform", recompute_num_layers=1)
    assert stage_offload.offload_one_way(j, uniform, chunks, t) == 0
    assert stage_offload.fine_offload_exposed(j, uniform, 0, chunks, t) == 0
