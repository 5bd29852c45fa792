"""Host memory and host-link time of the MTP layers' offload groups (host_memory.activation_bytes,
stage_offload.offload_one_way via offload_chunks.chunk_copies' tail).

Oracle: Megatron-LM d98e8a64 gpt_model.py:600, :711-712 (one chunk handler per model-chunk
forward; the MTP layers open their groups in it, after the decoder layers'),
fine_grained_activation_offload.py:1217-1225 (should_bulk_offload: on the last pipeline rank's
last chunk each name's last group is not copied in the steady steps: the host link's time) and
:1211-1212 (the first step, the warm-up, copies every group: the host memory, whose pinned copies
stay, :241-244, :347-359). Bytes by hand: DeepSeek-V3 at 8192 tokens a micro-batch, t = 1, FP8
(core_attn copies Q, K, V and the flash output, 16-bit: test_offload_margin.DSV3_QKV_OUT, 1.25
GiB a layer)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_offload_margin import DSV3_QKV_OUT, RECIPE

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import host_memory, stage_offload
from planner.model.host_link import host_link_bandwidth
from planner.model.stage_time import layout_times


def _plan(tmp_path: Path, depths: int) -> tuple[Job, Layout]:
    # DeepSeek-V3 on 64 GB300 in FP8, pp 1 (one rank, one chunk of 61 layers, the MTP layers'
    # groups after them), core_attn offloaded, every group moves (fraction 1)
    text = RECIPE.read_text().replace(
        'precision = "bf16"', 'precision = "fp8"\nfp8_recipe = "tensorwise"'
    )
    text = text.replace('"layernorm", "mla_up_proj", "moe_act"', '"layernorm", "moe_act"')
    path = tmp_path / "fp8.toml"
    path.write_text(text)
    plan = load_plan(path)
    j = plan.job
    j = dataclasses.replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": depths}))
    return j, plan.require_layout().with_(offload_modules=("core_attn",))


def test_mtp_depths_groups_reach_the_host(tmp_path: Path) -> None:
    # two MTP depths: 61 + 2 core_attn groups in the last (only) chunk, all 63 on the host: the
    # first step (the warm-up, should_bulk_offload :1211-1212) copies every group, the second
    # depth's too, which the steady steps keep on the GPU (:1217-1225), and its pinned copies
    # stay (OffloadTensorPool :241-244, :347-359); one micro-batch in flight (pp 1), each block
    # rounded to a power of two (pinned_roundup of the hidden-state tensor).
    # Before: the MTP layers' groups left out, and the decoder's last kept: 61; then 62.
    j, lay = _plan(tmp_path, 2)
    sh_round = host_memory._roundup(j, host_memory.shard(j, lay))
    got = host_memory.activation_bytes(j, lay)
    assert got == pytest.approx(63 * DSV3_QKV_OUT * sh_round)


def test_one_mtp_depth_replaces_the_kept_group(tmp_path: Path) -> None:
    # one MTP depth: 61 + 1 groups, all 62 copied in the warm-up step (the MTP layer's, the
    # last, kept on the GPU in the steady steps only)
    j, lay = _plan(tmp_path, 1)
    sh_round = host_memory._roundup(j, host_memory.shard(j, lay))
    assert host_memory.activation_bytes(j, lay) == pytest.approx(62 * DSV3_QKV_OUT * sh_round)


def test_mtp_groups_on_the_host_link(tmp_path: Path) -> None:
    # rank 0 holds the MTP layers: the copies one way are 62 groups' over the host link (the
    # same count as host memory: 63 groups, the last per name kept)
    j, lay = _plan(tmp_path, 2)
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    t = layout_times(j, lay)
    got = stage_offload.offload_one_way(j, lay, chunks, t, 0)
    assert got == pytest.approx(62 * DSV3_QKV_OUT / host_link_bandwidth(j))
