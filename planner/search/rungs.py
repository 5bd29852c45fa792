"""The ways the search trades step time for memory on one base layout: its rungs.

A rung is one setting of Megatron's memory savers, from none up: selective recompute of a set of
modules (--recompute-modules), full recompute of the first N layers of each virtual stage (block
N) or of every layer (uniform 1), or offloading the activations of k layers to host memory
(--cpu-offloading-num-layers, pipelines of one stage only, without recompute), or in MoE models
fine-grained offloading of some modules' saved inputs (--offload-modules, `offloading`), alone
or with a recipe's recompute modules. Where the base
overlaps TP communication with userbuffers (--tp-comm-overlap), each of those also comes without
it: Transformer Engine's userbuffers hold a dozen [s b / cp, h] buffers outside PyTorch's
allocator (planner.model.buffers), gigabytes at long sequences, and turning the overlap off frees
them for exposed TP traffic. Every rung costs time (recompute forwards, exposed host transfers or
TP collectives) and saves memory; which is fastest depends on the layout, so the search orders a
base's rungs by their exact step time and takes the first that fits (`planner.search.top_k`).

Two families are ladders with one integer: block N and offload k. Memory falls and time grows as
N or k grows (more layers recomputed or offloaded), so only the smallest N or k that fits can be
best: the search finds it by bisection (`Ladder`).

Module sets: the sets Megatron-LM's own recipes use (Megatron-Bridge: [layernorm, moe_act] for
GPT-OSS, [mla_up_proj, mlp] for DeepSeek-V3) and the single modules, each kept where the model has
what it recomputes (mla_up_proj needs multi-latent attention, moe_act / moe an MoE layer,
shared_experts shared experts, mlp a dense layer, gdn_norm_out a gated delta net: alone, and
with the GPT-OSS recipe's pair) and the rules allow it (not moe_act or layernorm
under delayed FP8). core_attn only without flash attention: with it the module saves nothing in
bf16 (Megatron warns so) and under FP8 only the attention output's 16-bit copy, for a second
attention forward (not searched; a plan may set it). PyTorch's per-op policy
(`training.selective_recompute = "per_op"`) is one rung of its own, torchtitan's only: Megatron-LM
has none (`planner.search.rules.selective_policy`), so a Megatron job that names it has no
selective rung.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

from planner.inputs.layout import (
    Layout,
    OffloadModule,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
)
from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo, kept_hash
from planner.search.rules import fused_mlp, graphs, recompute_allows_overlap, save_original
from planner.search.rules.dsa import up_proj_recompute_barred

MODULE_SETS: tuple[tuple[RecomputeModule, ...], ...] = (
    ("layernorm",),
    ("moe_act",),
    ("layernorm", "moe_act"),
    ("mla_up_proj",),
    ("mla_up_proj", "layernorm", "moe_act"),
    ("mlp",),
    ("mla_up_proj", "mlp"),
    ("shared_experts",),
    ("moe",),
    ("mla_up_proj", "moe"),
    ("core_attn",),
    ("gdn_norm_out",),
    ("gdn_norm_out", "layernorm", "moe_act"),
)
"""Selective-recompute module sets the search tries (those the model and rules allow)."""

OFFLOAD_SETS: tuple[tuple[OffloadModule, ...], ...] = (
    ("core_attn", "attn_proj"),
    ("expert_fc1",),
    ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "moe_act"),
)
"""Fine-grained offloading's module sets the search tries: Megatron-Bridge's DeepSeek-V3 recipes'
core attention and its projection's input (perf_recipes/deepseek/common.py) and the experts' fc1
input (perf_recipes/deepseek/gb200/deepseek_v3.py, 067f987d); and, the last, everything a layer
saves before its experts plus their activation input (modules a model's layers lack hold
nothing, `planner.model.fine_offload`), the only one also tried with recompute."""

OFFLOAD_WITH: tuple[tuple[RecomputeModule, ...], ...] = (
    ("layernorm", "moe_act"),
    ("mla_up_proj", "mlp"),
    ("mla_up_proj", "layernorm", "moe_act"),
)
"""The module sets the recipes recompute, each tried with offloading too (besides none)."""


RUNG_FIELDS = (
    "recompute",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "cpu_offloading_num_layers",
    "offload_modules",
)
"""The layout fields `Rung.on` sets (and the TP overlap, which it keeps or turns off)."""


@dataclass(frozen=True)
class Rung:
    """One setting of the memory savers."""

    recompute: Recompute = "none"
    modules: tuple[RecomputeModule, ...] = ("core_attn",)
    method: RecomputeMethod = "uniform"
    num_layers: int = 1
    offload: int = 0
    tp_overlap: bool = True
    """False: the base's TP communication overlap turned off (its userbuffers freed)."""
    offload_modules: tuple[OffloadModule, ...] = ()
    """Fine-grained activation offloading's modules (Megatron --offload-modules)."""

    def __hash__(self) -> int:  # the generated hash, once per rung (the searches' dict keys)
        return kept_hash(self)

    def on(self, lay: Layout) -> Layout:
        """The base layout with this rung's settings."""
        return lay.with_(
            recompute=self.recompute,
            recompute_modules=self.modules,
            recompute_method=self.method,
            recompute_num_layers=self.num_layers,
            cpu_offloading_num_layers=self.offload,
            tp_comm_overlap=lay.tp_comm_overlap and self.tp_overlap,
            offload_modules=self.offload_modules,
        )

    def without_tp_overlap(self) -> Rung:
        return _overlap_twin(self, False)

    def with_tp_overlap(self) -> Rung:
        return _overlap_twin(self, True)


