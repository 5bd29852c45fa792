"""torchtitan's SDPA under debug.deterministic (planner.model.titan_sdpa): PyTorch refuses cuDNN
attention, so the flash backend (FlashAttention-2) runs, and its deterministic backward allocates
a split fp32 dQ accumulator and, with GQA, per-query-head dK and dV.

Oracles: pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp at 001f694a
(`check_cudnn_deterministic` in can_use_cudnn_attention; can_use_flash_attention takes GQA);
flash_attn/flash_api.cpp at 03b7c19d mha_bwd (deterministic: dq_accum = zeros({nsplits,
batch_size, seqlen_q_rounded, num_heads, head_size_rounded}, fp32), nsplits = (SMs + b h - 1) /
(b h); num_heads_k != num_heads: dk_expanded, dv_expanded = empty({b, seqlen_k, num_heads,
head_size}); softmax_d = empty({b, num_heads, seqlen_q_rounded}, fp32)); torchtitan e347b1e5
models/llama3/model/model.py:288-299 (enable_gqa passed, K/V not repeated), models/attention.py
:174-178 (cuDNN, flash, math), distributed/utils.py:114-118 (use_deterministic_algorithms);
models/deepseek_v3/__init__.py:154 (671B runs flex). Hand arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import attention_time, memory, titan_sdpa
from planner.model.layer_time import gpu_of
from planner.model.stage_activations import shard


def _llama8b(deterministic: bool) -> Job:
    return job(
        "llama3.1-8b",
        "h100-sxm-80gb",
        8,
        8192,
        8,
        framework="torchtitan",
        cross_entropy="pytorch",  # torchtitan's loss, as its plans read
        deterministic=deterministic,
        # e347b1e5's mode (the TOML target's; b5bcd76c's, without the fill, runs no SDPA)
        torchtitan=TorchtitanSection(deterministic_fill=True),
    )


def test_the_deterministic_flash_backward_workspace_by_hand() -> None:
    # Llama 3.1 8B, micro-batch 1 of 8192 tokens, tp 1, on H100 (132 SMs): h = 32, h_kv = 8,
    # d = 128. nsplits = ceil(132 / 32) = 5; dq_accum = 4 x 5 x 1 x 8192 x 32 x 128 =
    # 671,088,640 B; softmax_d = 4 x 32 x 8192 = 1,048,576 B; dK and dV expanded to the 32 query
    # heads in bf16: 2 x 2 x 8192 x 32 x 128 = 134,217,728 B (the K/V gradients' 2 x 2 x 8192 x
    # 8 x 128 = 33,554,432 B times h / h_kv = 4). Total 806,354,944 B.
    j = _llama8b(True)
    lay = Layout(dp=8)
    assert titan_sdpa.flash_backward_bytes(j, 1, shard(j, lay)) == 806_354_944
    # tp 4: h = 8, h_kv = 2, nsplits = ceil(132 / 8) = 17: 4 x 17 x 8192 x 8 x 128 =
    # 570,425,344; softmax_d 262,144; expanded 2 x 2 x 8192 x 8 x 128 = 33,554,432
    tp4 = Layout(dp=2, tp=4)
    assert titan_sdpa.flash_backward_bytes(j, 1, shard(j, tp4)) == 604_241_920


def test_only_deterministic_sdpa_runs_flash() -> None:
    assert (
        titan_sdpa.flash_backward_bytes(_llama8b(False), 1, shard(_llama8b(False), Layout(dp=8)))
        == 0
    )
    assert titan_sdpa.kernel(_llama8b(False)) == "fused"
    assert titan_sdpa.kernel(_llama8b(True)) == "flash2"
    # b5bcd76c's mode (no fill: the TOML target refuses it, planner.emit.torchtitan) builds no
    # SDPA for a language model (models common config_utils.py:97-101): FlexAttention runs
    b5 = replace(_llama8b(True), torchtitan=TorchtitanSection(deterministic_fill=False))
    assert titan_sdpa.kernel(b5) == "fused"
    assert titan_sdpa.flash_backward_bytes(b5, 1, shard(b5, Layout(dp=8))) == 0
    # DeepSeek-V3 runs FlexAttention at e347b1e5: not SDPA's fallback
    ds = job(
        "deepseek-v3", "h100-sxm-80gb", 256, 4096, 256, framework="torchtitan", deterministic=True
    )
    assert not titan_sdpa.flash_runs(ds)
    # Megatron's deterministic mode keeps Transformer Engine's kernel
    assert titan_sdpa.kernel(replace(_llama8b(True), framework="megatron")) == "fused"


def test_the_attention_runs_at_flash2s_rates_and_the_peak_holds_the_workspace() -> None:
    det, plain = _llama8b(True), _llama8b(False)
    gpu = gpu_of(det)
    got = attention_time.core_attention(det, gpu, 8192, 8192, 1, 1.0)
    flash2 = replace(plain, attention_kernel="flash2")
    assert got == attention_time.core_attention(flash2, gpu, 8192, 8192, 1, 1.0)
    assert got.bwd > attention_time.core_attention(plain, gpu, 8192, 8192, 1, 1.0).bwd
    # no recompute: the per-layer working sets are 0 but this one, and torch's unchunked loss
    # is counted beside it (stage_activations: `both`): the peak grows by the workspace alone,
    # times the allocator's fragmentation on activations (memory.FRAGMENTATION, 1.10)
    lay = Layout(dp=8, zero_stage=3, recompute="none")
    grew = (
        memory.estimate(det, lay).worst.activations - memory.estimate(plain, lay).worst.activations
    )
    assert grew == pytest.approx(806_354_944 * memory.FRAGMENTATION)


def test_under_full_recompute_the_workspace_sits_beside_the_rebuilt_layer() -> None:
    # the backward of a recomputed layer runs its attention backward while the layer's rebuilt
    # activations are alive (stage_activations `working`): FA2's workspace adds to them, so the
    # peak grows by the whole workspace here too (x FRAGMENTATION), not by what it exceeds them
    det, plain = _llama8b(True), _llama8b(False)
    lay = Layout(dp=8, zero_stage=3, recompute="full")
    grew = (
        memory.estimate(det, lay).worst.activations - memory.estimate(plain, lay).worst.activations
    )
    assert grew == pytest.approx(806_354_944 * memory.FRAGMENTATION)
