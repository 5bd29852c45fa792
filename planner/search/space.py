"""The search space of `planner suggest`: what the user pins and bounds (`Space`), the parallel
structures that pass Megatron's rules on their degrees (`structures`), and each structure's
options (micro-batch size, vpp, pipeline split) and base layouts (`bases`: TP overlap, token
dispatcher, EP overlap) with the ZeRO stages and the memory-saving rungs (`planner.search.rungs`:
recompute, offloading) tried on them. `planner.search.top_k` bounds, scores and certifies over it.

Pipeline splits (`planner.search.splits`): the even split, Megatron's first/last uneven form
balanced by `planner.search.solver`, the embedding and loss counted as layers, and the layout
string's free form (up to vpp 6, or to the top of the user's vpp bound: `splits.free_form`).
The user's bounds themselves (`Space`, `Bound`) are `planner.search.space_bounds`'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from planner.inputs.layout import CpCommType, Dispatcher, FlexBackend, Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan_pipeline import v_stages
from planner.model.torch_schedules import refusal
from planner.search import rules
from planner.search.rules.context import exchange_for
from planner.search.rules.parallel import least_group
from planner.search.rules.torchtitan_shapes import stages_wanted
from planner.search.rungs import Ladder, Rung, overlap_rungs, rung_tuples
from planner.search.space_bounds import CP_BOUND, Space
from planner.search.space_bounds import MAX_CP as MAX_CP
from planner.search.space_bounds import MAX_MICRO_BATCH as MAX_MICRO_BATCH
from planner.search.space_bounds import RECOMPUTE_ORDER as RECOMPUTE_ORDER
from planner.search.space_bounds import UNBOUNDED as UNBOUNDED
from planner.search.space_bounds import Bound as Bound
from planner.search.splits import (
    Split,
    divisors,
    free_form,
    split_fields,
    splits,
    vpp_candidates,
)


@dataclass(frozen=True)
class Structure:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int
    cp_comm_type: CpCommType = "p2p"
    """The context-parallel exchange (`rules.context.exchange_for`: Megatron's p2p ring unless
    Transformer Engine refuses it for the model)."""

    def layout(self, **fields: Any) -> Layout:
        """The structure's layout with these fields (sequence parallel with TP; Layout's defaults
        for the rest: `_DEFAULTS` changed, cheaper than Layout's per-field frozen __init__)."""
        return _DEFAULTS.with_(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            cp=self.cp,
            ep=self.ep,
            etp=self.etp,
            sequence_parallel=_sp(self.tp),
            cp_comm_type=self.cp_comm_type,
            **fields,
        )


FSDP_UNSEARCHED = "ZeRO 2-3 (Megatron-FSDP) with pp or cp > 1: not searched"
"""The rejection of a structure with pipelines or context parallelism where the user allows only
ZeRO 2 and 3: the search leaves Megatron-FSDP out there (`zero_stages`), though `check` takes
such a plan, so the reason says so rather than counting it as memory."""

_DEFAULTS = Layout()
"""Layout's defaults (Layout has no __post_init__: a copy with fields changed is the layout
built with them)."""


def _sp(tp: int) -> bool:
    return tp > 1


def structures(job: Job, space: Space, rejected: Counter[str]) -> list[Structure]:
    """Every (tp, cp, pp, dp, ep, etp) that multiplies to the GPU count and passes the rules that
    concern only the degrees. Rejections are counted per rule (one per structure)."""
    return list(each_structure(job, space, rejected))


