"""The reload window (offloaded bytes back on the GPU around the backward) of a rank that holds
the MTP layers counts their groups (planner.model.offload_chunks.reload_window, read by
stage_activations.activation_parts).

Oracle: Megatron-LM d98e8a64 gpt_model.py:600, :711-712 (the MTP layers open their offload groups
in the last model chunk's handler, after the decoder layers'); multi_token_prediction.py
:1630-1633 (no recompute for the MTP layers: they run whole); tensor_parallel/random.py:616 (a
checkpointed layer's forward runs under no_grad, nothing saved to offload);
fine_grained_activation_offload.py:1217-1225 (on the last rank's last chunk each name's last
group stays on the GPU, not reloaded) and :1271-1276, :1302-1308 (a group that moves is reloaded
before its backward). Bytes by hand: DeepSeek-V3 at 8192 tokens a micro-batch, t = 1, bf16:
core_attn copies and reloads Q, K, V and the flash output, 2 x 8192 x 128 x (2 x 192 + 128) +
2 x 8192 x 128 x 128 = 1.25 GiB (test_offload_margin.DSV3_QKV_OUT); two layers of them in the
window (offload_chunks.WINDOW_LAYERS)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_offload_margin import DSV3_QKV_OUT, RECIPE

from planner.inputs.plan import load_plan
from planner.model.layer_kept import per_layer
from planner.model.stage_activations import activation_parts, shard


def _window(tmp_path: Path, depths: int) -> float | None:
    # DeepSeek-V3 on 64 GB300, pp 1 (one rank, the last, one chunk of 61 layers), full block
    # recompute of all 61 (none of them offloads anything), core_attn offloaded; the MTP
    # layers run whole after them
    text = RECIPE.read_text().replace(
        'recompute = "selective"\nrecompute_modules = ["layernorm", "mla_up_proj", "moe_act"]',
        'recompute = "full"\nrecompute_method = "block"\nrecompute_num_layers = 61',
    )
    text = text.replace('["core_attn", "attn_proj"]', '["core_attn"]')
    path = tmp_path / "block.toml"
    path.write_text(text)
    plan = load_plan(path)
    j = plan.job
    j = dataclasses.replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": depths}))
    lay = plan.require_layout()
    assert lay.recompute_num_layers == j.arch.num_layers == 61
    sh = shard(j, lay)
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    return activation_parts(j, lay, 0, chunks, sh, per_layer(j.arch, sh)).window


def test_the_mtp_layers_groups_are_reloaded(tmp_path: Path) -> None:
    # two depths: the first depth's core_attn group moves and is reloaded, the second's (the
    # chunk's last of its name) stays; the margin keeps that same group, nothing more: the
    # window is 2 x 1.25 GiB. Before: the MTP layers left out, no layer moved, no window.
    assert _window(tmp_path, 2) == pytest.approx(2 * DSV3_QKV_OUT)


def test_one_depth_moves_nothing(tmp_path: Path) -> None:
    # one depth: its group is the chunk's last of its name, kept on the GPU: no window bytes
    assert (_window(tmp_path, 1) or 0.0) == 0.0
