"""The plans and checks tests/emit/test_emit_megatron.py and test_megatron_round_trip.py share:
a plan from a few tables (`make_plan`), its Megatron-LM flags (`flags`), what `planner check
--megatron-args` reads back from its launch (`round_trip`) and the sameness that reading must
keep (`assert_same`: the plan under the environment its header names)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from paths import PLANS

from planner.emit import megatron
from planner.emit.prediction import exports_expandable
from planner.inputs import megatron_args
from planner.inputs.megatron_flags import megatron_flags
from planner.inputs.plan import Plan, parse_plan
from planner.model import memory

GOLDEN_PLANS = sorted(PLANS.glob("launch-*.toml"))

MEGATRON_FLAGS = megatron_flags()
"""Every flag Megatron-LM d98e8a64's pretrain_gpt.py parser accepts, dumped from the parser
itself (the file's header says how)."""


def make_plan(
    model: str | dict[str, Any],
    num_gpus: int,
    parallel: dict[str, Any],
    gpu: str = "h100-sxm-80gb",
    **training: Any,
) -> Plan:
    model_table = {"name": model} if isinstance(model, str) else model
    train = {"seq_length": 4096, "global_batch_size": 256, **training}
    doc = {
        "model": model_table,
        "cluster": {"gpu": gpu, "num_gpus": num_gpus},
        "training": train,
        "parallel": parallel,
    }
    return parse_plan(doc, Path("test-plan.toml"))


def flags(plan: Plan) -> dict[str, list[str]]:
    """flag -> values, from the structured arguments."""
    out: dict[str, list[str]] = {}
    for arg in megatron.arguments(plan).flat_args():
        out[arg[0]] = list(arg[1:])
    return out


def round_trip(plan: Plan) -> Plan:
    """What `planner check --megatron-args FILE --gpu G --num-gpus N` reads from the file."""
    text = megatron.render(plan, "job")
    cluster = plan.job.cluster
    return parse_plan(megatron_args.to_plan(text, cluster.gpu.name, cluster.num_gpus))


def assert_same(plan: Plan, back: Plan) -> None:
    """Same layout (etp None = tp, as Megatron defaults it; a pipeline split however spelled, as
    its stages), same job settings, same memory."""
    assert plan.layout is not None and back.layout is not None
    want = plan.layout
    if plan.job.arch.is_moe:
        want = want.with_(etp=want.expert_tp)
    arch = plan.job.arch
    split = (arch.num_layers, arch.mtp_num_layers)
    assert back.layout.split_as_stages(*split) == want.split_as_stages(*split)
    for field in ("seq_length", "global_batch_size", "precision", "main_grad_dtype"):
        assert getattr(back.job, field) == getattr(plan.job, field), field
    if plan.job.precision == "fp8":
        assert back.job.fp8_param_gather == plan.job.fp8_param_gather
    if plan.job.precision == "fp4":  # left out at ZeRO 0: megatron.FP4_PARAM_GATHER_NOTE
        gathers = plan.job.fp4_param_gather and plan.layout.zero_stage >= 1
        assert back.job.fp4_param_gather == gathers
    for field in ("bf16_layers_at_start", "bf16_layers_at_end"):
        assert getattr(back.job, field) == getattr(plan.job, field), field
    # the header's environment line is read back (QA s30 item 1): its expandable segments and
    # GEMM SM margin, which the torchrun, slurm and k8s files export (emit.common.environment)
    job = replace(plan.job, expandable_segments=True) if exports_expandable(plan) else plan.job
    assert back.job.expandable_segments == job.expandable_segments
    assert back.job.gemm_sm_margin == job.gemm_sm_margin
    mine = memory.estimate(job, plan.layout)
    theirs = memory.estimate(back.job, back.layout)
    assert [st.total for st in theirs.stages] == [st.total for st in mine.stages]
    assert theirs.peak == mine.peak