def each_structure(job: Job, space: Space, rejected: Counter[str]) -> Iterator[Structure]:
    """`structures`, one at a time (a caller that needs only the first stops there), counting
    the rejections up to the last one yielded."""
    n = job.cluster.num_gpus
    domain = job.cluster.domain_used or n  # the GPUs of each NVLink domain the job holds
    for tp in divisors(n):
        if not space.tp.admits(tp):
            rejected["user bound on tp"] += 1
            continue
        if tp > domain and not space.tp_across_nodes:
            rejected["tp beyond the scale-up domain"] += 1
            continue
        for cp in divisors(n // tp):
            exchange = exchange_for(job, tp, cp)
            for pp in divisors(n // (tp * cp)):
                dp = n // (tp * cp * pp)
                for ep, etp in _expert_options(job, space, tp, pp):
                    s = Structure(tp, cp, pp, dp, ep, etp, exchange)
                    why = _structure_rule(job, space, s)
                    if why:
                        rejected[why] += 1
                    else:
                        yield s


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
            return CP_BOUND if name == "cp" else f"user bound on {name}"
    if s.pp > job.arch.num_layers:
        return "pp exceeds num_layers"
    lay = s.layout()
    megatron = space.framework != "torchtitan"  # torchtitan's stage follows its degrees
    if megatron and space.zero_stages and not zero_stages(job, space, lay):
        return FSDP_UNSEARCHED
    for rule in rules.STRUCTURAL_RULES:
        v = rule(job, lay)
        if v is not None:
            return v.rule
    return None


Option = tuple[int, int, Split]
"""(micro-batch size, vpp, pipeline split) of one structure."""


def options(job: Job, space: Space, s: Structure) -> list[Option]:
    """(micro_batch_size, vpp, split) choices of a structure that pass the schedule rules."""
    out = []
    per_dp = job.global_batch_size // s.dp
    vpps = vpp_candidates(job.arch.num_layers, s.pp, space.uneven, free_form(space))
    vpps = tuple(v for v in vpps if space.vpp.admits(v))
    for mbs in divisors(per_dp):
        if not space.mbs.admits(mbs):
            continue
        m = per_dp // mbs
        for vpp in vpps:
            if not _takes(job, s.pp, vpp, m):
                continue
            for split in splits(job, space, s.pp, vpp):
                out.append((mbs, vpp, split))
    return out


def _takes(job: Job, pp: int, vpp: int, m: int) -> bool:
    """Whether the pipeline schedule runs m micro-batches at (pp, vpp): torchtitan's with the
    stages per rank it takes (`torchtitan_shapes.stages_wanted`) as
    `torch_schedules.refusal` says, Megatron's interleaved one wherever some micro-batch
    group runs m (`group_of`): with `[torchtitan]
    gradient_accumulation_steps` k > 1, pipelines whose k schedules split m evenly, each as
    refusal says (`rules.torchtitan_shapes._accumulation`)."""
    if job.framework == "torchtitan":
        k = job.titan.gradient_accumulation_steps
        if k > 1 and (pp == 1 or m % k):
            return False
        name = job.titan.schedule(vpp)
        if pp > 1 and stages_wanted(name, vpp) is not None:
            return False  # a pinned schedule's stages per rank (QA: vpp 4 under ZB-V ranked)
        return refusal(name, pp, m // k) is None
    return vpp == 1 or least_group(pp, m) is not None


def group_of(job: Job, pp: int, dp: int, vpp: int, mbs: int) -> int | None:
    """The micro-batch group a Megatron layout of the search runs: the smallest Megatron takes
    (`rules.parallel.least_group`, schedules.py:1160-1180 d98e8a64), None where that is its
    default pp (model_parallel_config.py:567-568) or nothing is grouped (vpp 1, torchtitan).
    Leanest ((vpp - 1) g warm-up chunks), not always fastest: a larger g or last group L (m mod
    g, or g) hides more wrap hops; L spaces the gradient syncs (tests/search/test_group_choice)."""
    if vpp == 1 or job.framework == "torchtitan":
        return None
    g = least_group(pp, job.global_batch_size // (dp * mbs))
    return None if g == pp else g


def zero_stages(job: Job, space: Space, base: Layout) -> list[int]:
    """The ZeRO stages tried on a base, in order: zero 0 only when 1 is not allowed (ZeRO 1 moves
    the same bytes and shards the optimizer step: never slower, never bigger); Megatron-FSDP
    (2, 3) not with pipeline or context parallelism, which Megatron-LM's own tests never run and
    NVIDIA's recipes avoid (Megatron-Bridge's Llama 3 70B FSDP recipe sets pp 1 where its
    docstring says pp 8: benchmarks/data/bridge_recipes.md, row L54). Megatron-LM itself allows
    it (d98e8a64 validate_args asserts nothing of the pair), and `check` takes such a plan with
    a warning; a structure the rule leaves empty is rejected as FSDP_UNSEARCHED. torchtitan's
    stage is its shard group's (`rules.torchtitan.sharding`: dp / dp_replicate x cp)."""
    zeros = sorted(space.zero_stages)
    if space.framework == "torchtitan":  # FSDP2 over a shard group of 2 or more, else replicated
        return [z for z in zeros if z == (3 if rules.shard_degree(job, base) > 1 else 0)]
    if 1 in zeros and 0 in zeros:
        zeros.remove(0)
    if base.pp > 1 or base.cp > 1:
        zeros = [z for z in zeros if z < 2]
    return zeros


@dataclass(frozen=True)
class Base:
    """A base layout and the rungs (`planner.search.rungs`) to try on it."""

    layout: Layout
    single: tuple[Rung, ...]
    ladders: tuple[Ladder, ...]
    twin_takes: frozenset[Rung] = frozenset()
    """Rungs the base's EP-overlap twin takes as well. It holds one MoE layer's activations more
    (the merged forward and backward's layer in flight, `planner.model.stage_activations`), so a
    variant of this base whose fastest fitting rung is one of them is dominated by its twin where
    the twin fits with that rung too and is no slower (`planner.search.variants.best_variants`
    asks the memory model, and the cost model where `twin_timed`)."""
    twin_timed: bool = False
    """Whether the twin's time must be asked: without pipelines the overlap can cost more than it
    hides; with them it only hides time (the twin is never slower)."""


def _base(
    layout: Layout,
    single: tuple[Rung, ...],
    ladders: tuple[Ladder, ...],
    takes: frozenset[Rung] = frozenset(),
    timed: bool = False,
) -> Base:
    """`Base(layout, single, ladders, takes, timed)` without the frozen dataclass's per-field
    __init__ (Base has no __post_init__: its fields set whole are the base built with them; the
    search makes some thirty thousand)."""
    values = (layout, single, ladders, takes, timed)
    new = object.__new__(Base)
    object.__setattr__(new, "__dict__", dict(zip(_BASE_FIELDS, values, strict=True)))
    return new


_BASE_FIELDS = ("layout", "single", "ladders", "twin_takes", "twin_timed")


def flex_backend(job: Job) -> FlexBackend:
    """The flex dispatcher's backend: HybridEP where the NVLink domain spans nodes (GB200 NVL72,
    its multi-node NVLink case), DeepEP elsewhere (Megatron-Bridge's apply_flex_dispatcher_backend
    picks by GPU alike); HybridEP wherever the job caps each rank's tokens
    (`moe_expert_rank_capacity_factor`, which only HybridEP takes: `rules.flex_settings`)."""
    if job.moe_expert_rank_capacity_factor is not None:
        return "hybridep"
    domain = job.cluster.tiers[0].span_gpus or job.cluster.num_gpus
    return "hybridep" if domain > job.cluster.gpus_per_node else "deepep"


def bases(job: Job, s: Structure, mbs: int, vpp: int, split: Split, space: Space) -> list[Base]:
    """The base layouts of one shape, each with the rungs tried on it: TP overlap where sequence
    parallelism allows it; per MoE token dispatcher (alltoall, and flex where experts are spread);
    and where Megatron allows the EP all-to-all overlap (`rules.expert_overlap`) a second base
    with it, taking the rungs Megatron allows with it. The plain base's variants whose fastest
    rung the overlap base takes too are dominated where the twin fits with the same rung and is
    no slower (`Base.twin_takes`; with pipelines the overlap only hides time, without them its
    time is asked, `Base.twin_timed`). A caller that asks for many shapes of one structure makes
    them with one `ShapeBases`."""
    return ShapeBases(job, space, s)(mbs, vpp, split)


class ShapeBases:
    """`bases` of the shapes of one structure: what they read of the structure alone (its token
    dispatchers, and each one's layout before the shape's fields) made once, each shape's
    fields then set on those layouts (the search asks for every shape of every structure;
    tests/search/test_search_setup_memo.py: every option of the brute-forced problems as
    `bases` afresh)."""

    def __init__(self, job: Job, space: Space, s: Structure) -> None:
        self.job, self.space, self.s = job, space, s
        titan = job.framework == "torchtitan"
        self.titan = titan
        self.offload = space.offload and not titan
        overlap = _sp(s.tp) and space.tp_comm_overlap and not titan and rules.tp_overlap_runs(job)
        self.plains = [
            s.layout(
                tp_comm_overlap=overlap,
                moe_token_dispatcher_type=dispatcher,
                # the backend names the flex dispatcher's; other layouts keep the field's default
                moe_flex_dispatcher_backend=(
                    flex_backend(job) if dispatcher == "flex" and not titan else "deepep"
                ),
            )
            for dispatcher in _dispatchers(job, s, space)
        ]

    def layouts(
        self, mbs: int, vpp: int, split: Split, plains: list[Layout] | None = None
    ) -> list[Layout]:
        """The layouts of `self(mbs, vpp, split)`'s bases, in their order, without their rungs
        (each plain, and after it its EP-overlap twin where `ep_overlap` gives one); `plains`:
        `plain_layouts(mbs, vpp, split)`, where the caller has them."""
        out: list[Layout] = []
        for plain in self.plain_layouts(mbs, vpp, split) if plains is None else plains:
            out.append(plain)
            overlap = ep_overlap(self.job, plain, self.space)
            if overlap is not None:
                out.append(overlap)
        return out

    def plain_layouts(self, mbs: int, vpp: int, split: Split) -> list[Layout]:
        """The layouts of `self(mbs, vpp, split)`'s bases without the EP overlap, one per
        dispatcher in the same order, without making the bases (their rungs and twins)."""
        shape = self.shape_fields(mbs, vpp, split)
        return [dispatched.with_(**shape) for dispatched in self.plains]

    def shape_fields(self, mbs: int, vpp: int, split: Split) -> dict[str, Any]:
        """The fields a shape sets on the structure's plains."""
        group = group_of(self.job, self.s.pp, self.s.dp, vpp, mbs)
        return {
            "vpp": vpp,
            "microbatch_group_size_per_vp_stage": group,
            "v_stages": v_stages(self.job, vpp),  # torchtitan's V schedules place stages in a V
            "micro_batch_size": mbs,
            **split_fields(split),
        }

    def __call__(self, mbs: int, vpp: int, split: Split) -> list[Base]:
        job, space = self.job, self.space
        shape = self.shape_fields(mbs, vpp, split)
        out: list[Base] = []
        for dispatched in self.plains:
            plain = dispatched.with_(**shape)
            single, ladders = rung_tuples(job, plain, space.recompute, self.offload)
            if self.titan:  # torchtitan: none, per-op selective (one rung) and full recompute
                single = tuple(r for r in single if r.modules == ("core_attn",))
                ladders = ()
            overlap = ep_overlap(job, plain, space)
            if overlap is None:
                out.append(_base(plain, single, ladders))
                continue
            # `overlap` passed `rules.expert_overlap` without recompute, and a rung changes only
            # the recompute, offloading and TP-overlap fields: the rule's recompute condition
            # decides
            ov_single, ov_ladders, ov_set = overlap_rungs(job, plain, space.recompute, self.offload)
            out.append(_base(plain, single, ladders, ov_set, self.s.pp == 1))
            out.append(_base(overlap, ov_single, ov_ladders))
        return out


def at_micro_batch(shape: list[Base], mbs: int, job: Job) -> list[Base]:
    """`bases` of the same structure, vpp and split at micro-batch size `mbs`: each base with its
    layout's micro_batch_size and micro-batch group (`group_of`) set, and the same rungs.
    Nothing else `bases` decides reads the micro-batch size: the dispatchers read the
    structure, the rungs (`rungs.rungs`) the split and the TP overlap, `rules.expert_overlap`
    the degrees, vpp, dispatcher and recompute (tests/search/test_search_memo.py checks it over
    every option of the brute-forced problems)."""
    if all(b.layout.micro_batch_size == mbs for b in shape):
        return shape
    lay = shape[0].layout  # all() is true of no base: there is one
    group = group_of(job, lay.pp, lay.dp, lay.vpp, mbs)
    new = {"micro_batch_size": mbs, "microbatch_group_size_per_vp_stage": group}
    return [
        _base(b.layout.with_(**new), b.single, b.ladders, b.twin_takes, b.twin_timed) for b in shape
    ]


def _dispatchers(job: Job, s: Structure, space: Space) -> list[Dispatcher]:
    """alltoall, and flex where the experts are spread as DeepEP needs (Megatron's expert-TP x
    EP > 1, torchtitan's EP > 1 without expert TP: `rules.deepep_spread`) on a GPU it runs on
    (`rules.flex_runs`) and, for torchtitan, where the era that runs DeepEP for the model runs
    the job's other settings (`rules.head_era`: no tensorwise float8 where only the Python
    configurations run it), for Megatron where its backend builds the group (`rules.flex_group`);
    a dense model has one base."""
    if not job.arch.is_moe:
        return ["alltoall"]
    flex = rules.deepep_spread(job, s.ep, s.etp) and rules.flex_runs(job) and rules.bf16_values(job)
    if flex and job.framework == "torchtitan":
        flex = rules.head_era(job, s.layout(moe_token_dispatcher_type="flex")) is None
    elif flex:  # a group size its backend builds (`rules.flex_group`)
        backend = flex_backend(job)
        lay = s.layout(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend=backend)
        flex = rules.flex_group(job, lay) is None
    if job.moe_expert_rank_capacity_factor is not None:  # HybridEP's alone (`flex_backend`)
        return ["flex"] if flex and "flex" in space.dispatchers else []
    return [d for d in space.dispatchers if d != "flex" or flex] or ["alltoall"]


def ep_overlap(job: Job, plain: Layout, space: Space) -> Layout | None:
    """The base with the EP all-to-all overlap, where `rules.expert_overlap` accepts it (its
    conditions on recompute are on the rungs); None elsewhere."""
    if not space.ep_comm_overlap or plain.ep == 1 or job.framework == "torchtitan":
        return None
    overlap = plain.with_(ep_comm_overlap=True)
    return None if rules.expert_overlap(job, overlap) else overlap
