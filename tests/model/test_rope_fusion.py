"""Rotary embeddings as one fused kernel or as separate ops (training.fused_rope; Megatron
--no-rope-fusion; torchtitan without compile): the layer time and torchtitan's default (the
Megatron lines and launch files: tests/emit/test_emit_megatron.py).

Oracles: hand byte counts (`attention_time.UNFUSED_ROPE_BYTES` per element each query and key
head turns, as HBM traffic); torchtitan's eager `apply_rotary_emb` (fused only under
torch.compile).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, parse_plan
from planner.model import attention_time, host, layer_time


def _extra(model: str, lay: Layout) -> tuple[float, float]:
    """(time the unfused rotary embedding adds to one attention layer, fwd + bwd, per
    micro-batch; the same by hand) for the job's first layer kind."""
    fused = job(model, "h100-sxm-80gb", 8, 4096, 64)
    eager = replace(fused, fused_rope=False)
    gpu = layer_time.gpu_of(fused)
    kind = fused.arch.kinds[0]
    a, b = (
        layer_time.layer_time(fused, lay, gpu, kind),
        layer_time.layer_time(eager, lay, gpu, kind),
    )
    t = lay.micro_batch_size * 4096 / lay.cp
    rotated = attention_time.rope_elements(fused.arch, t, lay.tp)
    return (b.fwd + b.bwd) - (a.fwd + a.bwd), 32.0 * rotated / gpu.hbm


def test_unfused_rope_adds_its_bytes_to_the_layer() -> None:
    # Llama 3.1 8B at tp 2, 4 x 4096 tokens: 16 / 2 query heads and 8 / 2 key heads of 128 are
    # turned, 16,384 x (16 + 4) x 128 = 41,943,040 elements, at 32 more bytes each
    lay = Layout(tp=2, dp=4, micro_batch_size=4)
    got, by_hand = _extra("llama3.1-8b", lay)
    assert attention_time.rope_elements(catalog.get_model("llama3.1-8b"), 16384, 2) == 41_943_040
    assert got == pytest.approx(by_hand, rel=1e-9)
    assert got > 0


def test_mla_turns_only_its_rope_parts() -> None:
    # DeepSeek-V3's MLA: each of 128 / 8 local query heads' 64 rope dims and the one shared key
    # part: t x (16 + 1) x 64
    arch = catalog.get_model("deepseek-v3")
    assert attention_time.rope_elements(arch, 1000.0, 8) == pytest.approx(1000 * 17 * 64)


def test_learned_positions_have_nothing_to_turn() -> None:
    assert attention_time.rope_elements(catalog.get_model("gpt3-175b"), 1000.0, 8) == 0.0


def _titan(compiled: bool) -> Plan:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 64, "framework": "torchtitan"},
        "parallel": {"tp": 1},
        "torchtitan": {"compile": compiled},
    }
    return parse_plan(doc)


def test_torchtitan_fuses_rope_only_when_compiled() -> None:
    assert not _titan(False).job.fused_rope
    assert _titan(True).job.fused_rope


def test_unfused_rope_adds_its_kernels_to_the_host_issue() -> None:
    # host.UNFUSED_ROPE_KERNELS counted by hand: Megatron 34 kernels forward and backward per
    # attention layer, torchtitan 12, charged as forward issue over 1 + BACKWARD_ISSUE_RATIO (3)
    # in units of one dense layer's issue (LAYER_KERNELS kernels)
    lay = Layout(tp=2, dp=4)
    for framework, kernels in (("megatron", 34), ("torchtitan", 12)):
        fused = replace(job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64), framework=framework)
        eager = replace(fused, fused_rope=False)
        kind = fused.arch.kinds[0]
        added = host.issue_units(eager, lay, kind) - host.issue_units(fused, lay, kind)
        assert added == pytest.approx(kernels / 3 / host.LAYER_KERNELS, rel=1e-12)
    # a model without rotary embeddings launches none
    gpt = job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 64)
    kind = gpt.arch.kinds[0]
    unfused = replace(gpt, fused_rope=False)
    assert host.issue_units(unfused, lay, kind) == host.issue_units(gpt, lay, kind)