@lru_cache(maxsize=1 << 12)
def _overlap_twin(rung: Rung, on: bool) -> Rung:
    """The rung with `tp_overlap` = `on`, remembered (rungs are values: the search asks for
    these twins on every memory estimate)."""
    return replace(rung, tp_overlap=on)


NONE = Rung()
FULL = Rung("full")


@dataclass(frozen=True)
class Ladder:
    """Rungs `make(n)` for n in [lo, hi]: memory falls and time grows with n."""

    make: Callable[[int], Rung]
    lo: int
    hi: int
    with_tp_overlap: Ladder | None = None
    """For a ladder without the base's TP overlap: the same ladder with it (each of its rungs
    is as fast or faster, in more memory)."""


def _block(n: int) -> Rung:
    return Rung("full", method="block", num_layers=n)


def _offload(k: int) -> Rung:
    return Rung(offload=k)


def _without_tp_overlap(ladder: Ladder) -> Ladder:
    make = ladder.make
    return Ladder(lambda n: make(n).without_tp_overlap(), ladder.lo, ladder.hi, ladder)


def selective(job: Job) -> list[Rung]:
    """The selective-recompute rungs of a job: Megatron's module sets the model and rules allow,
    or PyTorch's per-op policy, which ignores them (torchtitan's; none for a Megatron job that
    names it, which Megatron-LM does not run: `rules.selective_policy`)."""
    if job.selective_recompute == "per_op":
        return [Rung("selective")] if job.framework == "torchtitan" else []
    arch = job.arch
    has = (
        ("layernorm", True),
        ("core_attn", not job.flash_attention),
        ("mla_up_proj", arch.multi_latent_attention and not up_proj_recompute_barred(job)),
        ("moe_act", arch.is_moe),
        ("moe", arch.is_moe),
        ("shared_experts", arch.moe_shared_expert_intermediate_size is not None),
        ("mlp", arch.num_moe_layers < arch.num_layers),
        ("gdn_norm_out", arch.has_gdn),
    )
    delayed = job.precision == "fp8" and job.fp8_recipe == "delayed"
    return list(_selective(has, delayed))


def offloading(job: Job) -> list[Rung]:
    """Fine-grained activation offloading's rungs (Megatron --offload-modules), for MoE models
    (where NVIDIA's recipes use it; their dense recipes do not): each of `OFFLOAD_SETS` that runs
    (`rules.save_original`) alone, and the last with each recipe module set the model's rules
    allow (`OFFLOAD_WITH`), the experts' modules as the fused grouped MLP's one group
    (`fused_mlp.fused_offload`). None with Megatron's own CUDA graphs, which capture only the
    expert modules (TransformerConfig), nor with torchtitan or PyTorch's per-op recompute."""
    per_op = job.selective_recompute == "per_op"
    if not job.arch.is_moe or job.cuda_graphs or job.framework == "torchtitan" or per_op:
        return []
    allowed = {r.modules for r in selective(job)}
    sets = [fused_mlp.fused_offload(job, m) for m in OFFLOAD_SETS if save_original.runs(job, m)]
    return [Rung(offload_modules=m) for m in sets] + [
        Rung("selective", m, offload_modules=sets[-1]) for m in OFFLOAD_WITH if m in allowed
    ]


