"""torchtitan's chunked loss (`[torchtitan] loss_chunks`, ChunkedLossWrapper at pytorch/torchtitan
b5bcd76c torchtitan/components/loss.py:501-720): one chunk's logits alive at a time, and an fp32
[tokens, hidden] buffer gathering the chunks' input gradients.

Oracle: hand arithmetic on Llama 3.1 8B (hidden 4,096, vocabulary 128,256) at one sequence of
8,192 tokens, tp 1: the loss holds PYTORCH_LOSS_BYTES_PER_LOGIT (12) bytes per local logit; in 8
chunks it holds an eighth of them and 4 x 8,192 x 4,096 bytes of fp32 gradient, so the peak falls
by 12 x 8,192 x 128,256 x 7 / 8 - 4 x 8,192 x 4,096 bytes, times the allocator allowance."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection, training_defaults
from planner.model import memory
from planner.search import rules

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
    want = (12 * T * V * 7 / 8 - 4 * T * h) * memory.fragmentation(whole)
    assert drop == pytest.approx(want, rel=1e-9)
    assert drop > 9e9  # about 9.7 GB less at the loss


def test_the_chunks_must_divide_the_tokens() -> None:
    """ChunkedLossWrapper splits a micro-batch's tokens per CP rank into equal chunks."""
    j = _titan(3)  # 8,192 tokens are no multiple of 3
    found = [v.rule for v in rules.violations(j, LAY)]
    assert "tt_loss_chunks" in found
    assert "tt_loss_chunks" not in [v.rule for v in rules.violations(_titan(8), LAY)]
