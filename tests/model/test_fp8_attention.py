"""The flash-attention kernel's exponential bound and FP8 attention (planner.model.attention,
planner.model.attention_time; plan field training.fp8_attention).

Oracles: NVIDIA cudnn-frontend's SDPA benchmark (benchmarks/data/cudnn_sdpa: GB200 against GB300,
FP8 against bf16 on H200, gpt-oss's 64-wide heads on B200 and B300), NVIDIA's measurement of
Blackwell Ultra's doubled special-function units (technical blog "Making Softmax More Efficient
with NVIDIA Blackwell Ultra": ~35% more DeepSeek-V3 FP8 forward throughput on GB300 than on
GB200), the catalog's rates and hand arithmetic.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job
from plan_text import MODEL, PARALLEL, load_error, plan_text, write

from planner.inputs import plan_writer
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import attention_time, cost, layer_time
from planner.model.attention_time import Core


def _job(model: str, gpu: str, seq: int, fp8: bool, **kw: object) -> Job:
    kw.setdefault("precision", "fp8")
    kw.setdefault("fp8_recipe", "mxfp8" if "b" in gpu else "tensorwise")
    return job(model, gpu, 8, seq, 64, fp8_attention=fp8, **kw)


def _core(j: Job, tp: int = 1) -> Core:
    s = j.seq_length
    gpu = layer_time.gpu_of(j)
    return attention_time.core_attention(j, gpu, float(s), s, tp, layer_time.ATTENTION_EFFICIENCY)


def test_blackwell_ultra_runs_deepseek_v3_fp8_faster() -> None:
    # DeepSeek-V3's MLA (192 + 128 wide per head) in FP8 at 4k, GB200 against GB300 (same FP8
    # peak, doubled MUFU.EX2): cuDNN's benchmark (benchmarks/data/cudnn_sdpa) 0.656 / 0.493 ms
    # forward, 2.112 / 1.803 backward; NVIDIA's blog ~35% forward. GB200's forward waits on its
    # 5e12 exponentials per s, GB300's on the softmax's CUDA-core work; within 8% of cuDNN's
    gb200 = _core(_job("deepseek-v3", "gb200-nvl72", 4096, True))
    gb300 = _core(_job("deepseek-v3", "gb300-nvl72", 4096, True))
    assert gb200.exp_bound and not gb300.exp_bound and gb300.alu_bound
    assert gb200.fwd / gb300.fwd == pytest.approx(0.656 / 0.493, rel=0.08)
    assert gb200.bwd / gb300.bwd == pytest.approx(2.112 / 1.803, rel=0.08)


def test_fp8_attention_on_hopper_is_cudnns_fp8_over_bf16() -> None:
    # cuDNN on H200 (benchmarks/data/cudnn_sdpa), Llama 3.1 at 8k: bf16 1.708 / 5.083 ms, FP8
    # 1.141 / 6.392 (FP8's backward slower); H100 is the same die: within 8% of both ratios.
    # H100's 3.9e12 exponentials per s do not bind at head dim 128 in either precision
    bf16, fp8 = (
        _core(_job("llama3.1-8b", "h100-sxm-80gb", 8192, False)),
        _core(_job("llama3.1-8b", "h100-sxm-80gb", 8192, True)),
    )
    assert not bf16.exp_bound and not fp8.exp_bound
    assert bf16.fwd / fp8.fwd == pytest.approx(1.708 / 1.141, rel=0.08)
    assert bf16.bwd / fp8.bwd == pytest.approx(5.083 / 6.392, rel=0.08)


def test_b200_fp8_forward_waits_on_the_exponentials_by_hand() -> None:
    # Llama 3.1 8B (32 heads of 128), s = t = 8192 on one B200: scores = 8192 x 4160 x 32 (the
    # whole tiles, (s + 128) / 2 keys a query); exponential time = scores / (4.5e12 x 0.8414 x
    # span x ATTENTION_EFFICIENCY), span = s / (s + 633.3) (planner.model.attention's cuDNN row)
    j = _job("llama3.1-8b", "b200-sxm-180gb", 8192, True)
    s = 8192.0
    span = s / (s + 633.3)
    rate = 4.5e12 * 0.8414 * span * layer_time.ATTENTION_EFFICIENCY
    core = _core(j)
    assert core.exp_bound
    assert core.fwd == pytest.approx(s * (s + 128) / 2 * 32 / rate, rel=1e-9)
    # bf16: 512 matmul FLOPs per score at 2.25e15 x 0.6735 take 3.38e-13 s against 2.64e-13 of
    # exponential and 1.89e-13 of CUDA-core work (15.14 FLOPs at 80e12): the matmuls bind
    bf16 = _core(_job("llama3.1-8b", "b200-sxm-180gb", 8192, False))
    assert not bf16.exp_bound and not bf16.alu_bound
    assert bf16.fwd / core.fwd == pytest.approx((512 / 2.25e15 / 0.6735) / (1 / 4.5e12 / 0.8414))


def test_head_dim_64_waits_on_the_softmax_on_blackwell_only() -> None:
    # 256 matmul FLOPs per score: 1.70e-13 s on B200 (0.6735 of 2.25e15, head-dim term 0.985)
    # against 2.64e-13 of exponential (B200 waits on them) and 1.89e-13 of CUDA-core work; B300's
    # doubled exponentials (1.23e-13) leave the CUDA cores the bound (cuDNN's gpt-oss forward:
    # 1,110 TFLOP/s on B300 against 925 on B200, not twice); H100: 3.79e-13 of matmul against
    # 3.05e-13 and 2.26e-13
    b200 = _core(_job("gpt-oss-20b", "b200-sxm-180gb", 4096, False))
    b300 = _core(_job("gpt-oss-20b", "b300-sxm-270gb", 4096, False))
    h100 = _core(_job("gpt-oss-20b", "h100-sxm-80gb", 4096, False))
    assert b200.exp_bound and not b200.alu_bound
    assert b300.alu_bound and not b300.exp_bound
    assert not h100.exp_bound and not h100.alu_bound


def test_a_power_cap_slows_the_exponentials_with_the_clock() -> None:
    # 500 W of B200's 1000: the clock, and with it the SFUs, at (1/2)^(1/3)
    j = _job("llama3.1-8b", "b200-sxm-180gb", 8192, True)
    capped = replace(j, cluster=j.cluster.model_copy(update={"power_limit_w": 500.0}))
    clock = (500.0 / 1000.0) ** layer_time.POWER_CLOCK_EXPONENT
    assert _core(capped).exp_bound
    assert _core(capped).fwd == pytest.approx(_core(j).fwd / clock, rel=1e-9)


def test_fp8_attention_quantises_q_k_v_and_the_output_gradient() -> None:
    # Llama 3.1 8B, tp 2: Q 4096 wide, K and V 1024 each (8 of 32 heads), dO 4096: per token
    # (4096 + 1024 + 1024 + 4096) / 2 elements at 5 bytes, over the achieved HBM bandwidth
    j = _job("llama3.1-8b", "b200-sxm-180gb", 8192, True)
    core = _core(j, tp=2)
    hbm = layer_time.gpu_of(j).hbm
    assert core.quant == pytest.approx(5.0 * 8192 * 10240 / 2 / hbm)
    assert _core(_job("llama3.1-8b", "b200-sxm-180gb", 8192, False), tp=2).quant == 0.0


def test_fp8_attention_speeds_up_the_step_and_bf16_jobs_ignore_it() -> None:
    lay = Layout(dp=8, micro_batch_size=1)
    plain = cost.estimate(_job("llama3.1-8b", "gb300-nvl72", 8192, False), lay)
    fast = cost.estimate(_job("llama3.1-8b", "gb300-nvl72", 8192, True), lay)
    assert fast.step_time_s < plain.step_time_s
    # a bf16 twin (what bf16 first / last layers run as) runs bf16 attention whatever the flag
    bf16 = job("llama3.1-8b", "gb300-nvl72", 8, 8192, 64)
    assert _core(replace(bf16, fp8_attention=True)) == _core(bf16)


def test_plan_checks(tmp_path: Path) -> None:
    b200 = '[cluster]\ngpu = "b200-sxm-180gb"\nnum_gpus = 8\n'
    base = "[training]\nseq_length = 8192\nglobal_batch_size = 64\nfp8_attention = true\n"
    cases = {
        "": 'needs precision "fp8" or "fp4"',
        'precision = "fp8"\nfp8_recipe = "blockwise"\n': '"blockwise" recipe',
        'precision = "fp8"\nflash_attention = false\n': "flash_attention = true",
        'precision = "fp8"\nframework = "torchtitan"\n': "torchtitan",
    }
    for extra, message in cases.items():
        err = load_error(write(tmp_path, plan_text(MODEL, b200, base + extra, PARALLEL)))
        assert "training.fp8_attention" in err and message in err, err


def test_the_plan_writer_keeps_fp8_attention() -> None:
    # a plan that explain and check read back with the same job (planner.inputs.plan_writer)
    j = _job("llama3.1-8b", "b200-sxm-180gb", 8192, True)
    text = plan_writer.render(j, Layout(dp=8), {"name": "llama3.1-8b"}, ["t"])
    assert "fp8_attention = true" in text
    assert parse_plan(tomllib.loads(text)).job.fp8_attention
    plain = _job("llama3.1-8b", "b200-sxm-180gb", 8192, False)
    assert "fp8_attention" not in plan_writer.render(plain, Layout(dp=8), {"name": "x"}, ["t"])
