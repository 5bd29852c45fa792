"""`planner check`'s advice against the QA report's cases (planner.search.advice,
planner.search.host_advice): each advised change applied to the plan as its words say (every
field it names, dp included) and checked again the way `planner check` checks a plan file, and
the brute force over every single value of each knob the advice turns.

Oracles: the edited plan parsed and checked (`rules.check_plan`: the world size, Megatron's
rules), `memory.estimate` / `host_memory.estimate` of it for whether it fits, and
`cost.estimate` for which is cheapest."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, host_memory, memory
from planner.search import advice, host_advice
from planner.search.advice import Change
from planner.search.rules import check_plan

L70: dict[str, Any] = {
    "model": {"name": "llama3.1-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
    "training": {"seq_length": 8192, "global_batch_size": 128},
    "parallel": {
        "tp": 8, "pp": 1, "dp": 8, "cp": 1, "sequence_parallel": True, "tp_comm_overlap": True,
        "micro_batch_size": 2, "zero_stage": 2, "recompute": "none",
        "cpu_offloading_num_layers": 0,
    },
}  # fmt: skip
"""Llama 3.1 70B on 64 H100 at tp 8, 20 layers short of fitting without offloading (the
report's l70_nooff.toml; 19 before the FSDP units' gradient buckets)."""


def doc(base: dict[str, Any] = L70, **edits: Any) -> dict[str, Any]:
    """`base` with `section.field` (bare: `[parallel]`) edits; None deletes the field."""
    d = copy.deepcopy(base)
    for key, value in edits.items():
        section, _, name = key.rpartition("__")
        table = d.setdefault(section or "parallel", {})
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
    return d


def checked(d: dict[str, Any]) -> Plan | None:
    """The plan as `planner check` takes it, or None where it refuses it."""
    try:
        return check_plan(parse_plan(copy.deepcopy(d)))
    except InputError:
        return None


def fits(p: Plan) -> bool:
    lay = p.require_layout()
    return memory.estimate(p.job, lay).fits and host_memory.estimate(p.job, lay).fits


def step(p: Plan) -> float:
    return cost.estimate(p.job, p.require_layout()).step_time_s


def _value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text == "none" or "," in text:  # a module list, as `Change.describe` writes it
        return [] if text == "none" else text.split(",")
    return text


def applied(d: dict[str, Any], c: Change) -> dict[str, Any]:
    """The plan edited as the change's words say: `field before -> after (+ field before ->
    after + flag + flag off ...)`, each part one field (a bare flag turned on, `flag off` off)."""
    words = c.describe().split(" (+ ")[0]
    parts = [words, *(c.also.split(" + ") if c.also else [])]
    out = copy.deepcopy(d)
    for part in parts:
        m = re.fullmatch(r"(\S+) (\S+) -> (\S+)", part)
        flag = part.removesuffix(" off")
        key, value = (m[1], _value(m[3])) if m else (flag, flag == part)
        section, _, name = key.rpartition(".")
        out.setdefault(section or "parallel", {})[name] = value
    return out


def plan_changes(d: dict[str, Any]) -> list[Change]:
    """What `planner check` advises the plan, ordered by the step-time model as check orders."""
    p = checked(d)
    assert p is not None
    job, lay = p.job, p.require_layout()

    def by_step(j: Any, new: Any) -> float:
        return cost.estimate(j, new).step_time_s

    if not memory.estimate(job, lay).fits:
        return advice.memory_changes(job, lay, cost=by_step)
    return host_advice.host_changes(job, lay, cost=by_step)


def brute(d: dict[str, Any]) -> list[tuple[float, str]]:
    """(step, edit) of every single value of each knob the advice turns that fits, as the plan
    file says it (tp, cp, pp with dp left for the loader to derive)."""
    p = checked(d)
    assert p is not None
    arch, lay = p.job.arch, p.require_layout()
    n = p.job.cluster.num_gpus
    edits: list[dict[str, Any]] = [{"zero_stage": z} for z in range(4)]
    edits += [{"micro_batch_size": m} for m in range(1, lay.micro_batch_size)]
    edits += [{"recompute": r} for r in ("selective", "full")]
    edits += [{"sequence_parallel": True}]
    edits += [{"cpu_offloading_num_layers": k} for k in range(arch.num_layers)]
    for knob in ("tp", "cp", "pp"):
        edits += [{knob: v, "dp": None} for v in range(2, n + 1) if n % v == 0]
    found = []
    for e in edits:
        q = checked(doc(d, **e))
        if q is not None and fits(q):
            found.append((step(q), str(e)))
    return sorted(found)


def test_a_tp_cp_pp_change_names_the_dp_it_takes_and_applies_as_written() -> None:
    """l70_nooff.toml: `cp 1 -> 2 saves 26.5 GiB` left dp 8, so the plan as edited exits 2 (the
    world size); every change now names dp where it changes it, and each applies as written."""
    changes = plan_changes(L70)
    by_name = {c.describe(): c for c in changes}
    assert "cp 1 -> 2 (+ dp 8 -> 4)" in by_name
    assert checked(doc(cp=2)) is None  # the old words: refused (the world size)
    base = checked(L70)
    assert base is not None
    before = memory.estimate(base.job, base.require_layout()).peak
    for c in changes:
        q = checked(applied(L70, c))
        assert q is not None, c.describe()
        assert fits(q) == c.fits
        assert memory.estimate(q.job, q.require_layout()).peak == pytest.approx(before - c.saves)
        assert q.require_layout().dp == c.layout.dp


@pytest.mark.parametrize(
    ("edits", "first_fits"),
    [
        ({}, "cpu_offloading_num_layers 0 -> 26"),  # l70_nooff: at the unchanged step
        # 26 (was 19, then 20) since Megatron-FSDP's ZeRO 2 keeps its gradient buckets in the
        # reduce-scatter queue until 1e9 elements are queued (planner/model/megatron_fsdp.py,
        # megatron_fsdp.py:420-444, pgb:3935-3948 d98e8a64): ZeRO 3's sharded weights, not
        # ZeRO 2, then fit l70_zero0, and only micro-batch 1 l70_mbs8
        ({"zero_stage": 0, "cpu_offloading_num_layers": 20}, "zero_stage 0 -> 3"),  # l70_zero0
        ({"micro_batch_size": 8, "cpu_offloading_num_layers": 20}, "micro_batch_size 8 -> 1"),
    ],
)
def test_the_cheapest_single_change_is_the_brute_forces(
    edits: dict[str, Any], first_fits: str
) -> None:
    """The report's l70_zero0 (`No single change makes it fit`, though ZeRO 2 does), l70_mbs8
    (micro-batch 2 and cp 4 fit, only 4 was tried) and l70_nooff (19 layers offloaded fit at
    the unchanged step, never tried): the first change check lists is the fastest of the brute
    force over every value of each knob, and each listed as fitting does, applied as written."""
    d = doc(**edits)
    changes = plan_changes(d)
    fitting = [c for c in changes if c.fits]
    assert fitting and fitting[0].describe() == first_fits
    found = brute(d)
    for c in fitting:
        q = checked(applied(d, c))
        assert q is not None and fits(q), c.describe()
        if c is fitting[0]:
            assert found and step(q) == pytest.approx(found[0][0])


def test_the_offloaded_optimizer_share_paired_with_a_change_is_the_fastest_that_fits() -> None:
    """l70_optoff_h360.toml: the whole optimizer offloaded overflows 360 GiB of host a node;
    check paired micro-batch 1 with 0.79 of it on the host (15.236 s) where 0.0 fits in 14.826 s.
    Brute force: every hundredth with the same paired change, the fastest that fits both. At
    7,552 tokens (the report's 8,192 no longer fits the GPU at micro-batch 2 now that
    Megatron-FSDP's fp32 main weights of the offloaded share are counted there), the GPU has too
    little room for the 0.79 that fits the host, so a change must come with it."""
    d = doc(
        training__optimizer_offload_fraction=1.0,
        training__seq_length=7552,
        cluster__host_memory_gib_per_node=360,
    )
    changes = plan_changes(d)
    pair = next(c for c in changes if c.also == "micro_batch_size 2 -> 1")
    assert pair.fits and pair.field == "training.optimizer_offload_fraction"
    steps = {}
    for i in range(100):
        q = checked(doc(d, micro_batch_size=1, training__optimizer_offload_fraction=i / 100))
        if q is not None and fits(q):
            steps[i / 100] = step(q)
    assert pair.after == min(steps, key=lambda x: (steps[x], x))
    # the report's 0.79 took 15.236 s and 0.0 14.826 s before ZeRO 2 reduce-scattered every
    # micro-batch (megatron_fsdp.py:761-787): now both slower, the order the same
    assert steps[pair.after] < steps.get(0.79, float("inf"))
    q = checked(applied(d, pair))
    assert q is not None and fits(q) and step(q) == pytest.approx(steps[pair.after])
