"""The leanest layout of a search space: the least peak GPU memory any of its layouts reaches
(`min_peak`), which `planner suggest` sizes when nothing fits (`planner.search.suggest`: the
binding constraint it names, and the first GPU memory, GPU count or sequence length it tries)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from planner.inputs.layout import Layout, Recompute
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search import space as space_mod
from planner.search.rungs import Rung, covers, leanest
from planner.search.space import Bound, Space
from planner.search.variants import Budget


def _lean_kinds(space: Space) -> tuple[Recompute, ...]:
    """The recompute kinds whose rungs `min_peak` sizes: the space's last (leanest) one, and no
    recompute where the space offloads, as CPU offloading of whole layers is a ladder of the
    rungs without recompute (`rungs._rungs`) and can hold less than full recompute (Llama 3.1
    405B on 8 H100: tp 8 with 125 of its 126 layers offloaded fits 880 GiB GPUs; fully
    recomputed at tp 4 pp 2 it needed 862.0 GiB of 77.3 usable, which read as 889 GiB GPUs)."""
    last = space.recompute[-1]
    return tuple(k for k in space.recompute if k == last or (k == "none" and space.offload))


def min_peak(
    job: Job, space: Space, enough: float | None = None, fixed: bool = True
) -> tuple[float, Layout | None]:
    """The smallest peak memory any layout of the space reaches, and that layout: every structure
    at its leanest, each ZeRO stage the space searches on it (`space.zero_stages`; the most
    sharding is not always the least memory: at dp 1 ZeRO 3's Megatron-FSDP buffers sit over
    ZeRO 1's), the leanest memory savers of `_lean_kinds` (`rungs.leanest`), the smallest
    micro-batch, every vpp and split (interleaving offers splits vpp 1 does not: Llama 3.1 8B on
    8 H100, 10 sequences of 4096, tp at most 2 and cp 1: tp 2 pp 4 vpp 2 with 6, 10, 10 and 6
    layers a rank needs 21.2 GiB, vpp 1's leanest 21.6), held to the host's budget as the
    search holds them (`_held`: QA, a layout whose checkpoint staging alone is over it). The
    shapes without interleaving are walked first: few, they find a lean layout early, and an
    interleaved one is taken only where it is leaner (`_Peaks.below` passes most of them on
    their states alone). With `enough` (whether any layout fits is all some callers ask): the
    first at or below it, as soon as found, or (inf, None) where none is; a base none of whose
    rungs is at or below it is passed on its peaks alone, as it is under the least found.
    `fixed` False: the host's budget asked of offloaded activations alone, not whether the
    offloaded optimizer and the checkpoint staging fit it (what `suggest` names where the host
    refuses every layout that fits the GPUs)."""
    lean = replace(space, recompute=_lean_kinds(space), mbs=Bound(space.mbs.lo, space.mbs.lo))
    best: tuple[float, Layout | None] = (math.inf, None)
    # a rung is taken where it is under `limit`: the least so far, or (with `enough`) just above
    limit = math.inf if enough is None else math.nextafter(enough, math.inf)
    structures = space_mod.each_structure(job, lean, Counter())
    shapes = [(s, space_mod.options(job, lean, s)) for s in structures]
    for interleaved in (False, True):
        for s, opts in shapes:
            for mbs, vpp, split in opts:
                if (vpp > 1) != interleaved:
                    continue
                for base in space_mod.bases(job, s, mbs, vpp, split, lean):
                    rungs = leanest(base.single, base.ladders) or list(base.single)
                    for zero in space_mod.zero_stages(job, space, base.layout):
                        zbase = base.layout.with_(zero_stage=zero)
                        peaks = _Peaks(job, zbase, space.headroom_pct)
                        if not peaks.below(rungs, limit):
                            continue  # no rung the host's budget holds is leaner
                        for rung in _held(job, zbase, rungs, fixed):
                            peak = peaks.of(rung)
                            if peak < limit:
                                best = (peak, rung.on(zbase))
                                if enough is not None:
                                    return best
                                limit = peak
    return best


class _Peaks:
    """Peak GPU memory of a base's rungs at one ZeRO stage, each estimated once, and whether
    some rung `_held` gives may be under a peak already found (`below`), asked before the
    host's budget for offloaded bytes is (its walk of the pinned pieces took most of a MoE
    job's advice: DeepSeek-V3 on 8 H100, 14 `min_peak` calls)."""

    def __init__(self, job: Job, zbase: Layout, headroom_pct: float) -> None:
        self.job, self.zbase, self.headroom_pct = job, zbase, headroom_pct
        self.seen: dict[Rung, float] = {}

    def below(self, rungs: list[Rung], peak: float) -> bool:
        """Whether a rung `_held` gives of `rungs` may need less than `peak`: not where the
        base's states alone need as much (`memory.state_floor`, a floor under every rung's
        peak), nor where every rung does as it is, as `_held` gives a rung as it is, or with
        fewer layers offloaded whole, which keeps longer windows of layers on the GPU
        (`cpu_offload.peak_window`: the most of the windows of n - k layers grows as k falls)."""
        if not self.job.pools and memory.state_floor(self.job, self.zbase, peak) >= peak:
            return False
        return any(self.of(r) < peak for r in rungs)

    def of(self, rung: Rung) -> float:
        if rung not in self.seen:
            lay = rung.on(self.zbase)
            report = memory.estimate(self.job, lay, self.headroom_pct, all_stages=False)
            self.seen[rung] = report.peak
        return self.seen[rung]


def _uncovered(rungs: list[Rung]) -> list[Rung]:
    """The rungs no other of them covers (`rungs.covers`: offloading every module another
    offloads and more holds no more memory on any stage), which alone can be the leanest: of
    a MoE base's many fine-grained offloading rungs, those that offload the most."""
    return [r for r in rungs if not any(covers(lean, r) for lean in rungs)]


def _held(job: Job, zbase: Layout, rungs: list[Rung], fixed: bool = True) -> list[Rung]:
    """Of the rungs, as the host's budget holds them (`_host_held`), those no other covers
    (`_uncovered`); the covered are held only where a rung covering them is over the budget.
    None where the offloaded optimizer and the checkpoint staging alone are over the host's
    share (its budget below 0: `variants.best_variants` rejects the ZeRO stage), asked of the
    budget's cheap upper bound first (`activation_budget`'s "floor", no walk of the pinned
    pieces); `fixed` False: not asked (the leanest of what the host refuses, `min_peak`)."""
    if fixed and host_memory.activation_budget(job, zbase, "floor") < 0.0:
        return []
    budget = Budget(job, zbase)
    if fixed and budget.below(0.0):
        return []
    kept = _uncovered(rungs)
    held = [h for r in kept if (h := _host_held(job, zbase, r, budget)) is not None]
    if len(held) == len(kept):
        return held
    return _uncovered([h for r in rungs if (h := _host_held(job, zbase, r, budget)) is not None])


def _host_held(job: Job, zbase: Layout, rung: Rung, budget: Budget) -> Rung | None:
    """The rung as the search takes it under the host's budget for offloaded activations
    (`host_memory.activation_budget`, as `variants` holds each rung to it): one that offloads
    nothing as it is (`_held` asks whether the budget is below 0); fine-grained offloading only
    where its bytes fit; CPU offloading of whole layers at the
    most layers whose bytes fit (the GPU's memory falls and the host's grows with them; the
    search's ladder goes as far: Llama 3.1 8B at 524,288 tokens on 8 H100 offloads 31 layers in
    81.5 GiB but pins 279.2 GiB of a 224.0 GiB host share), None where none does."""
    if not rung.offload and not rung.offload_modules:
        return rung

    def fits(r: Rung) -> bool:
        return not budget.below(host_memory.activation_bytes(job, r.on(zbase)))

    if fits(rung):
        return rung
    if not rung.offload:
        return None
    lo, hi = 0, rung.offload  # fits(lo layers) (none: lo = 0 is a sentinel), not fits(hi)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(replace(rung, offload=mid)) else (lo, mid)
    return replace(rung, offload=lo) if lo else None
