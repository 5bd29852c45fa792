"""Megatron-Bridge performance recipes' presets and newer rows: FP8 and NVFP4 presets,
Megatron-FSDP and offloading, the legacy 405B presets, B300 / GB300 rows, gpt-oss routing and
the dispatcher's SMs.

Oracles: the data file itself (benchmarks/data/bridge_recipes.md); hand readings of single rows
(arithmetic in the comments); Megatron-LM's rules (planner.search.rules, whose sources
benchmarks/data/megatron_rules.md lists).
"""

from __future__ import annotations

import sys

from paths import REPO

sys.path.insert(0, str(REPO))

from recipe_plans import ALL, BY_ID, MODELLED, stages

from benchmarks import recipes
from planner.inputs.plan import load_plan


def test_fp8_presets() -> None:
    # FP8-CS tensorwise with param gather; FP8-DS delayed; MXFP8 e4m3 (and reuse of the grad
    # buffer); FP8-blockwise without param gather
    def job(rid: str) -> tuple[str, str, bool]:
        j = load_plan(BY_ID[rid].plan_path).job
        return j.precision, j.fp8_recipe, j.fp8_param_gather

    assert job("L2") == ("fp8", "tensorwise", True)
    assert job("Q3") == ("fp8", "delayed", True)
    assert job("L13") == ("fp8", "mxfp8", True)
    assert job("D3") == ("fp8", "blockwise", False)
    assert job("G9") == ("fp8", "mxfp8", False)  # "MXFP8 without fp8-param-gather"
    f = recipes.emitted_flags(load_plan(BY_ID["L13"].plan_path))
    assert f["--fp8-format"] == ("e4m3",) and "--reuse-grad-buf-for-mxfp8-param-ag" in f


def test_megatron_fsdp_and_offloading_rows() -> None:
    # L31: Megatron-FSDP optim_grads_params, cpu_offloading 40 layers, mbs 2
    lay = load_plan(BY_ID["L31"].plan_path).require_layout()
    assert (lay.zero_stage, lay.cpu_offloading_num_layers, lay.micro_batch_size) == (3, 40, 2)
    # G9: cpu_offloading_num_layers = 95 without cpu_offloading has no effect
    assert load_plan(BY_ID["G9"].plan_path).require_layout().cpu_offloading_num_layers == 0


def test_legacy_presets_replace_the_flat_code_of_the_128_gpu_405b_recipes() -> None:
    # bridge_recipes.md, "Legacy presets modelled in place of the flat code": the docstrings'
    # TP=4 PP=8 CP=2 (V1, gbs 64) instead of the coded pp 16, cp 1, gbs 768 (V2 on 128 GPUs)
    legacy = {r.id for r in ALL if r.legacy}
    assert legacy == {"L21", "L22", "L23", "L38", "L39", "L40"}
    for i in legacy - {"L39"}:
        r = BY_ID[i]
        assert (r.tp, r.pp, r.vpp, r.cp, r.gbs) == (4, 8, 8, 2, 64), i
        assert r.flat and (r.flat.pp, r.flat.cp, r.flat.gbs) == (16, 1, 768), i
        assert recipes.read(r).notes[0].startswith("modelled: the legacy preset LLAMA31_405B")
    # L39: GB200 FP8-CS V1, tp 2, Megatron-FSDP, 92 layers offloaded, 2 optimizer instances, and
    # no PYTORCH_CUDA_ALLOC_CONF (the legacy perf_plugins drop it for Llama with FSDP)
    plan = load_plan(BY_ID["L39"].plan_path)
    lay = plan.require_layout()
    assert (lay.tp, lay.pp, lay.zero_stage, lay.cpu_offloading_num_layers) == (2, 1, 3, 92)
    assert plan.job.optimizer_instances == 2 and not plan.job.expandable_segments
    assert plan.job.global_batch_size == 64


