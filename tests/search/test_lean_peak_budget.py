"""`lean_peak.min_peak` asks the host's exact budget for offloaded activations (its walk of the
pinned pieces, `host_pinned.rounding`) only where a base's rungs could be leaner than the leanest
found so far, and finds what the plain walk over every base finds.

Oracle: a brute force written out here, the walk `min_peak` made before it skipped anything:
every structure, option and base of the lean space (`space.bases` at the smallest micro-batch,
every vpp and split), each ZeRO stage `space.zero_stages` tries, the leanest rungs
(`rungs.leanest`) held to the exact `host_memory.activation_budget` as the search holds them
(none where the budget is below 0; the rungs no other covers; whole layers offloaded bisected
down to the most whose bytes fit), each estimated; the least peak kept. Its count of exact
budgets is the other oracle: one a base and ZeRO stage."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search import space as space_mod
from planner.search.lean_peak import min_peak
from planner.search.rungs import Rung, covers, leanest
from planner.search.space import Bound, Space


def _held(job_: Job, zbase: Layout, rung: Rung, budget: float) -> Rung | None:
    if not rung.offload and not rung.offload_modules:
        return rung

    def fits(r: Rung) -> bool:
        return host_memory.activation_bytes(job_, r.on(zbase)) <= budget

    if fits(rung):
        return rung
    best = max((k for k in range(1, rung.offload) if fits(replace(rung, offload=k))), default=0)
    return replace(rung, offload=best) if best else None


def _uncovered(rungs: list[Rung]) -> list[Rung]:
    return [r for r in rungs if not any(covers(lean, r) for lean in rungs)]


def brute_min_peak(job_: Job, space: Space) -> tuple[float, Layout | None, int]:
    """(least peak, its layout, exact budgets asked) over every base of the lean space."""
    last = space.recompute[-1]
    kinds = tuple(k for k in space.recompute if k == last or (k == "none" and space.offload))
    lean = replace(space, recompute=kinds, mbs=Bound(space.mbs.lo, space.mbs.lo))
    best: tuple[float, Layout | None] = (float("inf"), None)
    asked = 0
    for s in space_mod.each_structure(job_, lean, Counter()):
        for mbs, vpp, split in space_mod.options(job_, lean, s):
            for base in space_mod.bases(job_, s, mbs, vpp, split, lean):
                rungs = leanest(base.single, base.ladders) or list(base.single)
                for zero in space_mod.zero_stages(job_, space, base.layout):
                    zbase = base.layout.with_(zero_stage=zero)
                    budget = host_memory.activation_budget(job_, zbase)
                    asked += 1
                    if budget < 0:  # the offloaded optimizer and the staging alone are over
                        continue
                    kept = _uncovered(rungs)
                    held = [h for r in kept if (h := _held(job_, zbase, r, budget))]
                    if len(held) != len(kept):
                        held = _uncovered(
                            [h for r in rungs if (h := _held(job_, zbase, r, budget))]
                        )
                    for rung in held:
                        lay = rung.on(zbase)
                        peak = memory.estimate(job_, lay, space.headroom_pct, all_stages=False).peak
                        if peak < best[0]:
                            best = (peak, lay)
    return best[0], best[1], asked


CASES = [
    # MoE: DeepSeek-V3 on 8 H100 (nothing fits: its states alone are over), Mixtral 8x22B on 4
    job("deepseek-v3", "h100-sxm-80gb", 8, 4096, 64),
    job("mixtral-8x22b", "h100-sxm-80gb", 4, 8192, 128),
    # dense with offloading searched: Llama 3.1 8B at 131,072 tokens on 8 H100
    job("llama3.1-8b", "h100-sxm-80gb", 8, 131072, 8),
]


@pytest.mark.parametrize("j", CASES, ids=lambda j: j.arch.name)
def test_min_peak_is_the_brute_force_with_fewer_exact_budgets(
    j: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = Space()
    peak, lay, asked = brute_min_peak(j, space)
    exact = host_memory.activation_budget
    calls: list[str] = []

    def counted(job_: Job, layout: Layout, rounding: str = "exact") -> float:
        calls.append(rounding)
        return exact(job_, layout, rounding)  # type: ignore[arg-type]

    monkeypatch.setattr(host_memory, "activation_budget", counted)
    got, got_lay = min_peak(j, space)
    assert got == peak
    assert got_lay == lay
    # the brute force asks the exact budget on every base; min_peak on at most a tenth of them
    assert asked > 0
    assert calls.count("exact") <= asked // 10
