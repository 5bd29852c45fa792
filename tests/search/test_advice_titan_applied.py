"""`planner check`'s fix list on torchtitan plans that do not fit (planner.search.advice): every
change it lists, applied to the plan file's text as its words say, gives a plan `planner check`
takes (exit 0 where the change is listed as fitting, 1 where it is the largest saving), and a
tp, cp or pp that moves torchtitan's data-parallel shards to one (or from one) names the ZeRO
stage torchtitan's FSDP2 then runs (`zero_stage 3 -> 0`). The loader and the rules share one
bound on the virtual stages (`plan_layout.too_many_stages`), so no candidate names a vpp the
plan file refuses.

Oracles: the `planner check` CLI itself on the edited file (its exit code), the brute force over
each tp the GPUs leave room for (written with the ZeRO stage that `check` takes, dp derived by
the loader), and torchtitan's stage bound, b5bcd76c distributed/pipeline_parallel.py:390-395
(num_stages > num_layers + 1 + 1 raises)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from test_advice_applied import applied, checked, doc, fits

from planner.search import advice, rules
from planner.search.advice import Change
from planner.search.advice_pipeline import other_vpps

TITAN_8B: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {"framework": "torchtitan", "seq_length": 8192, "global_batch_size": 32},
    "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 4, "zero_stage": 3, "recompute": "none"},
}
"""Llama 3.1 8B on 8 H100 under torchtitan, FSDP2 over all 8 (dp_shard 8), 4 x 8,192 tokens a
micro-batch without recompute: does not fit."""

TITAN_405 = {
    "model": {"name": "llama3.1-405b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 512},
    "training": {
        "framework": "torchtitan", "seq_length": 8192, "global_batch_size": 512,
        "precision": "fp8",
    },
    "parallel": {"tp": 8, "pp": 8, "micro_batch_size": 1, "zero_stage": 3, "recompute": "none"},
    "torchtitan": {"compile": True, "async_tp": True, "float8_all_gather": True},
}  # fmt: skip
"""examples/torchtitan-llama3.1-405b-h100.toml without its full recompute: does not fit."""

PLANS = {
    "8b": TITAN_8B,
    # dp_replicate 4 of dp 8: two shards; tp or pp 2 leaves one (zero_stage 0)
    "8b replicate 4": doc(
        TITAN_8B, micro_batch_size=8, training__global_batch_size=64, torchtitan__dp_replicate=4
    ),
    "405b": TITAN_405,
    "405b tp 4 pp 16": doc(TITAN_405, tp=4, pp=16),
    "70b vpp 2": doc(
        TITAN_405,
        model__name="llama3.1-70b",
        cluster__num_gpus=16,
        tp=2,
        pp=4,
        vpp=2,
        training__global_batch_size=64,
    ),
}


def _toml(d: dict[str, Any]) -> str:
    """The plan as a file's text: one table a section, scalars and lists of strings."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items())
        for name, table in d.items()
    )


def _words(d: dict[str, Any], text: str) -> dict[str, Any]:
    """The plan edited as the text `check` prints says: `field a -> b (+ field a -> b + flag +
    flag off ...)` (`test_advice_applied.applied`, from the words alone)."""
    m = re.fullmatch(r"(\S+) (\S+) -> (\S+)(?: \(\+ (.*)\))?", text)
    assert m is not None, text
    also = m[4] or ""
    return applied(d, Change(m[1], m[2], m[3], None, 0.0, False, 0, also))  # type: ignore[arg-type]


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run(["check", str(path), "--json"], capsys)
    assert code in (0, 1), err
    return code, json.loads(out)