@lru_cache(maxsize=64)
def _selective(has: tuple[tuple[str, bool], ...], delayed: bool) -> tuple[Rung, ...]:
    """The module sets whose modules the model has, none of them barred: layernorm and moe_act
    recompute are not allowed under delayed FP8."""
    present = {m for m, there in has if there}
    barred = {"layernorm", "moe_act"} if delayed else set()
    return tuple(
        Rung("selective", modules)
        for modules in MODULE_SETS
        if all(m in present and m not in barred for m in modules)
    )


_RUNGS: JobMemo[tuple[object, ...], tuple[tuple[Rung, ...], tuple[Ladder, ...]]] = JobMemo()
"""`rungs` per job and per (split, TP overlap, kinds, offload): all that they read of the base
(the search asks for them once per base of every structure)."""


def rungs(
    job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool
) -> tuple[list[Rung], list[Ladder]]:
    """A base layout's rungs of the allowed recompute kinds: (single rungs, ladders). Offloading
    (a ladder) only where it is allowed: one pipeline stage, no recompute (`kinds` has none). With
    `Job.cuda_graphs` none that its graphs refuse (`rules.graphs`: per-layer ones no CPU
    offloading and no full recompute, any no graphed recompute with dropout)."""
    single, ladders = rung_tuples(job, base, kinds, offload)
    return list(single), list(ladders)


def rung_tuples(
    job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool
) -> tuple[tuple[Rung, ...], tuple[Ladder, ...]]:
    """`rungs` as the tuples it remembers (the same objects for every base alike: the search's
    bases hold them; not to be changed)."""
    memo = _RUNGS.of(job)
    key = _key(base, kinds, offload)
    hit = memo.get(key)
    if hit is None:
        if _barred(job, "full", (), 0):  # full recompute under per-layer CUDA graphs
            kinds = tuple(k for k in kinds if k != "full")
        longest = 0
        if "full" in kinds:
            chunks = base.chunk_layers(job.arch.num_layers)
            longest = max(len(chunk) for rank in chunks for chunk in rank)
        whole = offload and base.pp == 1 and not _barred(job, "none", (), 1)
        offload_up_to = job.arch.num_layers - 1 if whole else 0
        sel = tuple(selective(job)) if "selective" in kinds else ()
        fine = tuple(r for r in (offloading(job) if offload else ()) if r.recompute in kinds)
        single, ladders = _rungs(kinds, sel, fine, offload_up_to, longest, base.tp_comm_overlap)
        single = tuple(r for r in single if not _barred(job, r.recompute, r.modules, r.offload))
        hit = memo[key] = (single, ladders)
    return hit


def _barred(job: Job, recompute: str, modules: tuple[str, ...], offload: int) -> bool:
    """Whether the job's CUDA graphs refuse a rung of this recompute and CPU offloading
    (`rules.graphs.rung_conflict`; never for an eager job)."""
    return graphs.rung_conflict(job, recompute, modules, offload) is not None


def _key(base: Layout, kinds: tuple[Recompute, ...], offload: bool) -> tuple[object, ...]:
    """What `rungs` reads of its arguments besides the job."""
    return (base.split_key(), base.tp_comm_overlap, kinds, offload)


_OVERLAP_RUNGS: JobMemo[
    tuple[object, ...], tuple[tuple[Rung, ...], tuple[Ladder, ...], frozenset[Rung]]
] = JobMemo()
"""`overlap_rungs` per job and per `rungs`' key (`_key`)."""


def overlap_rungs(
    job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool
) -> tuple[tuple[Rung, ...], tuple[Ladder, ...], frozenset[Rung]]:
    """Of `rungs`, the single rungs and the ladders Megatron's EP all-to-all overlap allows
    (`rules.recompute_allows_overlap`: the one condition of `rules.expert_overlap` a rung
    changes), and those single rungs as a set; remembered as `rungs` are (`space.bases` asks
    for them on every base with the overlap)."""
    memo = _OVERLAP_RUNGS.of(job)
    key = _key(base, kinds, offload)
    hit = memo.get(key)
    if hit is None:
        single, ladders = rungs(job, base, kinds, offload)
        allowed = tuple(r for r in single if _allows(r))
        ov = tuple(ld for ld in ladders if _allows(ld.make(ld.lo)))
        hit = memo[key] = (allowed, ov, frozenset(allowed))
    return hit


def _allows(rung: Rung) -> bool:
    return recompute_allows_overlap(rung.recompute, rung.modules)


