"""The brute-force reference the search's tests compare with (tests/search/test_top_k.py and
test_search_assumptions.py, test_bound.py, test_search_memo.py, test_scaling_memo.py).

It enumerates the whole space itself (tests/search/brute_force_space.py: every degree tuple whose
product is the GPU count, every micro-batch size, every vpp, the pipeline splits, every ZeRO stage
and recompute policy), filters by `planner.search.rules` plus the scale-up-domain and user rules,
scores every memory-feasible layout with `planner.model.cost` and ranks with `search.rank_key`
(`reference_top`). It shares none of the search's pruning (no bound, no structure order, no early
stop, no skipped variants): only `space_mod.splits` (which defines the split candidates of a (pp,
vpp)), the dominance definitions (DESIGN.md section 4, the search's docstring: less sharding and
recompute; a layout's twin with the EP all-to-all overlap, `_overlap_twin_dominates`) and the rank
key. `PROBLEMS` are the small problems it is run on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from typing import Any

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import cost, host_memory, memory
from planner.search import rules, rungs
from planner.search import space as space_mod
from planner.search import top_k as search
from planner.search.space import Base, Bound, Space, Structure
from planner.search.top_k import Candidate
from tests.search.brute_force_space import Variants, all_variants

TOP_K = 5


def make_job(
    model: str,
    gpu: str,
    num_gpus: int,
    seq: int,
    gbs: int,
    precision: str = "bf16",
    **cluster: Any,
) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": num_gpus, **cluster},
        "training": {"seq_length": seq, "global_batch_size": gbs, "precision": precision},
    }
    return parse_plan(doc).job


# ----------------------------------------------------------------------------- the reference


def reference_top(
    job: Job, space: Space, k: int = TOP_K, variants: Variants | None = None
) -> list[Candidate]:
    """Score every fitting variant of every layout (those of `all_variants(job, space)`, or
    given) and keep, per base, the non-dominated ones: for each ZeRO stage its fastest fitting
    rung (the first in rung order among equals), unless a kept variant of no higher stage is as
    fast. The top k of those, without the layouts their EP-overlap twins dominate."""
    scored = []
    for options in (all_variants(job, space) if variants is None else variants).values():
        fitting: dict[int, list[tuple[float, int, Candidate]]] = {}
        # (stage, TP overlap) where the rung "none" fits, with the overlap or without it
        plain_fits: set[tuple[int, bool]] = set()
        for z, i, lay in options:
            if (z, lay.tp_comm_overlap) in plain_fits:
                # no rung is faster than none with the same TP overlap (test_search_assumptions)
                continue
            rep = memory.estimate(job, lay, space.headroom_pct)
            fits = rep.fits and host_memory.estimate(job, lay).fits
            if fits and _no_saver(lay):
                plain_fits.add((z, lay.tp_comm_overlap))
            if fits:
                c = Candidate(lay, rep, cost.estimate(job, lay))
                fitting.setdefault(z, []).append((c.step_time, i, c))
        kept: list[Candidate] = []
        for z in sorted(fitting):
            best = min(fitting[z], key=lambda f: (f[0], f[1]))[2]
            if not any(c.layout.zero_stage <= z and c.step_time <= best.step_time for c in kept):
                kept.append(best)
        scored += kept
    scored = [c for c in scored if not _overlap_twin_dominates(job, space, c)]
    scored.sort(key=search.rank_key)
    return scored[:k]


def _no_saver(lay: Layout) -> bool:
    """The rung "none" (`rungs.NONE`, with the base's TP overlap or without it)."""
    return (
        lay.recompute == "none" and lay.cpu_offloading_num_layers == 0 and not lay.offload_modules
    )


def _overlap_twin_dominates(job: Job, space: Space, c: Candidate) -> bool:
    """A layout without the EP all-to-all overlap is dominated by its twin with it where Megatron
    accepts that twin and it fits in no more memory at no more step time."""
    lay = c.layout
    if lay.ep_comm_overlap or not space.ep_comm_overlap:
        return False
    twin = lay.with_(ep_comm_overlap=True)
    if rules.violations(job, twin):
        return False
    rep = memory.estimate(job, twin, space.headroom_pct)
    faster = cost.estimate(job, twin).step_time_s <= c.step_time
    fits = rep.fits and host_memory.estimate(job, twin).fits
    return fits and rep.peak <= c.memory.peak and faster


# ----------------------------------------------------------------------------- the problems


PROBLEMS: dict[str, tuple[Job, Space]] = {
    "llama8b-8xh100-s8192": (make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128), Space()),
    "llama8b-16xh100-s4096": (
        # two nodes; micro-batches of at most 4 (a user's upper bound)
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 4096, 64),
        Space(mbs=Bound(1, 4)),
    ),
    "sc21-1.7b-32xa100": (
        # SC21 Table 1's 1.7B row (32 A100, batch 512), 24 layers: vpp 3, 6, 12 and uneven
        # splits; micro-batches of 8 to 16 only (a user's lower bound), ZeRO 3 at the top
        make_job("gpt-sc21-1.7b", "a100-sxm-80gb", 32, 2048, 512),
        Space(mbs=Bound(8, 16)),
    ),
    "mixtral-8x7b-16xh100": (
        # MoE with CP: ep, expert-TP and cp together; micro-batches of 1 and 2 (the top's)
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
        Space(cp=Bound(1, 2), mbs=Bound(1, 2)),
    ),
    "llama8b-pinned": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 8192, 64),
        Space(
            tp=Bound(2, 2),
            pp=Bound(1, 2),
            zero_stages=(1,),
            recompute=("none", "full"),
        ),
    ),
    "llama8b-fp8": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 32, precision="fp8"),
        Space(),
    ),
    "llama8b-tiny-memory": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, memory_gib=24),
        Space(zero_stages=(0, 1)),
    ),
    "llama8b-micro-batch-groups": (
        # global batch 6 on tp 2: pp 4 dp 1 runs m = 6 micro-batches, pp 2 dp 2 runs 3, neither
        # a multiple of pp: interleaving needs a micro-batch group other than pp (6 and 3)
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 6),
        Space(tp=Bound(2, 2), cp=Bound(1, 1), mbs=Bound(1, 2), vpp=Bound(1, 4)),
    ),
    "llama70b-uneven": (
        # no interleaving: the CP-SAT split (41, 39) beats the even one
        make_job("llama3.1-70b", "h100-sxm-80gb", 32, 4096, 64),
        Space(tp=Bound(8, 8), pp=Bound(2, 4), vpp=Bound(1, 1), cp=Bound(1, 1)),
    ),
    "qwen7b-small-memory": (
        # 28 layers: pp 8 has no even split; 20 GiB forces pipelines, CP and sharding
        make_job("qwen2.5-7b", "h100-sxm-80gb", 16, 8192, 64, memory_gib=20),
        Space(tp=Bound(1, 2), vpp=Bound(1, 2)),
    ),
    "mixtral-expert-tp": (
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
        Space(cp=Bound(1, 1), ep=Bound(1, 4), expert_tp=("tp",), recompute=("selective", "full")),
    ),
    "mixtral-ep-overlap": (
        # tp = cp = 1 on H100: where Megatron allows the EP all-to-all overlap
        make_job("mixtral-8x7b", "h100-sxm-80gb", 32, 4096, 128),
        Space(tp=Bound(1, 1), cp=Bound(1, 1)),
    ),
    "gpt-oss-ep-overlap-no-pipeline": (
        # pp 1, where the EP all-to-all overlap can cost more than it hides: a layout without it
        # is dominated only where its twin fits and is no slower (QA: the search kept both);
        # attention sinks, whose context parallelism runs the a2a exchange alone
        make_job("gpt-oss-20b", "h100-sxm-80gb", 8, 4096, 16),
        Space(pp=Bound(1, 1), mbs=Bound(1, 2), cp=Bound(1, 2)),
    ),
    "mixtral-forced-balance": (
        # random routing: the busiest rank's load falls with the micro-batch's tokens
        # (routing_load.step_load), so the bounds at the largest micro-batch must stay below
        replace(
            make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
            moe_router_force_load_balancing=True,
        ),
        Space(cp=Bound(1, 1), tp=Bound(1, 2), pp=Bound(1, 2), mbs=Bound(1, 4)),
    ),
    "llama8b-nvfp4-bf16-ends": (
        # NVFP4 with two bf16 layers at each end: the uneven splits trade the slower bf16
        # layers (bf16_layers) against the rest, and a rank holding one keeps 16-bit inputs
        replace(
            make_job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 32, "fp4", memory_gib=40),
            bf16_layers_at_start=2,
            bf16_layers_at_end=2,
        ),
        Space(cp=Bound(1, 1), vpp=Bound(1, 2), mbs=Bound(1, 2)),
    ),
    "llama8b-tight-selective": (
        # Megatron's selective module sets save memory with flash attention too (38 GiB: a
        # selective layout, mlp recomputed, makes the top K). This case timed PyTorch's per-op
        # policy until Megatron jobs were refused it (Megatron-LM has none,
        # planner.search.rules.selective_policy); torchtitan's brute force searches it
        # (tests/search/test_titan_variants.py)
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 32, memory_gib=38),
        Space(tp=Bound(1, 2), pp=Bound(1, 2), cp=Bound(1, 1), vpp=Bound(1, 1)),
    ),
    "mixtral-states-tight": (
        # 64 GiB: in many structures (little expert or pipeline parallelism) the weights and
        # optimizer state fit in no ZeRO stage, and the search never queues them
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64, memory_gib=64),
        Space(cp=Bound(1, 1), mbs=Bound(1, 2)),
    ),
    "llama8b-tp-across-nodes": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 8192, 32),
        Space(tp_across_nodes=True, tp=Bound(8, 16), uneven=False),
    ),
    "llama70b-mi300x-mesh": (
        # AMD's xGMI full mesh: TP 4 reaches 3 of a GPU's 7 links, TP 8 all of them
        # (planner.model.comms.mesh_link), against offloading and ZeRO-3 at TP 1
        make_job("llama3.1-70b", "mi300x-192gb", 16, 8192, 64),
        Space(cp=Bound(1, 1), mbs=Bound(1, 2), vpp=Bound(1, 2)),
    ),
    "llama70b-l40s-shared-link": (
        # PCIe-only GPUs: the top layouts offload most layers and wait on the one PCIe link
        # their TP, DP and host traffic share (planner.model.shared_link), a cost that grows
        # with the offloaded layers and the ZeRO stage, as the search's dominance rules assume
        make_job("llama3.1-70b", "l40s-48gb", 64, 4096, 512),
        Space(tp=Bound(2, 4), pp=Bound(1, 2), cp=Bound(1, 1), vpp=Bound(1, 1), mbs=Bound(1, 4)),
    ),
    "llama70b-l40s-host-bound": (
        # the same with 576 GiB of host memory a node of 8: 72 a GPU, 40 usable past the
        # process's 32 (planner.model.host_memory): the deepest offloads no longer fit the host
        make_job("llama3.1-70b", "l40s-48gb", 64, 4096, 512, host_memory_gib_per_node=576),
        Space(tp=Bound(2, 4), pp=Bound(1, 2), cp=Bound(1, 1), vpp=Bound(1, 1), mbs=Bound(1, 4)),
    ),
}


