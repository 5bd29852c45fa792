"""Megatron's --deterministic-mode (`Job.deterministic`, planner/model/determinism.py).

Oracles: Megatron-LM's own measurements of the mode (d98e8a64 docs/developer/determinism
op-catalog.md: "approximately four percent on a large dense model"; its CI gate,
tests/performance_tests/shell_test_utils/determinism: the 4-layer GPT of perf_breakdown.sh at tp 2
on 8 H100 must stay under MAX_DET_NONDET_RATIO = 1.35 of the default step, and the gate passes in
Megatron's CI), torchtitan's set_determinism (b5bcd76c distributed/utils.py: the fill turned
off; PyTorch's SDPA then refuses cuDNN attention, sdp_utils.cpp check_cudnn_deterministic at
pytorch 001f694a), and hand arithmetic on the fills' bytes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job, read_job

from planner.inputs import megatron_args
from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import attention_time, cost, determinism, host, layer_parts, layer_time
from planner.model.job_memo import JobMemo

GATE_LINE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 256 "
    "--max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 "
    "--tokenizer-type NullTokenizer --vocab-size 256 --transformer-impl transformer_engine "
    "--no-gradient-accumulation-fusion --bf16"
)
"""Megatron-LM d98e8a64 tests/performance_tests/shell_test_utils/determinism/perf_breakdown.sh:
the model its deterministic-mode gate times (8 GPUs, `--deterministic-mode` on one run)."""


def _ratio(j: Job, lay: Layout) -> float:
    """The step time with the mode over the step time without it."""
    JobMemo.forget_all()
    det = cost.estimate(replace(j, deterministic=True), lay).step_time_s
    return det / cost.estimate(replace(j, deterministic=False), lay).step_time_s


def test_the_gate_model_stays_under_megatrons_threshold() -> None:
    # Megatron's CI fails this model at 1.35x; the mode costs it something (fills, more issue)
    plan = parse_plan(megatron_args.read(GATE_LINE, "h100-sxm-80gb", 8, "gate").doc)
    assert 1.0 < _ratio(plan.job, plan.require_layout()) < 1.35


def test_a_large_dense_model_pays_a_few_percent() -> None:
    # "approximately four percent on a large dense model": Llama 3.1 70B at tp 8 pp 4 on 256 H100
    j = job("llama3.1-70b", "h100-sxm-80gb", 256, 8192, 256, loss_fusion=False)
    lay = Layout(tp=8, pp=4, dp=8, vpp=5, sequence_parallel=True, zero_stage=1)
    assert 1.01 < _ratio(j, lay) < 1.08


def test_torchtitan_turns_the_fill_off_so_only_the_attention_kernel_changes() -> None:
    # b5bcd76c turns the fill off: no issue or fill charge; and it builds no SDPA for a language
    # model (models common config_utils.py:97-101): FlexAttention, timed at the fused rates
    # (planner.model.titan_attention), so the step does not change at all
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, framework="torchtitan")
    assert determinism.issue_factor(replace(j, deterministic=True)) == 1.0
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=3)
    assert _ratio(j, lay) == 1.0
    # e347b1e5's mode (the TOML's, its fill on), compiled (inductor's buffers skip the fill):
    # PyTorch refuses cuDNN attention under deterministic algorithms (sdp_utils.cpp
    # check_cudnn_deterministic, planner.model.titan_sdpa): the step at FlashAttention-2's rates
    j = replace(j, torchtitan=TorchtitanSection(deterministic_fill=True, compile=True))
    assert determinism.issue_factor(replace(j, deterministic=True)) == 1.0
    flash2 = replace(j, attention_kernel="flash2")
    JobMemo.forget_all()
    want = cost.estimate(flash2, lay).step_time_s / cost.estimate(j, lay).step_time_s
    assert want > 1.0
    assert _ratio(j, lay) == pytest.approx(want)


def test_the_fills_write_two_passes_of_the_saved_activations() -> None:
    # a layer's elementwise traffic grows by FILL_PASSES x its saved-activation bytes at the
    # HBM rate (layer_parts.activation_bytes, the same bytes ELEMENTWISE_PASSES multiplies),
    # beside the attention backward's deterministic schedule (the test below)
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 64, loss_fusion=False)
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True)
    gpu = layer_time.gpu_of(j)
    saved, streamed = layer_parts.activation_bytes(j, lay, DENSE, 1.0)
    assert streamed == saved  # a dense layer has no routed-expert input to leave out
    dj = replace(j, deterministic=True)
    assert determinism.fill_bytes(dj, saved) == 2 * saved
    plain = layer_time.layer_time(j, lay, gpu, DENSE)
    det = layer_time.layer_time(dj, lay, gpu, DENSE)
    added = (det.fwd + det.bwd) - (plain.fwd + plain.bwd)
    eff = layer_time.ATTENTION_EFFICIENCY
    attn = attention_time.core_attention(dj, gpu, 8192.0, 8192, 8, eff).bwd
    attn -= attention_time.core_attention(j, gpu, 8192.0, 8192, 8, eff).bwd
    assert attn > 0
    assert added == pytest.approx(2 * saved / gpu.hbm + attn, rel=1e-9)


def test_the_host_issues_deterministic_issue_times_the_operations() -> None:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 8, loss_fusion=False)
    lay = Layout(tp=1, pp=1, dp=8)
    det = replace(j, deterministic=True)
    factor = determinism.DETERMINISTIC_ISSUE
    assert host.floor_s(det, lay, DENSE) == pytest.approx(factor * host.floor_s(j, lay, DENSE))
    assert host.kernels(det, lay, DENSE) == pytest.approx(factor * host.kernels(j, lay, DENSE))


def test_megatron_lines_with_the_flag_are_read_so() -> None:
    read = [read_job(extra) for extra in ("", " --deterministic-mode")]
    assert [j.deterministic for j in read] == [False, True]


def test_the_attention_backward_takes_the_deterministic_schedule() -> None:
    # FlashAttention-3's deterministic backward on H100 (head dim 128, causal, 8k tokens): 2.900 ms
    # against 2.391 ms without (Dao-AILab/flash-attention PR #1893's table). Megatron's mode
    # lengthens the kernel's backward by that ratio where its matmuls bound it (bf16 at head dim
    # 128 on H100: the exponentials take less), and leaves the forward alone; torchtitan's mode
    # runs SDPA's FlashAttention-2 instead of cuDNN (planner.model.titan_sdpa), FA3's factor not
    # charged.
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, loss_fusion=False)
    gpu = layer_time.gpu_of(j)
    eff = layer_time.ATTENTION_EFFICIENCY

    def core(one: Job) -> attention_time.Core:
        return attention_time.core_attention(one, gpu, 8192.0, 8192, 1, eff)

    plain, det = core(j), core(replace(j, deterministic=True))
    assert det.fwd == plain.fwd
    assert det.bwd == pytest.approx(plain.bwd * 2.900 / 2.391, rel=1e-12)
    tt = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, framework="torchtitan")
    tt = replace(tt, torchtitan=TorchtitanSection(deterministic_fill=True))  # e347b1e5's mode
    assert core(replace(tt, deterministic=True)) == core(replace(tt, attention_kernel="flash2"))


def test_fp8_attention_backward_costs_nothing_more_in_deterministic_mode() -> None:
    # cuDNN's FP8 attention backward takes the same time deterministic or not (cudnn-frontend's
    # SDPA benchmark on GB200 and GB300: 0.97-1.05 at every shape, benchmarks/attention_kernels.py)
    j = job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 16, precision="fp8", fp8_attention=True)
    j = replace(j, fp8_recipe="tensorwise")
    assert j.attention_in_fp8
    gpu = layer_time.gpu_of(j)
    eff = layer_time.ATTENTION_EFFICIENCY
    plain = attention_time.core_attention(j, gpu, 8192.0, 8192, 1, eff)
    det = attention_time.core_attention(replace(j, deterministic=True), gpu, 8192.0, 8192, 1, eff)
    assert det == plain
    bf16 = replace(j, fp8_attention=False, deterministic=True)
    assert determinism.attention_bwd_factor(bf16) == determinism.DETERMINISTIC_ATTENTION_BWD
