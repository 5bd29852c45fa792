"""FP8 sequence-parallel gathers without --tp-comm-overlap (planner.model.layer_tp). Oracle:
Transformer Engine d0067d0d quantises the input before its NCCL all-gathers
(pytorch/module/layernorm_linear.py:309-313 and linear.py:408-411 the forward gather,
layernorm_linear.py:787-791 the backward re-gather, module/base.py:1749 the grad-output gather,
each `gather_along_first_dim(..., quantizer=...)`), so those three of a block's five collectives
move 1 byte an element (+ an MXFP8 / blockwise scale per 32 / 128 values: 1 / 32 byte), the two
reduce-scatters 2; hand arithmetic below."""

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
    assert layer_tp.gathered_share(job) == pytest.approx((1 + scale) / 2)
    # per block (attention, MLP): forward gather + reduce-scatter, backward grad-output gather,
    # input-gradient reduce-scatter and input re-gather: 3 x ag8 + 2 x rs
    layer = layer_time(job, lay, gpu_of(job), False)
    assert layer.tp_traffic == pytest.approx(2 * (3 * ag8 + 2 * rs))
    # the bf16 job's gathers move 2 bytes an element: 5 x rs a block
    bf16 = replace(job, precision="bf16")
    assert layer_time(bf16, lay, gpu_of(bf16), False).tp_traffic == pytest.approx(2 * 5 * rs)


def test_torchtitan_gathers_stay_16_bit(tmp_path: Path) -> None:
    # torchtitan b5bcd76c has no Float8 TP styles: its DTensor gathers move the bf16 activations
    job, _ = _plan(tmp_path, "tensorwise")
    assert layer_tp.gathered_share(replace(job, framework="torchtitan")) == 1.0
    assert layer_tp.gathered_share(replace(job, precision="bf16")) == 1.0