@pytest.mark.parametrize("name", list(PLANS))
def test_every_listed_change_applied_as_written_is_a_plan_check_takes(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each change of the fix list, written into the plan file as its words say and checked by
    `planner check`: exit 0 where it is listed as fitting, 1 where it is not (never 2)."""
    d = PLANS[name]
    plan = tmp_path / "plan.toml"
    plan.write_text(_toml(d))
    code, data = _check(plan, capsys)
    assert code == 1 and data["changes"]
    for i, c in enumerate(data["changes"]):
        edited = tmp_path / f"edited{i}.toml"
        edited.write_text(_toml(_words(d, c["change"])))
        code, _ = _check(edited, capsys)
        assert code == (0 if c["fits"] else 1), c["change"]


def _zero_for(d: dict[str, Any], tp: int) -> int:
    """The ZeRO stage torchtitan runs at `tp`, by hand: FSDP2 (3) where dp_shard = num_gpus /
    (tp x pp x cp) / dp_replicate exceeds 1 (with cp 1), else replication (0)."""
    par = d["parallel"]
    rep = d.get("torchtitan", {}).get("dp_replicate", 1)
    shard = d["cluster"]["num_gpus"] // (tp * par["pp"]) // rep
    return 3 if shard > 1 else 0


@pytest.mark.parametrize(("name", "tp"), [("8b", 8), ("8b replicate 4", 2)])
def test_a_tp_that_leaves_one_shard_is_listed_with_zero_stage_0(name: str, tp: int) -> None:
    """More tp with fewer data-parallel ranks: at dp = dp_replicate torchtitan's FSDP2 has one
    shard and the plan must say zero_stage 0 (`rules.torchtitan.sharding`); the fix list left
    such a tp out, as if the rules refused it. The brute force: every tp the 8 GPUs leave room
    for, written with the ZeRO stage `check` takes; where one fits the list has a tp that fits
    (8B: tp 8, dp 1), and wherever the rules take it the list's tp names `zero_stage 3 -> 0`."""
    d = PLANS[name]
    p = checked(d)
    assert p is not None
    changes = advice.memory_changes(p.job, p.require_layout())
    fitting_tps = []
    for t in (2, 4, 8):
        q = checked(doc(d, tp=t, zero_stage=_zero_for(d, t)))
        if q is not None and fits(q):
            fitting_tps.append(t)
    listed = [c for c in changes if c.field == "tp"]
    assert listed, [c.describe() for c in changes]
    (c,) = listed
    assert c.after == tp and "zero_stage 3 -> 0" in c.also
    assert c.fits == (tp in fitting_tps)
    if fitting_tps:
        assert c.fits
    q = checked(applied(d, c))
    assert q is not None and q.require_layout().zero_stage == 0


TITAN_PP4 = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "training": {"framework": "torchtitan", "seq_length": 8192, "global_batch_size": 64},
    "parallel": {"tp": 2, "pp": 4, "micro_batch_size": 1, "zero_stage": 3, "recompute": "none"},
}
"""Llama 3.1 8B (32 layers) at pp 4 under torchtitan's own split: 34 effective layers over 4
stages, 8, 9, 8, 7 decoder layers (9 the most)."""


@pytest.mark.parametrize("schedule", [None, "Interleaved1F1B", "LoopedBFS"])
def test_no_vpp_candidate_has_more_stages_than_torchtitan_splits(schedule: str | None) -> None:
    """At pp 4 the candidates went up to vpp 9 (a chunk of the 9-layer stage each), 36 virtual
    stages: torchtitan raises above 32 + 2 (the module docstring), as the plan file's reading
    refuses. By hand the most is vpp 8 (4 x 8 = 32 <= 34; 4 x 9 = 36 > 34): the rules refuse
    vpp 9 with parallel.vpp, every candidate `advice.single_changes` yields reads back from its
    plan file, and the largest vpp is 8."""
    d = TITAN_PP4 if schedule is None else doc(TITAN_PP4, torchtitan__pipeline_schedule=schedule)
    if schedule is not None:
        d = doc(d, vpp=2)
    p = checked(d)
    assert p is not None
    job, lay = p.job, p.require_layout()
    nine = next(new for vpp, new in other_vpps(job, lay) if vpp == 9)
    assert [(v.rule, v.field) for v in rules.violations(job, nine)] == [
        ("tt_stages", "parallel.vpp")
    ]
    vpps = []
    for _, field, after, new, also in advice.single_changes(job, lay):
        c = Change(field, advice.field_value(lay, field), after, new, 0.0, False, 0, also)
        assert checked(applied(copy.deepcopy(d), c)) is not None, c.describe()
        if field == "vpp":
            vpps.append(after)
    assert max(vpps) == 8