@lru_cache(maxsize=1024)
def _rungs(
    kinds: tuple[Recompute, ...],
    sel: tuple[Rung, ...],
    fine: tuple[Rung, ...],
    offload_up_to: int,
    longest: int,
    tp_overlap: bool,
) -> tuple[tuple[Rung, ...], tuple[Ladder, ...]]:
    """The rungs of `rungs`, from what they depend on (the search asks for them per base)."""
    single: list[Rung] = []
    ladders: list[Ladder] = []
    if "none" in kinds:
        single.append(NONE)
        if offload_up_to >= 1:
            ladders.append(Ladder(_offload, 1, offload_up_to))
    single += sel
    single += fine
    if "full" in kinds:
        if longest > 1:
            ladders.append(Ladder(_block, 1, longest - 1))
        single.append(FULL)
    if tp_overlap:
        single += [r.without_tp_overlap() for r in single]
        ladders += [_without_tp_overlap(ld) for ld in ladders]
    return tuple(single), tuple(ladders)


def covers(lean: Rung, rung: Rung) -> bool:
    """Whether `lean` holds no more memory than `rung` on any stage, so that where it does not
    fit, `rung` does not either: neither recomputes or offloads whole layers, both have the
    same TP overlap, and `lean` offloads every module `rung` offloads and recomputes every
    module it recomputes (none for no recompute), the same ones where `rung` offloads some.
    Offloading one more module's saved input frees it; so does recomputing one more module where
    nothing is offloaded; so `lean` holds no more than `rung` with `lean`'s offloading, which
    holds no more than `rung`. Not always so for recomputing more beside offloading: on some
    DeepSeek-V3 layouts the memory model holds more with MLA's up-projection recomputed beside
    the offloaded modules than without (tests/search/test_search_assumptions.py found it, and
    checks this relation on every covering pair of the single rungs of MoE jobs' bases)."""
    a, b = saved(lean), saved(rung)
    return lean != rung and a is not None and b is not None and saves_more(a, b)


Saved = tuple[bool, frozenset[str], frozenset[str]]
"""What `covers` reads of a rung (`saved`): its TP overlap, the modules it recomputes and those
it offloads."""


@lru_cache(maxsize=1 << 10)
def saved(rung: Rung) -> Saved | None:
    """(TP overlap, modules recomputed, modules offloaded) of a rung that recomputes modules
    selectively or not at all and offloads no whole layer; None for full recompute and layer
    offloading (`covers` relates neither)."""
    if rung.recompute == "full" or rung.offload:
        return None
    recomputed = frozenset(rung.modules) if rung.recompute == "selective" else frozenset()
    return rung.tp_overlap, recomputed, frozenset(rung.offload_modules)


def saves_more(lean: Saved, rung: Saved) -> bool:
    """`covers` on what it reads of both rungs (`saved`), the rungs equal or not."""
    return (
        lean[0] == rung[0]
        and lean[2] >= rung[2]
        and (lean[1] == rung[1] or (lean[1] >= rung[1] and not rung[2]))
    )


def leaner_first(single: Iterable[Rung]) -> list[Rung]:
    """The single rungs, those without the TP overlap first, and within each, every rung after
    each rung that covers it (`covers`): full recompute first, then by modules saved, most
    first (a stable sort: equals keep their order)."""

    def key(r: Rung) -> tuple[bool, int]:
        what = saved(r)
        return r.tp_overlap, -(1 << 10 if what is None else len(what[1]) + len(what[2]))

    return sorted(single, key=key)


def leanest(single: tuple[Rung, ...], ladders: tuple[Ladder, ...]) -> list[Rung]:
    """The leanest rung of each family of a base: full recompute, each fine-grained offloading
    rung and each ladder's top, without the TP overlap where the base has it (every other rung
    holds at least as much memory as one of these). Where the space has no full recompute
    (`suggest --recompute selective`), every rung: a selective one can then be the leanest (an
    optimality fuzzer's DeepSeek-V3 on 256 H800 with MLA's up-projection and the MoE layers
    recomputed fitted at 74.4 GiB, and the pinned search said nothing fits)."""
    off = [r for r in single if not r.tp_overlap] or list(single)
    off_ladders = [ld for ld in ladders if ld.with_tp_overlap] or list(ladders)
    if any(r.recompute == "full" for r in off):
        lean = [r for r in off if r.recompute == "full" or r.offload_modules]
    else:
        lean = off
    return lean + [ld.make(ld.hi) for ld in off_ladders]


def every(job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool) -> list[Rung]:
    """Every rung of a base, each ladder's whole (the brute-force reference's space)."""
    single, ladders = rungs(job, base, kinds, offload)
    return single + [ld.make(n) for ld in ladders for n in range(ld.lo, ld.hi + 1)]
