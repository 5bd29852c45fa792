"""NVFP4 at ZeRO 0 (QA s33 item h11): `launch`'s Megatron targets, `check` of the plan and `check
--megatron-args` of a line must agree on the run.

Oracle: Megatron-LM d98e8a64. --fp4-param-gather sets TransformerConfig.fp4_param
(megatron/training/argument_utils.py:313 `kw_args['fp4_param'] = args.fp4_param_gather`), and
with it the decoder layers are built under `get_fp4_context(..., is_init=True)`
(megatron/core/transformer/transformer_block.py:357-359), which is TE's fp8_model_init when
`config.fp4_param` (megatron/core/fp4_utils.py:258; transformer_engine.py:285 `enabled =
qrecipe.fp4_param`): NVFP4 weights are the parameters whatever the optimizer. validate_args
asserts the distributed optimizer or FSDP for --fp8-param-gather only (arguments.py:1095-1097);
the fp4 flag's only check is that --fp4-format is given (arguments.py:1104-1105). planner counts
NVFP4 parameters only with a sharded optimizer (planner.model.buffers.quantised_weight_bytes), so
at ZeRO 0 the launch leaves the flag out, and the reader refuses a line that has it
(tests/inputs/test_megatron_args_fp4.py)."""

from __future__ import annotations

import re

import pytest
from megatron_mirror import MIRROR, source
from megatron_plans import assert_same, flags, make_plan, round_trip

from planner.emit import megatron, torchrun
from planner.inputs.plan import Plan


def plan_at(zero_stage: int, **training: object) -> Plan:
    # QA's /tmp/qa8/z0.toml: llama3.1-8b on 8 x B200, fp4, tp1, fp4_param_gather left default
    parallel = {"tp": 1, "zero_stage": zero_stage}
    return make_plan("llama3.1-8b", 8, parallel, "b200-sxm-180gb", precision="fp4", **training)


def test_zero0_leaves_the_flag_out_says_so_and_reads_back_the_same_run() -> None:
    plan = plan_at(0)
    assert plan.job.fp4_param_gather  # the plan default
    f = flags(plan)
    assert f["--fp4-format"] == ["e2m1"] and f["--fp4-recipe"] == ["nvfp4"]
    assert "--fp4-param-gather" not in f and "--use-distributed-optimizer" not in f
    assert megatron.FP4_PARAM_GATHER_NOTE in megatron.arguments(plan).notes
    text = megatron.render(plan, "job")
    assert f"# note: {megatron.FP4_PARAM_GATHER_NOTE}" in text
    assert f"# note: {megatron.FP4_PARAM_GATHER_NOTE}" in torchrun.megatron_arrays(plan)
    # the launched line reads back as the plan: bf16 weights beside their NVFP4 cache, the same
    # per-stage memory (assert_same compares memory.estimate of both)
    back = round_trip(plan)
    assert not back.job.fp4_param_gather and back.require_layout().zero_stage == 0
    assert_same(plan, back)


@pytest.mark.parametrize("zero_stage", [1, 3])
def test_a_sharded_optimizer_keeps_the_flag_without_the_note(zero_stage: int) -> None:
    plan = plan_at(zero_stage)
    assert "--fp4-param-gather" in flags(plan)
    assert megatron.FP4_PARAM_GATHER_NOTE not in megatron.arguments(plan).notes
    assert_same(plan, round_trip(plan))


def test_zero0_without_the_gather_has_no_note() -> None:
    plan = plan_at(0, fp4_param_gather=False)
    assert "--fp4-param-gather" not in flags(plan)
    assert megatron.FP4_PARAM_GATHER_NOTE not in megatron.arguments(plan).notes


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_megatron_source_still_says_so() -> None:
    utils = source("megatron/training/argument_utils.py").splitlines()
    assert utils[312].strip() == "kw_args['fp4_param'] = args.fp4_param_gather"
    block = source("megatron/core/transformer/transformer_block.py").splitlines()
    assert "elif layer_config.fp4:" in block[356]
    assert "get_fp4_context(" in block[357] and "is_init=True" in block[358]
    args = source("megatron/training/arguments.py")
    assert re.search(r"if args\.fp8_param_gather:\n\s+assert args\.use_distributed_optimizer", args)
    assert not re.search(r"if args\.fp4_param_gather:\n\s+assert args\.use_distributed_opt", args)
