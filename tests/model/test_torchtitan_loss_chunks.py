"""torchtitan's chunked loss (`[torchtitan] loss_chunks`, ChunkedLossWrapper at pytorch/torchtitan
b5bcd76c torchtitan/components/loss.py:501-720): one chunk's logits alive at a time, and an fp32
[tokens, hidden] buffer gathering the chunks' input gradients.

Oracle: hand arithmetic on Llama 3.1 8B (hidden 4,096, vocabulary 128,256) at one sequence of
8,192 tokens, tp 1: the loss holds PYTORCH_LOSS_BYTES_PER_LOGIT (12) bytes per local logit; in 8
chunks it holds an eighth of them and 4 x 8,192 x 4,096 bytes of fp32 gradient, so the peak falls
by 12 x 8,192 x 128,256 x 7 / 8 - 4 x 8,192 x 4,096 bytes, times the allocator allowance, less
what the chunks' output-layer gradients hold at the loss above the unchunked loss's
(`fsdp2.output_layer_transient`, tests/model/test_chunked_loss_head.py and
tests/model/test_output_layer_fsdp2.py): 8 bytes per output parameter (128,256 x 4,096; planner
counts the final norm with the decoder) against 6 per output parameter (its bf16 gradient and
fp32 reduce-scatter input) and 2 per parameter of a 32nd of the rank's 8,030,261,248 (the last
block, prefetched in bf16)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection, training_defaults
from planner.model import memory
from planner.search import rules
from planner.search.space import Space
from planner.search.suggest import search_rows

LAY = Layout(tp=1, pp=1, dp=8, zero_stage=3, micro_batch_size=1)


def _titan(chunks: int) -> Job:
    defaults = training_defaults("torchtitan", compile_on=False)  # what a torchtitan plan gets
    return job(
        "llama3.1-8b",
        "h100-sxm-80gb",
        8,
        8192,
        8,
        framework="torchtitan",
        torchtitan=TorchtitanSection(loss_chunks=chunks),
        **defaults,
    )


def test_eight_chunks_hold_an_eighth_of_the_logits_and_an_fp32_gradient() -> None:
    whole, chunked = _titan(1), _titan(8)
    drop = memory.estimate(whole, LAY).peak - memory.estimate(chunked, LAY).peak
    T, V, h = 8192, 128256, 4096
    head = 8 * V * h - (6 * V * h + 2 * 8_030_261_248 / 32)  # 4,202,692,608 - 3,653,910,784
    want = (12 * T * V * 7 / 8 - 4 * T * h - head) * memory.fragmentation(whole)
    # a chunked loss is b5bcd76c's (the module era), whose FlexAttention keeps a BlockMask the
    # TOML era's SDPA has none of: 8 int32 tensors over n = 8192 / 128 = 64 tiles a side, one
    # packed row, 4 x 4 x (64^2 + 64) = 66,560 B (planner.model.titan_attention)
    mask = 4 * 4 * (64**2 + 64)
    assert drop == pytest.approx(want - mask, rel=1e-9)
    assert drop > 9e9  # about 9.4 GB less at the loss


def test_the_chunks_must_divide_the_tokens() -> None:
    """ChunkedLossWrapper splits a micro-batch's tokens per CP rank into equal chunks."""
    j = _titan(3)  # 8,192 tokens are no multiple of 3
    found = [v.rule for v in rules.violations(j, LAY)]
    assert "tt_loss_chunks" in found
    assert "tt_loss_chunks" not in [v.rule for v in rules.violations(_titan(8), LAY)]


def test_the_chunked_loss_era_has_no_every_n_nor_expert_tp_nor_tensorwise() -> None:
    """loss_chunks > 1 is torchtitan's Python-configuration era (b5bcd76c), which has neither
    every-N-layers checkpointing nor expert TP, and float8 rowwise only (torchtitan_head_config.md
    2h): a plan asking for any is refused, and the torchtitan search suggests none there."""
    every = replace(_titan(8), torchtitan=TorchtitanSection(loss_chunks=8, selective_layer_every=2))
    full = LAY.with_(recompute="full", recompute_method="block", recompute_num_layers=16)
    assert "tt_head_every" in [v.rule for v in rules.violations(every, full)]
    for recipe, refused in (("tensorwise", True), ("rowwise", False)):
        fp8 = replace(_titan(8), precision="fp8", fp8_recipe=recipe)
        assert ("tt_head_float8" in [v.rule for v in rules.violations(fp8, LAY)]) is refused
    whole_fp8 = replace(_titan(1), precision="fp8", fp8_recipe="tensorwise")  # e347b1e5's default
    assert "tt_head_float8" not in [v.rule for v in rules.violations(whole_fp8, LAY)]
    qwen = replace(_titan(8), arch=catalog.get_model("qwen3-30b-a3b"))
    folded = LAY.with_(tp=2, dp=4, ep=4, etp=2, sequence_parallel=True)
    assert "tt_head_etp" in [v.rule for v in rules.violations(qwen, folded)]
    whole = replace(qwen, torchtitan=TorchtitanSection())  # e347b1e5 runs etp = tp
    assert "tt_head_etp" not in [v.rule for v in rules.violations(whole, folded)]
    _, rows = search_rows(qwen, Space(framework="torchtitan"), 5)
    assert rows
    for c in [c for r in rows for c in (r.candidate, *r.equivalents)]:
        assert getattr(c, "titan", qwen.titan).selective_layer_every is None
        assert c.layout.ep == 1 or c.layout.expert_tp == 1
        assert c.layout.ep > 1 or c.layout.moe_token_dispatcher_type != "flex"
        assert not rules.violations(qwen, c.layout)
    deepep = LAY.with_(moe_token_dispatcher_type="flex")  # DeepEP at ep 1, in either era
    assert "tt_deepep" in [v.rule for v in rules.violations(qwen, deepep)]
    assert "tt_deepep" in [v.rule for v in rules.violations(whole, deepep)]
