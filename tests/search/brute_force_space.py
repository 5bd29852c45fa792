"""The brute force's enumeration of the whole space (tests/search/brute_force.py ranks it):
every degree tuple whose product is the GPU count, every micro-batch size, every vpp, the
pipeline splits, every ZeRO stage and recompute policy, filtered by `planner.search.rules` plus
the scale-up-domain and user rules. It shares none of the search's pruning: only
`space_mod.splits` (which defines the split candidates of a (pp, vpp)) and Megatron's rule for an
interleaved layout's micro-batch group (`smallest_group`)."""

from __future__ import annotations

import itertools

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search import rules, rungs
from planner.search import space as space_mod
from planner.search.rules.context import exchange_for
from planner.search.space import Space
from planner.search.splits import split_fields


def _factorizations(n: int) -> list[tuple[int, int, int, int]]:
    """Every (tp, cp, pp, dp) of positive integers whose product is n."""
    out = []
    for tp in range(1, n + 1):
        if n % tp:
            continue
        for cp in range(1, n // tp + 1):
            if (n // tp) % cp:
                continue
            for pp in range(1, n // (tp * cp) + 1):
                if (n // (tp * cp)) % pp:
                    continue
                out.append((tp, cp, pp, n // (tp * cp * pp)))
    return out


def _user_ok(space: Space, lay: Layout, domain: int) -> bool:
    if lay.tp > domain and not space.tp_across_nodes:
        return False
    degrees = {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "ep": lay.ep, "dp": lay.dp}
    degrees |= {"vpp": lay.vpp, "mbs": lay.micro_batch_size}
    return all(getattr(space, k).admits(v) for k, v in degrees.items())


def smallest_group(pp: int, vpp: int, m: int) -> int | None:
    """The micro-batch group of an interleaved layout, by Megatron's rule at schedules.py:
    1160-1180 (d98e8a64: ValueError unless pp <= g <= m, RuntimeError if 0 < m mod g < pp),
    the smallest g it takes (the least warm-up: 2 (pp - r - 1) + (vpp - 1) g forwards,
    schedules.py:960-965); None where that is Megatron's default, pp
    (model_parallel_config.py:567-568), or vpp is 1. Where no g runs (m < pp), pp, which the
    rules then refuse."""
    if vpp == 1:
        return None
    runs = [g for g in range(pp, m + 1) if m % g == 0 or m % g >= pp]
    return None if not runs or runs[0] == pp else runs[0]


def all_layouts(job: Job, space: Space) -> list[Layout]:
    """Every base layout of the space that Megatron's rules and the user's rules accept (before
    ZeRO and the memory-saving rungs, which `all_variants` expands)."""
    n, arch = job.cluster.num_gpus, job.arch
    L, gbs = arch.num_layers, job.global_batch_size
    domain = job.cluster.tiers[0].span_gpus or n
    out = []
    for tp, cp, pp, dp in _factorizations(n):
        if gbs % dp:
            continue
        sp = tp > 1
        if arch.is_moe:
            experts = arch.num_moe_experts or 1
            eps = [e for e in range(1, experts + 1) if experts % e == 0]
            etps = sorted({1 if e == "1" else tp for e in space.expert_tp})
            dispatchers = list(space.dispatchers)
        else:
            eps, etps, dispatchers = [1], [tp], ["alltoall"]
        overlap_runs = rules.tp_overlap_runs(job)
        for ep, etp, mbs in itertools.product(eps, etps, range(1, space_mod.MAX_MICRO_BATCH + 1)):
            if (gbs // dp) % mbs:
                continue
            for vpp, dispatcher in itertools.product(range(1, L // pp + 1), dispatchers):
                for split in space_mod.splits(job, space, pp, vpp):
                    lay = Layout(
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        cp=cp,
                        ep=ep,
                        etp=etp,
                        vpp=vpp,
                        microbatch_group_size_per_vp_stage=smallest_group(
                            pp, vpp, gbs // (dp * mbs)
                        ),
                        sequence_parallel=sp,
                        micro_batch_size=mbs,
                        **split_fields(split),
                        # the overlap where it can run (TE's userbuffers: bf16 activations
                        # at the layer ends, no NVFP4: rules.precision), else without it
                        tp_comm_overlap=sp and space.tp_comm_overlap and overlap_runs,
                        moe_token_dispatcher_type=dispatcher,
                        moe_flex_dispatcher_backend=(
                            space_mod.flex_backend(job) if dispatcher == "flex" else "deepep"
                        ),
                        # the exchange Megatron runs (attention sinks: a2a only)
                        cp_comm_type=exchange_for(job, tp, cp),
                    )
                    if _user_ok(space, lay, domain) and not rules.violations(job, lay):
                        out.append(lay)
                    # Megatron's EP all-to-all overlap instead of the TP one, where it is allowed
                    ep_ov = lay.with_(ep_comm_overlap=True)
                    allowed = space.ep_comm_overlap and not rules.violations(job, ep_ov)
                    if _user_ok(space, ep_ov, domain) and allowed:
                        out.append(ep_ov)
    return out


Variant = tuple[int, int, Layout]
"""(ZeRO stage, the rung's place in `rungs.every`'s order, the layout)."""


def base_variants(job: Job, space: Space, base: Layout) -> list[Variant]:
    """Every (ZeRO stage, rung) variant of a base layout that Megatron's rules accept: every
    rung, each ladder whole. ZeRO 0 only where 1 is not allowed (ZeRO 1 is never slower, never
    bigger: test_search_assumptions.py); Megatron-FSDP (ZeRO 2 and 3) not with pp or cp > 1."""
    zeros = list(space.zero_stages)
    if 0 in zeros and 1 in zeros:
        zeros.remove(0)
    if base.pp > 1 or base.cp > 1:
        zeros = [z for z in zeros if z < 2]
    out = []
    for z in sorted(zeros):
        for i, rung in enumerate(rungs.every(job, base, space.recompute, space.offload)):
            lay = rung.on(base.with_(zero_stage=z))
            if not rules.violations(job, lay):
                out.append((z, i, lay))
    return out


Variants = dict[Layout, list[Variant]]
"""Each layout of `all_layouts` with its `_variants`."""


def all_variants(job: Job, space: Space) -> Variants:
    return {base: base_variants(job, space, base) for base in all_layouts(job, space)}