def test_b300_and_gb300_rows_run_on_the_catalogs_blackwell_ultra_parts() -> None:
    # the GPU column's B300 / GB300: HGX B300 and GB300 NVL72 in hardware_catalog/
    assert load_plan(BY_ID["L46"].plan_path).job.cluster.gpu.name == "b300-sxm-270gb"
    assert load_plan(BY_ID["D22"].plan_path).job.cluster.gpu.name == "gb300-nvl72"


def test_gb300_deepseek_explicit_layout_string() -> None:
    # D22 / D23: Et*4|(t*4|)*14tmL, the built-in list as a string, on pp 4 x vpp 4 and pp 2 x vpp 8
    for rid, (pp, vpp) in (("D22", (4, 4)), ("D23", (2, 8)), ("D29", (4, 4))):
        assert stages(BY_ID[rid]) == ("Etttt", *("tttt",) * 14, "tmL"), rid
        lay = load_plan(BY_ID[rid].plan_path).require_layout()
        assert (lay.pp, lay.vpp, lay.ep) == (pp, vpp, BY_ID[rid].ep)


def test_gpt_oss_20b_recipes_route_as_learned() -> None:
    # gpt_oss/common.py's 20B helper turns moe_router_force_load_balancing off (bridge_recipes.md);
    # the 120B recipes and every other MoE recipe turn it on
    for rid in ("G9", "G13", "G15", "G20"):
        plan = load_plan(BY_ID[rid].plan_path)
        assert not plan.job.moe_router_force_load_balancing, rid
        assert "--moe-router-force-load-balancing" not in recipes.emitted_flags(plan), rid
    forced = [r for r in MODELLED if r.is_moe and r.family != "gpt_oss_20b"]
    assert all(load_plan(r.plan_path).job.moe_router_force_load_balancing for r in forced)


def test_dispatcher_sms_and_budgets_as_the_recipes_set_them() -> None:
    # bridge_recipes.md: _benchmark_common gives every HybridEP recipe 32 SMs (Q1), a recipe may
    # set its own afterwards (Q20's notes: 64; the Nemotron 3 Nano row N1's cell: 16; the
    # gpt-oss-20b rows': 128); DeepEP keeps Megatron's default (D9: flex / deepep, none set);
    # the budget and the stash where the dropping cell names them (Q14: 1.5 with the stash;
    # G9: 7 without)
    def sms(rid: str) -> int | None:
        return load_plan(BY_ID[rid].plan_path).require_layout().moe_flex_dispatcher_num_sms

    assert (sms("Q1"), sms("Q20"), sms("N1"), sms("G9")) == (32, 64, 16, 128)
    d9 = load_plan(BY_ID["D9"].plan_path).require_layout()
    assert d9.moe_flex_dispatcher_backend == "deepep" and d9.moe_flex_dispatcher_num_sms is None
    q14, g9 = (load_plan(BY_ID[r].plan_path).job for r in ("Q14", "G9"))
    assert (q14.moe_expert_rank_capacity_factor, q14.moe_paged_stash) == (1.5, True)
    assert (g9.moe_expert_rank_capacity_factor, g9.moe_paged_stash) == (7.0, False)


