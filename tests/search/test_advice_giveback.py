"""`planner check`'s tp and cp given back to dp (planner.search.advice): every smaller divisor,
dp times the factor, each with every field the plan file changes with it, listed only where it
fits.

A rank holds more of each layer at less tp or cp, so such a change saves memory only where
something else moves with it. Here, the micro-batches a rank runs, global batch / (micro-batch x
dp), fall as dp grows, so that fewer are in flight at the pipeline's first stage (1F1B holds
min(pp, micro-batches) of them): without sequence parallelism, tp leaves part of each layer's
activations whole (Korthikanti et al. 2022, eq. 2: sbh (10 + 24 / t + 5as / ht)), so half as
many micro-batches at half the tp hold less; at less cp, as many tokens are in flight (half as
many micro-batches of twice the tokens), and at cp 1 context parallelism's exchange buffers
(`cp_time.exchange_bytes`) go.

Oracle for every test: the plan edited as a user would edit it (each value written in, the
loader deriving dp), checked as `planner check` checks a plan file (`rules.check_plan`), judged
by `memory.estimate` / `host_memory.estimate` and `cost.estimate` (`test_advice_applied`); a
listed change is applied as its words say and must be the brute force's fastest edit."""

from __future__ import annotations

from typing import Any

import pytest
from test_advice_applied import applied, checked, doc, fits, plan_changes, step
from test_advice_brute import as_written, divisors, fastest, the

from planner.model import memory
from planner.search import advice


def _doc(model: str, gpu: str, n: int, seq: int, batch: int, **parallel: Any) -> dict[str, Any]:
    return {"model": {"name": model}, "cluster": {"gpu": gpu, "num_gpus": n},
            "training": {"seq_length": seq, "global_batch_size": batch},
            "parallel": parallel}  # fmt: skip


L70_TP8 = _doc(
    "llama3.1-70b", "h100-sxm-80gb", 64, 4096, 16, tp=8, pp=2, sequence_parallel=False,
    micro_batch_size=2, zero_stage=3, recompute="none",
)  # fmt: skip
"""Llama 3.1 70B on 64 H100 at tp 8, pp 2 (dp 4), no sequence parallelism: 16 / (2 x 4) = 2
micro-batches a rank, both in flight at stage 0; at tp 4, dp 8, one."""

L2_CP = _doc(
    "llama2-7b", "b200-sxm-180gb", 8, 32768, 8, tp=1, pp=4, cp=2, micro_batch_size=2,
    zero_stage=1, recompute="none",
)  # fmt: skip
"""Llama 2 7B on 8 B200 at 32,768 tokens, pp 4, cp 2 (dp 1): 8 / 2 = 4 micro-batches in
flight at stage 0; at cp 1, dp 2, two. No cp above 2 is left (dp 1)."""

L2_CP4 = _doc(
    "llama2-7b", "l40s-48gb", 64, 32768, 16, tp=2, pp=8, cp=4, micro_batch_size=2,
    zero_stage=3, recompute="none",
)  # fmt: skip
"""Llama 2 7B on 64 L40S, pp 8, cp 4 (dp 1): 16 / 2 = 8 micro-batches in flight at stage 0 of
32,768 / 4 = 8,192 tokens a rank; at cp 2, dp 2, four of 16,384; at cp 1, dp 4, two of
32,768."""


def test_tp_is_given_back_to_dp_where_that_fits_and_is_fastest() -> None:
    """Only more tp was ever tried (`tp 8 -> 16`...): the listed tp is the brute force's fastest
    over every tp the 64 GPUs / pp 2 leave (dp derived), as the plan sets sequence parallelism
    (off), it gives tp back (8 -> 4), and it is the first change listed: the brute force over
    every value of each knob finds nothing faster."""
    base = checked(L70_TP8)
    assert base is not None and not fits(base)
    changes = plan_changes(L70_TP8)
    tp = the(changes, "tp")
    edits = [{"tp": t, "dp": None} for t in divisors(32) if t != 8]
    best = fastest(L70_TP8, edits)
    after = best[1]["tp"]
    assert tp.fits and tp.after == after < 8
    assert tp.describe() == f"tp 8 -> {after} (+ dp 4 -> {4 * 8 // after})"
    assert as_written(L70_TP8, tp) == pytest.approx(best[0])
    fitting = [c for c in changes if c.fits]
    assert fitting[0] is tp
    for c in fitting:  # each listed as fitting does, applied as written
        as_written(L70_TP8, c)


