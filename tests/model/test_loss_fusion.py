"""Megatron-LM's cross entropy with and without --cross-entropy-loss-fusion: the step time of
the unfused loss (`output_time.UNFUSED_LOSS_BYTES_PER_LOGIT`), the reader, and the launch lines.

Oracles: hand arithmetic in the comments (the byte count of the unfused loss is derived kernel
by kernel from Megatron-LM d98e8a64 megatron/core/tensor_parallel/cross_entropy.py in the
constant's docstring); Megatron-LM's flag semantics (--cross-entropy-loss-fusion off by default,
--cross-entropy-fusion-impl native by default)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.emit import bridge, megatron
from planner.inputs import megatron_args
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import layer_time
from planner.model.layer_time import gpu_of
from planner.model.output_time import loss_bytes_per_logit, output_layer_time

LAYOUT = Layout(tp=8, pp=2, dp=4, sequence_parallel=True, zero_stage=1)


def test_the_unfused_loss_moves_its_counted_bytes() -> None:
    # Llama 3.1 8B at tp 8: t = 4096 tokens x 129,024 / 8 = 16,128 local vocabulary entries per
    # token; the unfused loss moves 52 bytes per logit where the fused kernels' fitted stand-in
    # moves 4 x ELEMENTWISE_PASSES, both at the achieved HBM bandwidth
    fused = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256)
    unfused = replace(fused, loss_fusion=False)
    gpu = gpu_of(fused)
    logits = 4096 * fused.arch.padded_vocab(8) / 8
    extra = (52 - 4 * layer_time.ELEMENTWISE_PASSES) * logits / gpu.hbm
    delta = output_layer_time(unfused, LAYOUT, gpu) - output_layer_time(fused, LAYOUT, gpu)
    assert delta == pytest.approx(extra)
    assert delta > 0
    # the compiled native fusion is a fused loss too, whatever loss_fusion says
    assert output_layer_time(
        replace(unfused, compiled_loss_fusion=True), LAYOUT, gpu
    ) == pytest.approx(output_layer_time(fused, LAYOUT, gpu))
    # torch's loss (torchtitan) is not Megatron's unfused one
    titan = replace(unfused, cross_entropy="pytorch")
    assert loss_bytes_per_logit(titan) == 4 * layer_time.ELEMENTWISE_PASSES


LINE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 32 --bf16 "
    "--vocab-size 32000 --tensor-model-parallel-size 2 --sequence-parallel "
)


@pytest.mark.parametrize(
    ("flags", "fused", "compiled"),
    [
        ("", False, False),  # Megatron's default: the unfused loss
        ("--cross-entropy-loss-fusion", True, True),  # the impl defaults to native
        ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", True, False),
    ],
)
def test_the_reader_reads_the_loss(flags: str, fused: bool, compiled: bool) -> None:
    plan = parse_plan(megatron_args.to_plan(LINE + flags, "h100-sxm-80gb", 8))
    assert plan.job.loss_fusion is fused
    assert plan.job.compiled_loss_fusion is compiled
    # the launch line writes what was read, and reads back the same
    text = megatron.render(plan, "job")
    assert ("--cross-entropy-loss-fusion" in text) is fused
    assert ("--cross-entropy-fusion-impl native" in text) is compiled
    back = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 8))
    assert (back.job.loss_fusion, back.job.compiled_loss_fusion) == (
        plan.job.loss_fusion,
        plan.job.compiled_loss_fusion,
    )


def test_a_plan_launches_a_fused_loss_by_default() -> None:
    # a plan's default (loss_fusion = true) is timed with the fused kernels, so its launch asks
    # for one: Transformer Engine's, as Megatron-Bridge's performance recipes do
    plan = parse_plan(
        megatron_args.to_plan(
            LINE + "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "h100-sxm-80gb", 8
        )
    )
    model = bridge.sections(plan)["model"]
    assert model["cross_entropy_loss_fusion"] is True
    assert model["cross_entropy_fusion_impl"] == "te"
    unfused = parse_plan(megatron_args.to_plan(LINE, "h100-sxm-80gb", 8))
    assert bridge.sections(unfused)["model"]["cross_entropy_loss_fusion"] is False
