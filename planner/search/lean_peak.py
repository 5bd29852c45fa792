"""The leanest layout of a search space: the least peak GPU memory any of its layouts reaches
(`min_peak`), which `planner suggest` sizes when nothing fits (`planner.search.suggest`: the
binding constraint it names, and the first GPU memory, GPU count or sequence length it tries)."""

from __future__ import annotations

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


def min_peak(job: Job, space: Space, enough: float = 0.0) -> tuple[float, Layout | None]:
    """The smallest peak memory any layout of the space reaches, and that layout: every structure
    at its leanest, each ZeRO stage the space searches on it (`space.zero_stages`; the most
    sharding is not always the least memory: at dp 1 ZeRO 3's Megatron-FSDP buffers sit over
    ZeRO 1's), the leanest memory savers of `_lean_kinds` (`rungs.leanest`), the smallest
    micro-batch, no interleaving. The first at or below `enough` is returned as soon as found
    (whether any fits is all some callers ask)."""
    lean = replace(
        space,
        recompute=_lean_kinds(space),
        mbs=Bound(space.mbs.lo, space.mbs.lo),
        vpp=Bound(1, 1),
    )
    best: tuple[float, Layout | None] = (float("inf"), None)
    for s in space_mod.each_structure(job, lean, Counter()):
        for mbs, vpp, split in space_mod.options(job, lean, s):
            for base in space_mod.bases(job, s, mbs, vpp, split, lean):
                rungs = leanest(base.single, base.ladders) or list(base.single)
                for zero in space_mod.zero_stages(space, base.layout):
                    zbase = base.layout.with_(zero_stage=zero)
                    peaks = _Peaks(job, zbase, space.headroom_pct)
                    if not peaks.below(rungs, best[0]):
                        continue  # no rung the host's budget holds is leaner
                    for rung in _held(job, zbase, rungs):
                        lay, peak = rung.on(zbase), peaks.of(rung)
                        if peak < best[0]:
                            best = (peak, lay)
                            if peak <= enough:
                                return best
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


def _held(job: Job, zbase: Layout, rungs: list[Rung]) -> list[Rung]:
    """Of the rungs, as the host's budget holds them (`_host_held`), those no other covers
    (`_uncovered`); the covered are held only where a rung covering them is over the budget."""
    budget = Budget(job, zbase)
    kept = _uncovered(rungs)
    held = [h for r in kept if (h := _host_held(job, zbase, r, budget)) is not None]
    if len(held) == len(kept):
        return held
    return _uncovered([h for r in rungs if (h := _host_held(job, zbase, r, budget)) is not None])


def _host_held(job: Job, zbase: Layout, rung: Rung, budget: Budget) -> Rung | None:
    """The rung as the search takes it under the host's budget for offloaded activations
    (`host_memory.activation_budget`, as `variants` holds each rung to it): one that offloads
    nothing as it is (where the offloaded optimizer alone is over the budget, `_host_bound` says
    so); fine-grained offloading only where its bytes fit; CPU offloading of whole layers at the
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
