"""Megatron-FSDP's double buffer on a model chunk without a decoder layer exits 2: each chunk's
allocator asserts it found FSDP units to pool (Megatron-LM d98e8a64 param_and_grad_buffer.py:
694-696 for the fixed pool, :933-935 for the max pool); a chunk holding only the embedding ("E")
or only the loss ("L") has none (mcore_fsdp_adapter.py:163-171: the decoder layers are the
units). Oracle: those asserts, and the chunks each layout string gives."""

from __future__ import annotations

import pytest

from planner.inputs.plan import parse_plan
from planner.search import rules


def _layout(pipeline: str, **parallel: object) -> tuple:
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 16},
            "parallel": {
                "tp": 1, "pp": 2, "vpp": 2, "micro_batch_size": 1, "zero_stage": 2,
                "pipeline_model_parallel_layout": pipeline, **parallel,
            },
        }
    )  # fmt: skip
    return plan.job, plan.require_layout()


@pytest.mark.parametrize(
    ("pipeline", "refused"),
    [
        ("E|t*16|t*16|L", True),  # rank 0's chunk 0 and rank 1's chunk 1: no decoder layer
        ("Et*8|t*8|t*8|t*8L", False),  # every chunk holds 8 layers
    ],
)
@pytest.mark.parametrize("max_pool", [False, True])
def test_a_chunk_without_units_under_the_double_buffer_is_refused(
    pipeline: str, refused: bool, max_pool: bool
) -> None:
    job, lay = _layout(pipeline, fsdp_double_buffer=True, fsdp_max_pool=max_pool)
    broken = [v.field for v in rules.violations(job, lay) if v.rule == "fsdp_pool"]
    assert broken == (["parallel.fsdp_double_buffer"] if refused else [])
    # without the double buffer the same chunks run (no allocator asserts)
    plain = lay.with_(fsdp_double_buffer=False, fsdp_max_pool=False)
    assert not [v for v in rules.violations(job, plain) if v.rule == "fsdp_pool"]
