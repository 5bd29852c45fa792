"""`planner check`'s single changes (planner.search.advice) against their own oracle: each change
applied to the plan and checked again, as a user would follow it (a fuzzer's 305 changes on 62
plans; these are the cases it found wrong).

Oracle: `memory.estimate` of the edited layout (the change as described, sequence parallelism
included where the description says so), and `cost.estimate` for the order."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, memory
from planner.search import advice
from planner.search.advice_pipeline import reshaped
from planner.search.rules import violations


def plan(model: str, gpu: str, n: int, parallel: dict[str, Any], **training: Any) -> Plan:
    train = {"seq_length": 8192, "global_batch_size": 128, **training}
    return parse_plan(
        {
            "model": {"name": model},
            "cluster": {"gpu": gpu, "num_gpus": n},
            "training": train,
            "parallel": parallel,
        }
    )


def by_name(changes: list[advice.Change]) -> dict[str, advice.Change]:
    return {c.describe(): c for c in changes}


def test_only_the_tp_change_turns_sequence_parallelism_on_and_says_so() -> None:
    """An MoE plan at tp 2 without sequence parallelism: every change also turned it on unseen
    (micro-batch 2 -> 1 claimed 33.0 GiB, the edit saved 30.9; recompute selective claimed
    4.2, which is sequence parallelism's own saving); the tp change says it."""
    p = plan("qwen3-30b-a3b", "h100-sxm-80gb", 16,
             {"tp": 2, "ep": 4, "sequence_parallel": False, "micro_batch_size": 2})  # fmt: skip
    job, lay = p.job, p.require_layout()
    base = memory.estimate(job, lay).peak
    changes = advice.memory_changes(job, lay)
    for c in changes:
        assert c.layout.sequence_parallel == (c.field in ("tp", "sequence_parallel")), c
        assert not violations(job, c.layout)
        # the change as described (the same sum in another order: to rounding)
        assert memory.estimate(job, c.layout).peak == pytest.approx(base - c.saves, rel=1e-12)
    # tp 4 takes its factor from dp, and says so: the plan's dp must change with it
    assert "tp 2 -> 4 (+ dp 8 -> 4 + sequence_parallel)" in by_name(changes)


def test_torchtitan_changes_keep_its_rules_and_its_split() -> None:
    """torchtitan runs sequence parallelism with any tp > 1: the tp change was dropped as
    invalid (it fits, saving 129 GiB on this 64k-token job); and a plan on torchtitan's own
    pipeline split was offered no deeper pipeline (pp 4 -> 8 saves 30 GiB on the 405B example:
    torchtitan's split at pp 8 then). Oracle for the pp: the plan written at every pp the 512
    GPUs / tp 8 leave (1 to 64), parsed, its layout passing the rules, and its peak."""
    p = plan("llama3.1-8b", "b200-sxm-180gb", 16, {"tp": 1, "cp": 2, "zero_stage": 3},
             seq_length=65536, framework="torchtitan")  # fmt: skip
    changes = by_name(advice.memory_changes(p.job, p.require_layout()))
    tp = changes["tp 1 -> 2 (+ dp 8 -> 4 + sequence_parallel)"]
    assert tp.fits and not violations(p.job, tp.layout)

    def deep(pp: int) -> Plan:
        return plan("llama3.1-405b", "h100-sxm-80gb", 512,
                    {"tp": 8, "pp": pp, "zero_stage": 3, "recompute": "selective"},
                    global_batch_size=512, framework="torchtitan")  # fmt: skip

    base = deep(4)
    job, lay = base.job, base.require_layout()
    # each deeper pp as the plan file would split it: torchtitan's own split at the new pp
    for depth in (8, 16):
        assert reshaped(job, lay, depth) == deep(depth).require_layout()
    peaks = {}
    for depth in (1, 2, 8, 16, 32, 64):
        q = deep(depth)
        if not violations(q.job, q.require_layout()):
            peaks[depth] = memory.estimate(q.job, q.require_layout()).peak
    # none fits: the pp of the largest saving, pp 1 (ZeRO 3 over dp 64: torch keeps a pipelined
    # stage's parameters gathered, planner.model's FSDP under pp; 86.8 GiB against pp 16's 105.6)
    (pp,) = [c for c in advice.memory_changes(job, lay) if c.field == "pp"]
    least = min(peaks, key=lambda k: peaks[k])
    assert not pp.fits and pp.after == least
    assert pp.layout == deep(least).require_layout()
    assert pp.describe() == f"pp 4 -> {least} (+ dp 16 -> {512 // 8 // least})"
    before = memory.estimate(job, lay).peak
    assert peaks[least] == pytest.approx(before - pp.saves)


def test_a_job_field_change_is_ordered_by_its_own_step_time() -> None:
    """The sparse kernels of DeepSeek sparse attention change the job, not the layout: they
    were ordered at the unchanged plan's time (41.8 s, beside a ZeRO change) where they run in
    10-12 s, and tilelang before the faster cudnn."""
    parallel = {
        "tp": 1, "pp": 16, "cp": 4, "ep": 16, "micro_batch_size": 1, "recompute": "selective",
        "recompute_modules": ["mla_up_proj", "layernorm", "moe_act"],
        "pipeline_layers": [4] * 15 + [1], "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep", "cp_comm_type": "all_gather",
    }  # fmt: skip
    p = plan("deepseek-v3.2", "h100-sxm-80gb", 256, parallel, seq_length=4096,
             global_batch_size=512, fused_rope=False, dsa_kernel_backend="none")  # fmt: skip
    job, lay = p.job, p.require_layout()

    def step(run: Any, layout: Any) -> float:
        return cost.estimate(run, layout).step_time_s

    changes = advice.memory_changes(job, lay, cost=step)
    fitting = [c for c in changes if c.fits]
    rest = [c for c in changes if not c.fits]
    for group in (fitting, rest):
        times = [step(c.job or job, c.layout) for c in group]
        assert times == sorted(times)
    kernels = [c for c in changes if c.field == "training.dsa_kernel_backend"]
    assert kernels and all(step(c.job, c.layout) < step(job, lay) for c in kernels)


def test_expert_tp_and_offloaded_modules_are_tried() -> None:
    """Mixtral 8x7B at tp 1, dp 16, ep 8 (one expert a GPU): expert tp 2 halves each GPU's
    expert weights, 3 x 4,096 x 14,336 x 32 layers / 2 = 2,818,572,288 parameters, and their
    bf16 weights and fp32 main gradients (6 bytes each): 16,911,433,728 bytes (the optimizer
    state stays: twice the share over half the expert-data-parallel ranks). The recipes'
    module sets of fine-grained activation offloading (rungs.OFFLOAD_SETS) are tried too. Each
    as described is what memory.estimate says of the edited layout."""
    p = plan(
        "mixtral-8x7b",
        "h100-sxm-80gb",
        16,
        {"tp": 1, "pp": 1, "dp": 16, "ep": 8, "zero_stage": 1},
        global_batch_size=64,
    )
    lay = p.require_layout()
    found = by_name(advice.memory_changes(p.job, lay))
    etp = found["etp 1 -> 2"]
    base, split = (memory.estimate(p.job, x).stages[0] for x in (lay, etp.layout))
    assert (base.weights + base.grads) - (split.weights + split.grads) == 16_911_433_728
    assert base.optimizer == split.optimizer
    offload = next(c for c in found.values() if c.field == "offload_modules")
    assert offload.describe().startswith("offload_modules none -> ")
    assert offload.layout.offload_modules in advice.OFFLOAD_SETS
    for change in (etp, offload):
        assert not violations(p.job, change.layout)
        after = memory.estimate(p.job, change.layout).peak
        assert memory.estimate(p.job, lay).peak - after == pytest.approx(change.saves)


def test_a_tp_change_from_tp_1_takes_sequence_parallelism_as_the_plan_file_would() -> None:
    """Llama 3.1 8B on 8 A100 at tp 1, micro-batch 4, no sequence_parallel in the plan (QA's
    case): `tp 1 -> 8` was priced without sequence parallelism (80.6 GiB, "does not fit"), but
    the plan file's default turns it on at any tp > 1 (plan_parallel: "None = on when tp > 1"),
    so a user who writes tp = 8 runs it, and fits; with it tp 4 fits already, and is offered.
    Oracle: the plan with that tp written in, parsed and estimated as `check` does."""
    parallel = {"tp": 1, "pp": 1, "micro_batch_size": 4, "zero_stage": 2, "recompute": "none"}
    p = plan("llama3.1-8b", "a100-sxm-80gb", 8, parallel)
    (tp,) = [c for c in advice.memory_changes(p.job, p.require_layout()) if c.field == "tp"]
    assert tp.describe() == "tp 1 -> 4 (+ dp 8 -> 2 + sequence_parallel)"
    edited = plan("llama3.1-8b", "a100-sxm-80gb", 8, {**parallel, "tp": 4})
    assert edited.require_layout().sequence_parallel
    rep = memory.estimate(edited.job, edited.require_layout())
    assert tp.fits == rep.fits and rep.fits
    before = memory.estimate(p.job, p.require_layout()).peak
    assert rep.peak == pytest.approx(before - tp.saves, rel=1e-12)
