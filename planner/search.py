"""The layout search behind `planner suggest`: bound, score exactly, certify.

The space (DESIGN.md section 4, issue "suggest"): tp, cp, pp, dp, ep (and expert-tp), vpp,
micro-batch size (and so the number of micro-batches), pipeline split, ZeRO stage, recompute.

1. Structures. Every (tp, cp, pp, dp, ep, etp) whose product is the GPU count and that passes
   Megatron's rules on those degrees and the user's pins and bounds (`Space`) is a structure.
   Each rule that removes some is counted.
2. Bound. For each structure a lower bound on the step time of every layout in it: the step's
   compute at the largest micro-batch (GEMM efficiency only grows with the micro-batch), without
   recompute, plus the expert all-to-all, which no schedule hides (`planner.cost`).
3. Score. Structures are expanded in order of their bound: every (micro-batch size, vpp, pipeline
   split), each with its cheapest memory-feasible (ZeRO stage, recompute) variants scored by the
   exact model (`planner.memory`, `planner.cost`). A variant (z, r) is only scored when no variant
   with less sharding and less recompute fits, since those are never slower (ZeRO 1 over 0: same
   traffic, sharded optimizer step; tests/test_search.py checks it).
4. Certify. Once the K-th best exact time is no worse than the next structure's bound, no layout
   left can enter the top K: the result is the exact top K of the model (the brute-force test
   enumerates every layout to prove it).

Pipeline splits: the even split where pp divides the layers, and the CP-SAT split of
`planner.solver` that balances the first rank's embedding and the last rank's output layer against
whole layers (Megatron's first/last uneven form).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache

from planner import cost, memory, params, rules, solver
from planner.arch import ModelArch
from planner.cost import Performance
from planner.layout import Layout, Recompute
from planner.memory import MemoryReport
from planner.spec import Job

RECOMPUTE_ORDER: tuple[Recompute, ...] = ("none", "selective", "full")
MAX_MICRO_BATCH = 16
"""Largest micro-batch searched unless the user bounds it (larger ones only add memory)."""
MAX_CP = 16


@dataclass(frozen=True)
class Bound:
    """An inclusive range for one degree; pin with lo == hi."""

    lo: int = 1
    hi: int = 1 << 30

    def admits(self, value: int) -> bool:
        return self.lo <= value <= self.hi


@dataclass(frozen=True)
class Space:
    """What the user pins, bounds, allows or forbids."""

    tp: Bound = Bound()
    pp: Bound = Bound()
    cp: Bound = Bound(1, MAX_CP)
    ep: Bound = Bound()
    dp: Bound = Bound()
    vpp: Bound = Bound()
    mbs: Bound = Bound(1, MAX_MICRO_BATCH)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[Recompute, ...] = RECOMPUTE_ORDER
    tp_across_nodes: bool = False
    """Allow TP groups larger than the scale-up (NVLink) domain."""
    uneven: bool = True
    """Consider uneven pipeline splits (Megatron's first/last stage layer counts)."""
    expert_tp: tuple[str, ...] = ("1", "tp")
    """Expert-TP choices: 1 and/or equal to tp (Megatron's default)."""
    tp_comm_overlap: bool = True
    """Use --tp-comm-overlap wherever sequence parallelism allows it."""
    ep_comm_overlap: bool = True
    """Also try Megatron's EP all-to-all overlap wherever it is allowed."""
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    memory: MemoryReport
    performance: Performance

    @property
    def step_time(self) -> float:
        return self.performance.step_time_s


def simplicity(lay: Layout) -> tuple[int, ...]:
    """Tie-break between equally fast layouts: fewer context-parallel, expert-parallel, pipeline
    and tensor ranks, no interleaving, less sharding and recompute, then larger micro-batches."""
    return (
        lay.cp,
        lay.ep,
        lay.pp,
        lay.tp,
        lay.vpp,
        lay.zero_stage,
        RECOMPUTE_ORDER.index(lay.recompute),
        -lay.micro_batch_size,
        int(lay.pipeline_layers is not None),
    )


def rank_key(c: Candidate) -> tuple[float, tuple[int, ...]]:
    """Step time first; `simplicity` breaks exact ties."""
    return (c.step_time, simplicity(c.layout))


@dataclass
class SearchResult:
    candidates: list[Candidate]
    space_size: int
    """Layouts in the space (every structure x micro-batch x vpp x split x zero x recompute)."""
    scored: int
    """Layouts scored by the exact model."""
    structures: int
    expanded: int
    """Structures expanded before the bound certified the top K."""
    rejected: Counter[str] = field(default_factory=Counter)
    """Removed: structures by the first rule they break (rule ids of planner.rules), layouts by
    memory."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Structure:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _sp(tp: int) -> bool:
    return tp > 1


def structures(job: Job, space: Space, rejected: Counter[str]) -> list[Structure]:
    """Every (tp, cp, pp, dp, ep, etp) that multiplies to the GPU count and passes the rules that
    concern only the degrees. Rejections are counted per rule (one per structure)."""
    n = job.cluster.num_gpus
    domain = job.cluster.tiers[0].span_gpus or n
    out = []
    for tp in divisors(n):
        if not space.tp.admits(tp):
            rejected["user bound on tp"] += 1
            continue
        if tp > domain and not space.tp_across_nodes:
            rejected["tp beyond the scale-up domain"] += 1
            continue
        for cp in divisors(n // tp):
            for pp in divisors(n // (tp * cp)):
                dp = n // (tp * cp * pp)
                for ep, etp in _expert_options(job, space, tp, pp):
                    s = Structure(tp, cp, pp, dp, ep, etp)
                    why = _structure_rule(job, space, s)
                    if why:
                        rejected[why] += 1
                    else:
                        out.append(s)
    return out


def _expert_options(job: Job, space: Space, tp: int, pp: int) -> Iterator[tuple[int, int]]:
    if not job.arch.is_moe:
        yield 1, tp
        return
    etps = sorted({1 if e == "1" else tp for e in space.expert_tp})
    for ep in divisors(job.arch.num_moe_experts or 1):
        for etp in etps:
            yield ep, etp


def _structure_rule(job: Job, space: Space, s: Structure) -> str | None:
    """The first rule a structure breaks, or None (user bounds first, then Megatron's rules)."""
    for name in ("cp", "pp", "ep", "dp"):
        if not getattr(space, name).admits(getattr(s, name)):
            return f"user bound on {name}"
    if s.pp > job.arch.num_layers:
        return "pp exceeds num_layers"
    lay = Layout(
        tp=s.tp, pp=s.pp, dp=s.dp, cp=s.cp, ep=s.ep, etp=s.etp, sequence_parallel=_sp(s.tp)
    )
    for rule in rules.STRUCTURAL_RULES:
        v = rule(job, lay)
        if v is not None:
            return v.rule
    return None


@cache
def _last_stage_extra(arch: ModelArch) -> float:
    """The output layer (and MTP) in units of one decoder layer's active parameters: the work the
    last pipeline rank does besides its layers (the loss itself is memory-bound and small). Each
    MTP layer runs one more decoder layer (its active parameters: top-k of the routed experts) and
    one more output layer (`layer_time.output_layer_time`)."""
    routed = arch.moe_router_topk / max(arch.num_moe_experts or 1, 1)
    d, e = memory._layer_kinds(arch)[1 if arch.is_moe else 0]
    per_layer = (d + routed * e) or 1
    mtp_dense, mtp_expert = params.mtp_layer_params(arch)
    heads = 1 + arch.mtp_num_layers
    out_params = heads * arch.padded_vocab() * arch.hidden_size + mtp_dense + routed * mtp_expert
    return round(out_params / per_layer, 3)


def _splits(job: Job, space: Space, pp: int, vpp: int) -> list[tuple[int, ...] | None]:
    """Pipeline splits to consider: even (None) when it exists, and the CP-SAT balanced one."""
    L = job.arch.num_layers
    out: list[tuple[int, ...] | None] = []
    if L % (pp * vpp) == 0:
        out.append(None)
    if space.uneven and pp > 1:
        split = solver.balanced_split(L, pp, vpp, 0.0, _last_stage_extra(job.arch))
        if split is not None and len(set(split)) > 1:
            out.append(split)
    return out


@cache
def _vpp_candidates(num_layers: int, pp: int, uneven: bool) -> tuple[int, ...]:
    """Interleaving degrees with some split: vpp | L / pp (even) or vpp | L, pp x vpp <= L
    (uneven; `_splits` decides)."""
    if pp == 1:
        return (1,)
    even = set(divisors(num_layers // pp)) if num_layers % pp == 0 else set()
    # an uneven split needs every rank's layers to be a multiple of vpp: vpp divides the layers
    odd = {v for v in divisors(num_layers) if v * pp <= num_layers} if uneven else set()
    return tuple(sorted(even | odd))


Option = tuple[int, int, tuple[int, ...] | None]
"""(micro-batch size, vpp, pipeline split) of one structure."""


def _options(job: Job, space: Space, s: Structure) -> list[Option]:
    """(micro_batch_size, vpp, split) choices of a structure that pass the schedule rules."""
    out = []
    per_dp = job.global_batch_size // s.dp
    for mbs in divisors(per_dp):
        if not space.mbs.admits(mbs):
            continue
        m = per_dp // mbs
        for vpp in _vpp_candidates(job.arch.num_layers, s.pp, space.uneven):
            if not space.vpp.admits(vpp):
                continue
            if vpp > 1 and (m % s.pp or m < s.pp):
                continue
            for split in _splits(job, space, s.pp, vpp):
                out.append((mbs, vpp, split))
    return out


def _variants(space: Space) -> list[tuple[int, Recompute]]:
    """(zero, recompute) pairs in the order they are tried; zero 0 only when 1 is not allowed
    (ZeRO 1 moves the same bytes and shards the optimizer step: never slower, never bigger)."""
    zeros = sorted(space.zero_stages)
    if 1 in zeros and 0 in zeros:
        zeros.remove(0)
    recs = [r for r in RECOMPUTE_ORDER if r in space.recompute]
    return [(z, r) for z in zeros for r in recs]


Base = tuple[Layout, tuple[Recompute, ...]]
"""A base layout and the recompute policies to try on it."""


def _bases(
    job: Job, s: Structure, mbs: int, vpp: int, split: tuple[int, ...] | None, space: Space
) -> list[Base]:
    """The base layouts of one shape: TP overlap where sequence parallelism allows it, and where
    Megatron allows the EP all-to-all overlap (`rules._expert_overlap`) a second one with it too,
    without full recompute (Megatron refuses the pair). With pipelines the overlap holds no more
    activations (only pp = 1 merges a micro-batch's forward with the previous backward) and only
    hides time, so there the plain base is tried with full recompute only."""
    sp = _sp(s.tp)
    plain = Layout(
        tp=s.tp,
        pp=s.pp,
        dp=s.dp,
        cp=s.cp,
        ep=s.ep,
        etp=s.etp,
        vpp=vpp,
        sequence_parallel=sp,
        micro_batch_size=mbs,
        pipeline_layers=split,
        tp_comm_overlap=sp and space.tp_comm_overlap,
    )
    if not _ep_overlap_allowed(job, s, vpp, space):
        return [(plain, space.recompute)]
    overlap = plain.with_(ep_comm_overlap=True)
    partial = tuple(r for r in space.recompute if r != "full")
    plain_recs = space.recompute if s.pp == 1 else ("full",)
    return [(plain, plain_recs), (overlap, partial)]


def _ep_overlap_allowed(job: Job, s: Structure, vpp: int, space: Space) -> bool:
    """Whether a shape gets the EP-overlap base (Megatron's conditions bar full recompute, which
    `_best_variants` skips for it)."""
    ep_ok = s.ep > 1 and (s.pp == 1 or vpp > 1) and job.arch.mtp_num_layers <= 1
    connections = s.tp == s.cp == 1 or not job.cluster.gpu.needs_one_device_connection
    return space.ep_comm_overlap and ep_ok and connections


def _space_size(job: Job, space: Space, s: Structure, opts: list[Option]) -> int:
    """Layouts the options of one structure stand for: each base times its (zero, recompute)
    variants (no full recompute with the EP overlap)."""
    variants = _variants(space)
    plain = len(variants) or 1
    overlap = sum(1 for _, rc in variants if rc != "full")
    return sum(
        plain + (overlap if _ep_overlap_allowed(job, s, vpp, space) else 0) for _, vpp, _ in opts
    )


def lower_bound(job: Job, layout: Layout) -> float:
    """Seconds no layout of this structure, split and vpp can beat: compute without recompute at
    the given (largest) micro-batch plus the exposed expert all-to-all."""
    return cost.compute_floor(job, layout.with_(recompute="none"))


def _best_variants(
    job: Job,
    space: Space,
    base: Layout,
    recomputes: tuple[Recompute, ...],
    rejected: Counter[str],
    too_big: dict[tuple[object, ...], bool],
) -> list[tuple[Layout, MemoryReport]]:
    """The memory-feasible (zero, recompute in `recomputes`) variants of a base layout not
    dominated by a feasible variant with no more sharding and no more recompute. A ZeRO stage
    whose weights, gradients, optimizer state and buffers alone (`memory.state_floor`) exceed the
    capacity is rejected without estimating its recompute variants; `too_big` remembers that
    verdict per (vpp, split, ZeRO stage) of one structure, since it holds at every micro-batch
    size."""
    found: list[tuple[int, int, Layout, MemoryReport]] = []
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    # with flash attention Megatron's selective recompute (the core attention) keeps exactly
    # what no recompute keeps (planner.activations): same memory, more time, never chosen
    # (PyTorch's per-op policy does save memory)
    skip_selective = (
        job.flash_attention and job.selective_recompute == "core_attn" and "none" in space.recompute
    )
    for z, rc in _variants(space):
        if rc not in recomputes or (rc == "selective" and skip_selective):
            continue
        zi, ri = z, RECOMPUTE_ORDER.index(rc)
        if any(fz <= zi and fr <= ri for fz, fr, _, _ in found):
            continue
        lay = base.with_(zero_stage=z, recompute=rc)
        key = (base.vpp, base.pipeline_layers, z)
        if key not in too_big:
            too_big[key] = memory.state_floor(job, lay) > capacity
        if too_big[key]:
            rejected["memory"] += 1
            continue
        rep = memory.estimate(job, lay, space.headroom_pct, all_stages=False)
        if rep.fits:
            found.append((zi, ri, lay, rep))
        else:
            rejected["memory"] += 1
    return [(lay, rep) for _, _, lay, rep in found]


def search(
    job: Job,
    space: Space | None = None,
    top_k: int = 5,
    progress: Callable[[str], None] | None = None,
) -> SearchResult:
    """The top_k layouts by predicted step time (ties: `simplicity`), certified exact."""
    space = space or Space()
    t0 = time.perf_counter()
    rejected: Counter[str] = Counter()
    structs = structures(job, space, rejected)
    # bound each structure at its largest micro-batch, for each (vpp, split)
    queue: list[tuple[float, int, Structure, list[Option]]] = []
    space_size = 0
    for i, s in enumerate(structs):
        opts = _options(job, space, s)
        if not opts:
            rejected["no micro-batch / vpp satisfies the schedule"] += 1
            continue
        space_size += _space_size(job, space, s, opts)
        top_mbs = max(o[0] for o in opts)
        shapes = {(vpp, split) for _, vpp, split in opts}
        bound = min(
            lower_bound(job, lay)
            for vpp, split in shapes
            for lay, _ in _bases(job, s, top_mbs, vpp, split, space)
        )
        queue.append((bound, i, s, opts))
    heapq.heapify(queue)

    best: list[Candidate] = []
    scored = expanded = 0
    last_report = t0
    while queue:
        bound, _, s, opts = heapq.heappop(queue)
        if len(best) >= top_k and bound > best[top_k - 1].step_time:
            break
        expanded += 1
        too_big: dict[tuple[object, ...], bool] = {}
        for mbs, vpp, split in opts:
            for base, recomputes in _bases(job, s, mbs, vpp, split, space):
                for lay, rep in _best_variants(job, space, base, recomputes, rejected, too_big):
                    perf = cost.estimate(job, lay)
                    scored += 1
                    best.append(Candidate(lay, rep, perf))
        best.sort(key=rank_key)
        del best[max(top_k, 1) * 4 :]
        now = time.perf_counter()
        if progress and now - last_report > 0.5:
            progress(f"searched {expanded}/{len(structs)} structures, scored {scored} layouts")
            last_report = now
    top = [
        replace(c, memory=memory.estimate(job, c.layout, space.headroom_pct)) for c in best[:top_k]
    ]
    return SearchResult(
        candidates=top[:top_k],
        space_size=space_size,
        scored=scored,
        structures=len(structs),
        expanded=expanded,
        rejected=rejected,
        seconds=time.perf_counter() - t0,
    )
