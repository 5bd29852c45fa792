"""AdamW's moments in bf16 under torchtitan (planner.model.fsdp2.adam_bytes). Oracle: torchtitan
b5bcd76c components/optimizer/optimizer.py:332-371, the "fused_opt_states_bf16" hook: exp_avg and
exp_avg_sq are zeros_like(p, dtype=torch.bfloat16), 2 + 2 bytes a parameter against 4 + 4."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import memory
from planner.model.stage_params import stage_params
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"


def test_bf16_moments_halve_the_optimizer_states(tmp_path: Path) -> None:
    # pp 1, dp_shard 8: the moments of P parameters, 8P / 8 in fp32, 4P / 8 in bf16
    states = "optimizer_state_dtype = 'bf16'\n"
    for dtype, per_param in (("", 8.0), (states, 4.0)):
        text = plan_text(training=TITAN + dtype, parallel="[parallel]\nzero_stage = 3\n")
        plan = check_plan(load_plan(write(tmp_path, text)))
        job, lay = plan.job, plan.require_layout()
        chunks = lay.chunk_layers(job.arch.num_layers)[0]
        dense, _ = stage_params(job, lay, 0, chunks)
        st = memory.stage_memory(job, lay, 0, chunks)
        assert st.optimizer == pytest.approx(per_param * dense / 8)