@cache
def variants_of(name: str) -> Variants:
    """all_variants of a problem, enumerated once for every test that walks it."""
    return all_variants(*PROBLEMS[name])


def layouts_of(name: str) -> list[Layout]:
    return list(variants_of(name))


@cache
def searched(name: str) -> search.SearchResult:
    """The search's top K of a problem (the function under test), run once for the tests that
    read it."""
    job, space = PROBLEMS[name]
    return search.search(job, space, top_k=TOP_K)


def sample_layouts(name: str, count: int) -> list[Layout]:
    """About `count` of a problem's layouts, evenly spaced in its enumeration."""
    lays = layouts_of(name)
    step = max(len(lays) // count, 1)
    return lays[::step]


def search_built_layouts(job: Job, space: Space, count: int) -> list[Layout]:
    """About `count` layouts as the suggest search builds them (`space.bases` of every
    structure's first and last options: dispatchers, TP and EP overlap), each with every rung
    (`rungs.every`), evenly spaced in that enumeration."""
    out: list[Layout] = []
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        for mbs, vpp, split in dict.fromkeys(opts[:1] + opts[-1:]):
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                out += [r.on(b.layout) for r in rungs.every(job, b.layout, space.recompute, True)]
    return out[:: max(len(out) // count, 1)]


def top_shapes(job: Job, space: Space) -> Iterator[tuple[Structure, list[list[Base]]]]:
    """Each structure with options and its shapes' bases (`space.bases`, one list per (vpp,
    split) in the options' order) at its largest micro-batch size: what the search bounds and
    asks the states of."""
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        if not opts:
            continue
        top = max(o[0] for o in opts)
        shapes = dict.fromkeys(o[1:] for o in opts)
        yield s, [space_mod.bases(job, s, top, vpp, split, space) for vpp, split in shapes]


MEMO_JOBS = {
    "deepseek-v3-256xh800": ("deepseek-v3", "h800-sxm-80gb", 256, 4096, 1024),
    "mixtral-64xh100": ("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 512),
}
"""The memo tests' problems (tests/model/test_*_memo*.py): an MoE model with MTP layers and MLA,
and one without either."""


@cache
def memo_problem(name: str) -> tuple[Job, list[Layout]]:
    """A `MEMO_JOBS` job and about 600 of its layouts as the suggest search builds them
    (`search_built_layouts`)."""
    job = make_job(*MEMO_JOBS[name])
    return job, search_built_layouts(job, space_mod.Space(), 600)


def answer_rows(res: search.SearchResult) -> list[tuple[object, ...]]:
    """What a search answers, to compare two searches by: each row's layout, step time, peak
    memory and its twins (layout and step time)."""
    return [
        (
            r.candidate.layout,
            r.candidate.step_time,
            r.candidate.memory.peak,
            tuple((e.layout, e.step_time) for e in r.equivalents),
        )
        for r in res.rows
    ]
