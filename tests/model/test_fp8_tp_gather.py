"""FP8 sequence-parallel gathers without --tp-comm-overlap (planner.model.layer_tp). Oracle:
Transformer Engine d0067d0d quantises the input before its NCCL all-gathers
(pytorch/module/layernorm_linear.py:309-313 and linear.py:408-411 the forward gather,
layernorm_linear.py:787-791 the backward re-gather, module/base.py:1749 the grad-output gather,
each `gather_along_first_dim(..., quantizer=...)`), so those three of a block's five collectives
move 1 byte an element (+ an MXFP8 / blockwise scale per 32 / 128 values: 1 / 32 byte), the two
reduce-scatters 2; hand arithmetic below. The input gathers move one usage (row-wise forward,
layernorm_linear.py:300 / linear.py:406; column-wise re-gather, module/_common.py:50-55); the
grad-output gather both (linear.py:903-905), which the block-scaled recipes gather apart
(distributed.py `_start_all_gather_fp8_blockwise`, `_all_gather_mxfp8`, `_all_gather_nvfp4`:
each `if quantizer.rowwise_usage` / `if quantizer.columnwise_usage` its own all-gather) and the
per-tensor FP8 ones row-wise only (`supports_only_rowwise_all_gather`, float8_tensor.py:190-194,
:396-400). NVFP4 (`_all_gather_nvfp4` :1435-1500): E2M1 data, 0.5 byte, and an E4M3 scale per 16
values, 1 / 16 byte."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import comms, layer_tp
from planner.model.layer_time import gpu_of, layer_time
from planner.model.shard import BF16
from planner.search.rules import check_plan

TRAINING = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "fp8"\n'
PARALLEL = "[parallel]\ntp = 8\nsequence_parallel = true\nzero_stage = 1\n"


def _plan(tmp_path: Path, recipe: str) -> tuple[Job, Layout]:
    training = TRAINING + f'fp8_recipe = "{recipe}"\n'
    plan = check_plan(load_plan(write(tmp_path, plan_text(training=training, parallel=PARALLEL))))
    return plan.job, plan.require_layout()


@pytest.mark.parametrize(("recipe", "scale"), [("tensorwise", 0.0), ("blockwise", 4 / 128)])
def test_fp8_gathers_move_one_byte(tmp_path: Path, recipe: str, scale: float) -> None:
    job, lay = _plan(tmp_path, recipe)
    t, h = 8192, job.arch.hidden_size  # Llama 3.1 8B: one micro-batch of 8192 tokens, h 4096
    grp = comms.place(job.cluster, 1, 8)
    rs = comms.reduce_scatter(t * h * BF16, grp)  # 16-bit reduce-scatters
    ag8 = comms.all_gather(t * h * (1 + scale), grp)  # FP8 data + scales
    usages = 1 if recipe == "tensorwise" else 2  # the grad-output gather's
    ag_grad = comms.all_gather(t * h * (1 + scale) * usages, grp)
    assert layer_tp.gathered_share(job) == pytest.approx((1 + scale) / 2)
    assert layer_tp.grad_output_share(job) == pytest.approx(usages * (1 + scale) / 2)
    # per block (attention, MLP): forward gather + reduce-scatter, backward grad-output gather,
    # input-gradient reduce-scatter and input re-gather: 2 x ag8 + ag_grad + 2 x rs (blockwise
    # before: 3 x ag8 + 2 x rs, its grad-output gather at one usage)
    layer = layer_time(job, lay, gpu_of(job), False)
    assert layer.tp_traffic == pytest.approx(2 * (2 * ag8 + ag_grad + 2 * rs))
    # the bf16 job's gathers move 2 bytes an element: 5 x rs a block
    bf16 = replace(job, precision="bf16")
    assert layer_time(bf16, lay, gpu_of(bf16), False).tp_traffic == pytest.approx(2 * 5 * rs)


def test_torchtitan_gathers_stay_16_bit(tmp_path: Path) -> None:
    # torchtitan b5bcd76c has no Float8 TP styles: its DTensor gathers move the bf16 activations
    job, _ = _plan(tmp_path, "tensorwise")
    assert layer_tp.gathered_share(replace(job, framework="torchtitan")) == 1.0
    assert layer_tp.gathered_share(replace(job, precision="bf16")) == 1.0


def test_nvfp4_gathers_move_nvfp4(tmp_path: Path) -> None:
    """NVFP4 on B200: the input gathers 0.5 + 1 / 16 = 0.5625 byte an element (0.28125 of the
    bf16 activations), the grad-output gather both usages, 1.125 (0.5625); the reduce-scatters 2.
    (Before: every gather at 2 bytes.)"""
    cluster = '[cluster]\ngpu = "b200-sxm-180gb"\nnum_gpus = 8\n'
    training = TRAINING.replace('"fp8"', '"fp4"')
    text = plan_text(cluster=cluster, training=training, parallel=PARALLEL)
    plan = check_plan(load_plan(write(tmp_path, text)))
    job, lay = plan.job, plan.require_layout()
    assert job.quant_recipe == "nvfp4"
    assert layer_tp.gathered_share(job) == pytest.approx(0.28125)
    assert layer_tp.grad_output_share(job) == pytest.approx(0.5625)
    t, h = 8192, job.arch.hidden_size
    grp = comms.place(job.cluster, 1, 8)
    rs = comms.reduce_scatter(t * h * BF16, grp)
    ag4 = comms.all_gather(t * h * 0.5625, grp)
    ag_grad = comms.all_gather(t * h * 1.125, grp)
    layer = layer_time(job, lay, gpu_of(job), False)
    assert layer.tp_traffic == pytest.approx(2 * (2 * ag4 + ag_grad + 2 * rs))
