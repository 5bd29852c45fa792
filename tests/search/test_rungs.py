"""planner.search.rungs: which memory savers the search tries on a base layout.

Oracle: hand counts from the layouts' shapes (comments give the arithmetic) and Megatron-LM's
rules as benchmarks/data/megatron_rules.md states them (block recompute of N < the layers of a
virtual stage, offloading only with one pipeline stage, layernorm / moe_act recompute not under
delayed FP8, core_attn pointless with flash attention)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.search import rungs
from planner.search.rules import dsa, features, selective_policy
from planner.search.rules.features import fine_offloading
from planner.search.rungs import FULL, NONE, Rung

ALL = ("none", "selective", "full")


def job(
    model: str = "llama3.1-70b",
    precision: str = "bf16",
    gpu: str = "h100-sxm-80gb",
    **training: Any,
) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": 32},
        "training": {"seq_length": 4096, "global_batch_size": 64, "precision": precision},
    }
    doc["training"].update(training)
    return parse_plan(doc).job


def ladder_ranges(j: Job, lay: Layout, offload: bool = True) -> dict[str, tuple[int, int]]:
    _, ladders = rungs.rungs(j, lay, ALL, offload)
    out = {}
    for ld in ladders:
        kind = "offload" if ld.make(ld.lo).offload else "block"
        out[kind] = (ld.lo, ld.hi)
    return out


def test_block_recompute_ladder_spans_the_longest_virtual_stage() -> None:
    j = job()  # Llama 3.1 70B: 80 decoder layers
    # pp 2 split (41, 39): the longest stage holds 41 layers; block 41 would be every layer
    # (the FULL rung), so the ladder is block 1 .. 40
    uneven = Layout(tp=8, pp=2, dp=2, pipeline_layers=(41, 39))
    assert ladder_ranges(j, uneven) == {"block": (1, 40)}
    # pp 2 with vpp 4: 80 / 8 = 10 layers per virtual stage -> block 1 .. 9
    assert ladder_ranges(j, Layout(tp=8, pp=2, dp=2, vpp=4)) == {"block": (1, 9)}
    # pp 1: one stage of 80 -> block 1 .. 79, and offloading 1 .. 79 layers
    assert ladder_ranges(j, Layout(tp=8, dp=4)) == {"block": (1, 79), "offload": (1, 79)}
    assert ladder_ranges(j, Layout(tp=8, dp=4), offload=False) == {"block": (1, 79)}


def test_single_rungs_follow_the_model_and_the_rules() -> None:
    dense = job()
    single, _ = rungs.rungs(dense, Layout(tp=8, pp=2, dp=2), ALL, True)
    # a dense model with flash attention: none, layernorm, mlp, full (core_attn saves nothing
    # with flash attention; no MoE or MLA modules; no fine-grained offloading, MoE only)
    assert single == [NONE, Rung("selective", ("layernorm",)), Rung("selective", ("mlp",)), FULL]
    # without flash attention core_attn is a rung too
    no_flash = job(flash_attention=False)
    assert Rung("selective", ("core_attn",)) in rungs.selective(no_flash)
    # delayed FP8 bars layernorm and moe_act (Megatron asserts); tensorwise does not
    assert Rung("selective", ("layernorm",)) not in rungs.selective(job(precision="fp8"))
    tensorwise = job(precision="fp8", fp8_recipe="tensorwise")
    assert Rung("selective", ("layernorm",)) in rungs.selective(tensorwise)
    # DeepSeek-V3 (MLA, MoE with shared experts, 3 dense layers): every module set of MODULE_SETS
    # but core_attn and those with gdn_norm_out (no gated delta net)
    ds = job("deepseek-v3")
    sets = [r.modules for r in rungs.selective(ds)]
    assert sets == [m for m in rungs.MODULE_SETS if m != ("core_attn",) and "gdn_norm_out" not in m]
    # Qwen3-Next (gated delta nets, every layer MoE with a shared expert, no MLA): the sets
    # without mla_up_proj, mlp or core_attn, gdn_norm_out's among them
    qn = [r.modules for r in rungs.selective(job("qwen3-next-80b-a3b"))]
    barred = ("mla_up_proj", "mlp", "core_attn")
    assert qn == [m for m in rungs.MODULE_SETS if not any(b in m for b in barred)]
    assert ("gdn_norm_out",) in qn
    # PyTorch's per-op policy is one rung whatever the modules, torchtitan's alone: Megatron-LM
    # has no per-op policy (transformer_config.py:1940-1960 @d98e8a64 recomputes the modules)
    titan = job("llama3.1-8b", framework="torchtitan", selective_recompute="per_op")
    assert rungs.selective(titan) == [Rung("selective")]
    assert rungs.selective(job(selective_recompute="per_op")) == []


RUNG_RULES = (
    features.recompute,
    features.fine_offloading,
    dsa.up_proj_recompute,
    selective_policy.per_op,
)
"""The rules that read a rung's recompute and offload modules (the search builds only rungs
that pass them, rather than asking them per layout)."""


@pytest.mark.parametrize(
    ("precision", "recipe"),
    [("bf16", None), ("fp8", "delayed"), ("fp8", "tensorwise"), ("fp4", None)],
)
def test_every_zoo_models_rungs_pass_the_module_rules(precision: str, recipe: str | None) -> None:
    """Brute force over the zoo: each selective and offloading rung of every model, on a one-stage
    base, breaks none of RUNG_RULES. (A fuzzer's suggest wrote GLM-5 in FP8 with mla_up_proj
    recomputed, which DeepSeek sparse attention's absorbed MLA refuses: check exited 2.)"""
    checked = 0
    base = Layout(tp=1, dp=32)
    for name in catalog.models():
        training = {} if recipe is None else {"fp8_recipe": recipe}
        j = job(name, precision, "b200-sxm-180gb", **training)
        for rung in [*rungs.selective(j), *rungs.offloading(j)]:
            lay = rung.on(base)
            broken = [v for rule in RUNG_RULES if (v := rule(j, lay)) is not None]
            assert not broken, (name, precision, recipe, rung, broken)
            checked += 1
    assert checked > 100


def test_every_lists_each_ladder_whole() -> None:
    j = job()
    lay = Layout(tp=8, pp=2, dp=2, vpp=4)
    # none + layernorm + mlp + full, and block 1 .. 9
    every = rungs.every(j, lay, ALL, True)
    assert len(every) == 4 + 9
    assert every[4:] == [Rung("full", method="block", num_layers=n) for n in range(1, 10)]


def test_with_tp_overlap_every_rung_also_comes_without_it() -> None:
    j = job()
    lay = Layout(tp=8, pp=2, dp=2, vpp=4, sequence_parallel=True, tp_comm_overlap=True)
    single, ladders = rungs.rungs(j, lay, ALL, True)
    # none, layernorm, mlp, full, each with and without the overlap; block 1 .. 9 both ways
    assert len(single) == 2 * 4 and len(ladders) == 2
    off = [r for r in single if not r.tp_overlap]
    assert [r.on(lay).tp_comm_overlap for r in off] == [False] * 4
    assert [r.on(lay).tp_comm_overlap for r in single if r.tp_overlap] == [True] * 4
    assert {(ld.lo, ld.hi) for ld in ladders} == {(1, 9)}
    assert [ld.make(3).on(lay).tp_comm_overlap for ld in ladders] == [True, False]
    # a base without the overlap has nothing to turn off
    assert all(r.tp_overlap for r in rungs.every(j, lay.with_(tp_comm_overlap=False), ALL, True))


def test_leanest_is_full_recompute_and_each_ladder_top_without_tp_overlap() -> None:
    j = job()
    lay = Layout(tp=8, pp=2, dp=2, vpp=4, sequence_parallel=True, tp_comm_overlap=True)
    single, ladders = rungs.rungs(j, lay, ALL, True)
    # full recompute and block 9 (the longest virtual stage of 10 layers less one), both without
    # the overlap: every other rung keeps more activations or the userbuffers
    assert rungs.leanest(tuple(single), tuple(ladders)) == [
        FULL.without_tp_overlap(),
        Rung("full", method="block", num_layers=9, tp_overlap=False),
    ]
    # without the overlap on the base, the same rungs as they are
    single, ladders = rungs.rungs(j, lay.with_(tp_comm_overlap=False), ALL, True)
    assert rungs.leanest(tuple(single), tuple(ladders)) == [
        FULL,
        Rung("full", method="block", num_layers=9),
    ]
    # an MoE model's fine-grained offloading rungs are leanest too (each its own family)
    mix = job("mixtral-8x7b")
    single, ladders = rungs.rungs(mix, Layout(tp=2, pp=2, dp=8), ALL, True)
    lean = rungs.leanest(tuple(single), tuple(ladders))
    assert [r for r in lean if r.offload_modules] == rungs.offloading(mix)


def test_fine_grained_offloading_rungs() -> None:
    """Megatron's --offload-modules as rungs of MoE models: each of OFFLOAD_SETS alone and the
    last with each recipe module set the model allows; none for a dense model (NVIDIA's dense
    recipes do not offload), with Megatron's CUDA graphs (they capture only expert modules) or
    where offloading is not searched."""
    ds = job("deepseek-v3")  # MLA, MoE with shared experts, dense first layers: every set
    most = rungs.OFFLOAD_SETS[-1]
    assert rungs.offloading(ds) == [Rung(offload_modules=m) for m in rungs.OFFLOAD_SETS] + [
        Rung("selective", m, offload_modules=most) for m in rungs.OFFLOAD_WITH
    ]
    # Mixtral (MoE, no MLA, no dense layers): only (layernorm, moe_act) of the recipe sets
    mix = rungs.offloading(job("mixtral-8x7b"))
    assert [r.modules for r in mix if r.recompute == "selective"] == [("layernorm", "moe_act")]
    assert rungs.offloading(job()) == []  # Llama 3.1 70B: dense
    assert rungs.offloading(job("deepseek-v3", cuda_graphs=True)) == []
    single, _ = rungs.rungs(ds, Layout(tp=1, pp=2, dp=16), ALL, offload=False)
    assert not any(r.offload_modules for r in single)
    # every one passes Megatron's offloading rules on the base
    base = Layout(tp=1, pp=2, dp=16)
    assert all(fine_offloading(ds, r.on(base)) is None for r in rungs.offloading(ds))


def test_overlap_twins_are_the_rung_with_its_overlap_set() -> None:
    """`Rung.with_tp_overlap` / `without_tp_overlap` (remembered) are `dataclasses.replace` of
    the rung, asked twice (the second from the memo), for every rung of a base."""
    j = job("deepseek-v3")
    base = Layout(tp=2, pp=8, dp=2, ep=8, sequence_parallel=True, tp_comm_overlap=True)
    every = rungs.every(j, base, ALL, True)
    assert len(every) > 10
    for _ in range(2):
        for r in every:
            assert r.without_tp_overlap() == replace(r, tp_overlap=False)
            assert r.with_tp_overlap() == replace(r, tp_overlap=True)