def test_new_megatron_fsdp_rows() -> None:
    # L54 (B300 405B): Megatron-FSDP at tp 2 without double buffering, 40 layers offloaded;
    # L73 (GB300, the same with double buffering); L63: nccl_ub, 30 layers, mbs 2
    l54, l73 = recipes.read(BY_ID["L54"]), recipes.read(BY_ID["L73"])
    assert (l54.zero_stage, l54.offload_layers, l54.fsdp_double_buffer) == (3, 40, False)
    assert (l73.zero_stage, l73.offload_layers, l73.fsdp_double_buffer) == (3, 40, True)
    assert "--fsdp-double-buffer" not in recipes.recipe_flags(BY_ID["L54"], l54)
    lay = load_plan(BY_ID["L63"].plan_path).require_layout()
    assert (lay.zero_stage, lay.cpu_offloading_num_layers, lay.micro_batch_size) == (3, 30, 2)
    # D28: HSDP, 4 optimizer instances with outer sharding 'optim' (the optimizer states over
    # all of them); Bridge drops the MXFP8 grad-buffer reuse under FSDP
    d28 = load_plan(BY_ID["D28"].plan_path)
    assert d28.job.optimizer_instances == 4 and d28.require_layout().zero_stage == 3
    assert d28.job.outer_dp_sharding_strategy == "optim"
    flags = recipes.recipe_flags(BY_ID["D28"], recipes.read(BY_ID["D28"]))
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in flags
    assert flags["--num-distributed-optimizer-instances"] == ("4",)
    assert flags["--outer-dp-sharding-strategy"] == ("optim",)
    # D26 / D27 offload the core-attention and projection inputs (bridge_recipes.md: fine-grained
    # [core_attn, attn_proj]); D28's full-iteration graphs do too, but planner launches local
    # per-layer graphs, under which TransformerConfig (d98e8a64) refuses those modules
    d26 = load_plan(BY_ID["D26"].plan_path).require_layout()
    assert d26.offload_modules == ("core_attn", "attn_proj")
    assert d28.require_layout().offload_modules == ()
    assert any("per-layer graphs do not run it" in n for n in recipes.read(BY_ID["D28"]).notes)


def test_nvfp4_recipes_as_bridge_sets_them() -> None:
    # bridge_recipes.md, "NVFP4 per recipe": Bridge's bf16_with_nvfp4_mixed preset gathers the
    # NVFP4 weights (training/mixed_precision.py:416); D10 turns it off
    # (deepseek/b200/deepseek_v3.py:181-182); the GPT-OSS-20B helper turns it off and keeps the
    # last 4 of 24 layers in bf16 (gpt_oss/common.py:68-75). By hand: 16 Llama (L14, L20, L24,
    # L25, L29, L33, L41, L45, L49, L53, L57, L62, L66, L70, L76, L80), 10 feasible Qwen3, D15,
    # D20, D25, K16, N5, N8, N11, N14 gather: 34; D10, 6 GPT-OSS-20B and the 4 Nemotron 3 Super
    # ones do not: 11. Super's preset (nemotron_3_super_bf16_with_nvfp4_mixed,
    # training/mixed_precision.py:421-429, its gather off in perf_recipes/nemotronh/common.py)
    # keeps the last 14 of 88 layers in bf16
    off = {"D10", "G7", "G8", "G12", "G14", "G18", "G19", "S4", "S7", "S10", "S13"}
    nvfp4 = [r for r in MODELLED if r.precision.startswith("NVFP4")]
    assert len(nvfp4) == 45 and len([r for r in nvfp4 if r.id not in off]) == 34
    ends = {"gpt_oss_20b": 4, "nemotron_3_super": 14}
    for r in nvfp4:
        plan = load_plan(r.plan_path)
        job, end = plan.job, ends.get(r.family, 0)
        assert job.precision == "fp4" and job.fp4_param_gather == (r.id not in off), r.id
        assert (job.bf16_layers_at_start, job.bf16_layers_at_end) == (0, end), r.id
        f = recipes.emitted_flags(plan)
        assert f["--fp4-format"] == ("e2m1",) and f["--fp4-recipe"] == ("nvfp4",), r.id
        assert ("--fp4-param-gather" in f) == (r.id not in off), r.id
        assert "--fp8-format" not in f and "--fp8-param-gather" not in f, r.id
        if end:
            assert "--first-last-layers-bf16" in f
            assert f["--num-layers-at-start-in-bf16"] == ("0",)
            assert f["--num-layers-at-end-in-bf16"] == (str(end),)
        else:
            assert "--first-last-layers-bf16" not in f, r.id
