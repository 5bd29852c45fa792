"""The ways the search trades step time for memory on one base layout: its rungs.

A rung is one setting of Megatron's memory savers, from none up: selective recompute of a set of
modules (--recompute-modules), full recompute of the first N layers of each virtual stage (block
N) or of every layer (uniform 1), or offloading the activations of k layers to host memory
(--cpu-offloading-num-layers, pipelines of one stage only, without recompute). Every rung costs
time (recompute forwards, exposed host transfers) and saves memory; which is fastest depends on
the layout, so the search orders a base's rungs by their exact step time and takes the first that
fits (`planner.search.top_k`).

Two families are ladders with one integer: block N and offload k. Memory falls and time grows as
N or k grows (more layers recomputed or offloaded), so only the smallest N or k that fits can be
best: the search finds it by bisection (`Ladder`).

Module sets: the sets Megatron-LM's own recipes use (Megatron-Bridge: [layernorm, moe_act] for
GPT-OSS, [mla_up_proj, mlp] for DeepSeek-V3) and the single modules, each kept where the model has
what it recomputes (mla_up_proj needs multi-latent attention, moe_act / moe an MoE layer,
shared_experts shared experts, mlp a dense layer) and the rules allow it (not moe_act or layernorm
under delayed FP8). core_attn only without flash attention: with it the module saves nothing
(Megatron warns so). PyTorch's per-op policy (`training.selective_recompute = "per_op"`) is one
rung of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.layout import Layout, Recompute, RecomputeMethod, RecomputeModule
from planner.inputs.plan import Job

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
)
"""Selective-recompute module sets the search tries (those the model and rules allow)."""


@dataclass(frozen=True)
class Rung:
    """One setting of the memory savers."""

    recompute: Recompute = "none"
    modules: tuple[RecomputeModule, ...] = ("core_attn",)
    method: RecomputeMethod = "uniform"
    num_layers: int = 1
    offload: int = 0

    def on(self, lay: Layout) -> Layout:
        """The base layout with this rung's settings."""
        return lay.with_(
            recompute=self.recompute,
            recompute_modules=self.modules,
            recompute_method=self.method,
            recompute_num_layers=self.num_layers,
            cpu_offloading_num_layers=self.offload,
        )


NONE = Rung()
FULL = Rung("full")


@dataclass(frozen=True)
class Ladder:
    """Rungs `make(n)` for n in [lo, hi]: memory falls and time grows with n."""

    make: Callable[[int], Rung]
    lo: int
    hi: int


def _block(n: int) -> Rung:
    return Rung("full", method="block", num_layers=n)


def _offload(k: int) -> Rung:
    return Rung(offload=k)


def _applies(job: Job, modules: tuple[RecomputeModule, ...]) -> bool:
    arch = job.arch
    has = {
        "layernorm": True,
        "core_attn": not job.flash_attention,
        "mla_up_proj": arch.multi_latent_attention,
        "moe_act": arch.is_moe,
        "moe": arch.is_moe,
        "shared_experts": arch.moe_shared_expert_intermediate_size is not None,
        "mlp": arch.num_moe_layers < arch.num_layers,
    }
    delayed = job.precision == "fp8" and job.fp8_recipe == "delayed"
    barred = {"layernorm", "moe_act"} if delayed else set()
    return all(has[m] and m not in barred for m in modules)


def selective(job: Job) -> list[Rung]:
    """The selective-recompute rungs of a job: Megatron's module sets the model and rules allow,
    or PyTorch's per-op policy, which ignores them."""
    if job.selective_recompute == "per_op":
        return [Rung("selective")]
    return [Rung("selective", modules) for modules in MODULE_SETS if _applies(job, modules)]


def rungs(
    job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool
) -> tuple[list[Rung], list[Ladder]]:
    """A base layout's rungs of the allowed recompute kinds: (single rungs, ladders). Offloading
    (a ladder) only where it is allowed: one pipeline stage, no recompute (`kinds` has none)."""
    single: list[Rung] = []
    ladders: list[Ladder] = []
    if "none" in kinds:
        single.append(NONE)
        if offload and base.pp == 1 and job.arch.num_layers > 1:
            ladders.append(Ladder(_offload, 1, job.arch.num_layers - 1))
    if "selective" in kinds:
        single += selective(job)
    if "full" in kinds:
        longest = max(len(c) for c in base.chunk_layers(job.arch.num_layers))
        if longest > 1:
            ladders.append(
                Ladder(lambda n: Rung("full", method="block", num_layers=n), 1, longest - 1)
            )
        single.append(FULL)
    return single, ladders


def every(job: Job, base: Layout, kinds: tuple[Recompute, ...], offload: bool) -> list[Rung]:
    """Every rung of a base, each ladder's whole (the brute-force reference's space)."""
    single, ladders = rungs(job, base, kinds, offload)
    return single + [ld.make(n) for ld in ladders for n in range(ld.lo, ld.hi + 1)]
