"""Megatron's CPU-offloaded optimizer (--optimizer-cpu-offload, `Job.optimizer_offload_fraction`).

Oracles: Megatron-LM d98e8a64's HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/
hybrid_optimizer.py: the offloaded share's fp32 copy and Adam moments are host tensors, the rest
a fp32 copy on the GPU with fp32 moments) and validate_args (its asserts), hand arithmetic in the
comments for the host step, and the round trip through `planner launch`'s arguments."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from jobs import job

from planner.cli import explain_notes
from planner.emit import bridge, megatron
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import cost, memory, optimizer_offload
from planner.search.rules import check_plan, violations

LAYOUT = Layout(tp=4, pp=2, dp=8, sequence_parallel=True, zero_stage=1)
BASE = job("llama3.1-70b", "h100-sxm-80gb", 64, 4096, 256)

LINE = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
    "--vocab-size 32000 --use-distributed-optimizer --use-precision-aware-optimizer "
)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_the_offloaded_share_leaves_the_gpu(fraction: float) -> None:
    # fp32 master and moments, 12 bytes a parameter, of which the GPU keeps the 1 - f share (at
    # HybridDeviceOptimizer's 12 too: a fp32 copy and fp32 moments); weights and gradients stay
    off = replace(BASE, optimizer_offload_fraction=fraction)
    pairs = zip(
        memory.estimate(BASE, LAYOUT).stages, memory.estimate(off, LAYOUT).stages, strict=True
    )
    for a, b in pairs:
        assert b.optimizer == pytest.approx((1 - fraction) * a.optimizer)
        assert (b.weights, b.grads, b.activations) == (a.weights, a.grads, a.activations)


def test_bf16_moments_do_not_reach_the_gpu_share() -> None:
    # --exp-avg-dtype bf16 makes the GPU's Adam 6 bytes (2 + 2 moments and the fp32 master's
    # int16 remainder, TransformerEngine 04912bf0 fused_adam.py `_initialize_state`:
    # planner.model.adam_step); the host optimizer's GPU part keeps 12
    bf16 = replace(BASE, optimizer_state_dtype="bf16")
    half = replace(bf16, optimizer_offload_fraction=0.5)
    a = memory.estimate(bf16, LAYOUT).stages[0].optimizer
    assert memory.estimate(half, LAYOUT).stages[0].optimizer == pytest.approx(a * 0.5 * 12 / 6)


def test_host_step_by_hand() -> None:
    # 1e9 parameters on the host of an H100 (PCIe 5.0 x16 shared by two GPUs, 64 / 2 x 0.8 =
    # 25.6 GB/s; DGX H100 host memory 614.4 / 8 x 0.75 = 57.6 GB/s): gradients out 4e9 / 25.6e9
    # = 0.156 s, AdamW 28e9 / 57.6e9 = 0.486 s, fp32 masters back 4e9 / 25.6e9 = 0.156 s
    out, adam, back = 4e9 / 25.6e9, 28e9 / 57.6e9, 4e9 / 25.6e9
    assert optimizer_offload.host_step_time(BASE, 1e9, overlap=True) == pytest.approx(adam)
    total = optimizer_offload.host_step_time(BASE, 1e9, overlap=False)
    assert total == pytest.approx(out + adam + back)
    assert optimizer_offload.host_step_time(BASE, 0.0, overlap=False) == 0.0


def test_the_step_pays_the_host_update_where_it_is_the_longer() -> None:
    off = replace(BASE, optimizer_offload_fraction=1.0)
    a, b = cost.estimate(BASE, LAYOUT), cost.estimate(off, LAYOUT)
    # Llama 3.1 70B over tp 4 x pp 2: 40 layers of 0.856e9 and a 1.05e9 embedding (or output
    # layer) a stage, 8.8e9 parameters a GPU, 1.1e9 updated under ZeRO-1's dp 8: 1.1e9 x 28 /
    # 57.6e9 = 0.535 s of host AdamW, plus the GPU's norm read and gradient zeroing (4 x 1.1e9 +
    # 4 x 8.8e9 bytes at 0.8 x 3.35 TB/s: 15 ms); on the GPU alone it was 38 x 1.1e9 + 4 x 8.8e9
    # bytes, 29 ms
    assert 0.53 < b.breakdown.optimizer < 0.60
    assert 0.025 < a.breakdown.optimizer < 0.035
    gained = b.breakdown.optimizer - a.breakdown.optimizer
    assert b.step_time_s - a.step_time_s == pytest.approx(gained, rel=1e-6)


def test_megatron_lines_are_read_as_megatron_runs_them() -> None:
    plan = parse_plan(megatron_args.to_plan(LINE + "--optimizer-cpu-offload", "h100-sxm-80gb", 8))
    assert plan.job.optimizer_offload_fraction == 1.0  # argparse's default
    assert not plan.job.optimizer_offload_overlap
    line = LINE + "--optimizer-cpu-offload --optimizer-offload-fraction 0.5 "
    line += "--overlap-cpu-optimizer-d2h-h2d --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    half = parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8))
    assert (half.job.optimizer_offload_fraction, half.job.optimizer_offload_overlap) == (0.5, True)
    # with nothing offloaded every state is the host optimizer's fp32 GPU part
    none = LINE + "--optimizer-cpu-offload --optimizer-offload-fraction 0 --exp-avg-dtype bf16"
    zero = parse_plan(megatron_args.to_plan(none + " --exp-avg-sq-dtype bf16", "h100-sxm-80gb", 8))
    assert zero.job.optimizer_bytes == 12.0


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (LINE.replace("--use-precision-aware-optimizer ", ""), "--use-precision-aware-optimizer"),
        (
            LINE + "--fp8-format hybrid --fp8-recipe blockwise --fp8-param-gather",
            'needs fp8_recipe "delayed"',
        ),
    ],
)
def test_what_megatron_asserts_is_refused(line: str, needle: str) -> None:
    # the reader refuses the flag's own assert, the plan's rules the rest (as check runs them)
    with pytest.raises(InputError, match=needle):
        doc = megatron_args.to_plan(line + " --optimizer-cpu-offload", "h100-sxm-80gb", 8)
        check_plan(parse_plan(doc))


@pytest.mark.parametrize(
    ("change", "lay"),
    [
        ({}, Layout(tp=4, pp=2, dp=8, zero_stage=0)),  # no distributed optimizer
        ({"optimizer": "muon"}, LAYOUT),
        ({"framework": "torchtitan"}, Layout(tp=4, pp=1, dp=16, zero_stage=3)),
        ({"precision": "fp8", "fp8_recipe": "blockwise", "fp8_param_gather": True}, LAYOUT),
    ],
)
def test_plans_megatron_would_refuse_are_refused(change: dict[str, object], lay: Layout) -> None:
    off = replace(BASE, optimizer_offload_fraction=1.0, **change)  # type: ignore[arg-type]
    assert any(v.rule == "optimizer_offload" for v in violations(off, lay))
    assert not any(v.rule == "optimizer_offload" for v in violations(BASE, lay))


def test_launch_writes_what_reads_back() -> None:
    doc = megatron_args.to_plan(
        LINE + "--optimizer-cpu-offload --optimizer-offload-fraction 0.75", "h100-sxm-80gb", 8
    )
    plan = parse_plan(doc)
    flags = megatron.arguments(plan).flat()
    assert flags[flags.index("--optimizer-offload-fraction") + 1] == "0.75"
    assert "--use-precision-aware-optimizer" in flags
    assert "--overlap-cpu-optimizer-d2h-h2d" not in flags  # the line had none
    again = parse_plan(megatron_args.to_plan(" ".join(flags), "h100-sxm-80gb", 8))
    assert again.job.optimizer_offload_fraction == 0.75
    assert not again.job.optimizer_offload_overlap
    optimizer = bridge.sections(plan)["optimizer"]
    assert optimizer["optimizer_cpu_offload"] is True
    assert optimizer["optimizer_offload_fraction"] == 0.75
    assert optimizer["use_precision_aware_optimizer"] is True
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "gpt"}, ["t"])
    assert "optimizer_offload_fraction = 0.75" in text
    assert "optimizer_offload_overlap = false" in text


def _number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m is not None, (pattern, text)
    return float(m.group(1))


def test_explain_says_what_the_host_holds_and_the_step_pays() -> None:
    # the busiest GPU updates ~1.1e9 parameters (above); each takes 16 bytes of host memory
    # (fp32 copy, two fp32 moments, fp32 gradient buffer): ~16.4 GiB a GPU, 131 a node of 8, and
    # the round-up of the copy's and the buffer's pinned blocks (8 of the 16 bytes), each block
    # under twice its bytes: less than 24 bytes (planner.model.host_pinned); the GPU keeps none of
    # their 12 bytes
    off = replace(BASE, optimizer_offload_fraction=1.0)
    perf, base = cost.estimate(off, LAYOUT), cost.estimate(BASE, LAYOUT)
    (text,) = [n for n in explain_notes.notes(off, LAYOUT, perf) if "offloaded" in n]
    on_gpu = max(st.optimizer for st in memory.estimate(BASE, LAYOUT).stages)
    host = _number(r"([\d.]+) GiB of pinned host memory", text)
    exact = 16 / 12 * on_gpu / 2**30
    assert exact - 0.05 < host < 24 / 16 * exact
    assert 16.0 < host < 25.0
    added = _number(r"adds ([\d.]+) s", text)
    assert added == pytest.approx(perf.step_time_s - base.step_time_s, abs=1e-3)
    assert not [n for n in explain_notes.notes(BASE, LAYOUT, base) if "offloaded" in n]