@pytest.mark.parametrize("d", [L2_CP, L2_CP4], ids=["cp 2", "cp 4"])
def test_cp_is_given_back_to_dp_at_every_smaller_divisor(d: dict[str, Any]) -> None:
    """No change of cp was listed (dp 1: no room for more). The listed cp is the brute force's
    fastest over every cp that divides the plan's (dp derived); at cp 4 that is cp 1, though
    cp 2, the nearest, does not fit: it holds as many tokens and still its exchange's buffers
    (module docstring)."""
    base = checked(d)
    assert base is not None and not fits(base)
    was = base.require_layout().cp
    cp = the(plan_changes(d), "cp")
    best = fastest(d, [{"cp": c, "dp": None} for c in divisors(was) if c != was])
    assert cp.fits and best[1]["cp"] == cp.after == 1
    assert cp.describe() == f"cp {was} -> 1 (+ dp 1 -> {was})"
    assert as_written(d, cp) == pytest.approx(best[0])
    if was == 4:
        half = checked(doc(d, cp=2, dp=None))
        assert half is not None and not fits(half)


def test_a_give_back_is_listed_only_where_it_fits() -> None:
    """Llama 3.1 8B on 16 H100 at tp 8, pp 2, vpp 2 (dp 1), no sequence parallelism, 16,384
    tokens: tp 4 (dp 2) halves the micro-batches a rank and so lowers the peak, but not under
    the GPU's 77.3 GiB; no more tp is left (dp 1). A tp given back is listed only where it fits:
    none here. (At 8,192 tokens the doubled weights and ZeRO 3's gathered units at dp 2, which
    a one-rank group does not hold, outweigh the activations saved.)"""
    d = _doc(
        "llama3.1-8b", "h100-sxm-80gb", 16, 16384, 16, tp=8, pp=2, vpp=2,
        sequence_parallel=False, micro_batch_size=4, zero_stage=3, recompute="none",
    )  # fmt: skip
    base, half = checked(d), checked(doc(d, tp=4, dp=None))
    assert base is not None and half is not None and not fits(half)
    peak = memory.estimate(base.job, base.require_layout()).peak
    assert memory.estimate(half.job, half.require_layout()).peak < peak
    assert not [c for c in plan_changes(d) if c.field == "tp"]


def test_tp_1_names_sequence_parallelism_and_tp_overlap_off() -> None:
    """tp 2 -> 1 with TP overlap on: Megatron turns sequence parallelism off at tp 1 and
    refuses TP overlap without it (validate_args), so the change says both off; applied as
    written, the plan file loads to the layout the change was judged at. Oracle: the plan
    loader and the rules (`checked`), the edited plan's layout against the change's."""
    d = _doc(
        "llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, tp=2, sequence_parallel=True,
        tp_comm_overlap=True, micro_batch_size=1, zero_stage=1, recompute="none",
    )  # fmt: skip
    p = checked(d)
    assert p is not None
    assert checked(doc(d, tp=1, dp=None)) is None  # TP overlap at tp 1: refused
    (one,) = [
        advice.Change(field, advice.field_value(p.require_layout(), field), after, new, 0, True,
                      order, also)
        for order, field, after, new, also in advice.single_changes(p.job, p.require_layout())
        if field == "tp" and after == 1
    ]  # fmt: skip
    assert one.describe() == "tp 2 -> 1 (+ dp 4 -> 8 + sequence_parallel off + tp_comm_overlap off)"
    q = checked(applied(d, one))
    assert q is not None and q.require_layout() == one.layout


def test_a_torchtitan_give_back_names_the_zero_stage_its_shards_ask() -> None:
    """torchtitan at tp 8 on 8 GPUs replicates (dp 1: zero_stage 0); at tp 4, dp 2, FSDP2
    shards over the two (zero_stage 3, `rules.torchtitan.sharding`): the change says so, and
    applies as written. Oracle: the plan loader and the rules (`checked`)."""
    d = _doc("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, tp=8, micro_batch_size=1,
             zero_stage=0, recompute="none")  # fmt: skip
    d["training"]["framework"] = "torchtitan"
    p = checked(d)
    assert p is not None
    assert checked(doc(d, tp=4, dp=None)) is None  # zero_stage 0 at dp 2: refused
    lay = p.require_layout()
    (four,) = [
        advice.Change(field, lay.tp, after, new, 0, True, order, also)
        for order, field, after, new, also in advice.single_changes(p.job, lay)
        if field == "tp" and after == 4
    ]
    assert four.describe() == "tp 8 -> 4 (+ dp 1 -> 2 + zero_stage 0 -> 3)"
    q = checked(applied(d, four))
    assert q is not None and q.require_layout() == four.layout
    assert step(q) > 0
