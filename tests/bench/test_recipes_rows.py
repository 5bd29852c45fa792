"""Megatron-Bridge performance recipes read row by row: pipeline layouts, recompute, DeepSeek,
Kimi K2, Nemotron 3 / Nemotron-H and Qwen3-Next rows as their plan files hold them.

Oracles: the data file itself (benchmarks/data/bridge_recipes.md); hand readings of single rows
(arithmetic in the comments); Megatron-LM's rules (planner.search.rules, whose sources
benchmarks/data/megatron_rules.md lists).
"""

from __future__ import annotations

import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from recipe_plans import BY_ID, MODELLED, stages

from benchmarks import recipes
from planner.emit.megatron import arguments
from planner.inputs import pipeline_layout
from planner.inputs.plan import load_plan
from planner.model import memory

# --- single rows, read by hand


def test_l6_layout_string() -> None:
    # Et*2|(t*2|)*34,t*3|(t*2|)*3,tL: "Ett", 34 x "tt", "ttt", 3 x "tt", "tL" = 40 stages
    # (pp 8 x vpp 5) holding 2 + 68 + 3 + 6 + 1 = 80 layers
    s = stages(BY_ID["L6"])
    assert len(s) == 40 and "".join(s).count("t") == 80
    assert s[0] == "Ett" and s[35] == "ttt" and s[-1] == "tL"


def test_l7_account_for_embedding_and_loss() -> None:
    # 126 layers + embedding + loss = 128 over pp 8 x vpp 8 = 64 stages of 2
    s = stages(BY_ID["L7"])
    assert len(s) == 64 and s[0] == "Et" and s[-1] == "tL"
    assert all(x == "tt" for x in s[1:-1])


def test_deepseek_layouts() -> None:
    # D1: Et|(tt|)*30mL on pp 8: 32 stages (vpp 4), MTP with the loss on the last
    d1 = stages(BY_ID["D1"])
    assert len(d1) == 32 and d1[0] == "Et" and d1[-1] == "mL"
    # D3 / D9 / D12 / D7: Bridge's built-in list, E + 4 t, 14 x 4 t, t + m + L (16 stages)
    for rid, (pp, vpp) in (("D3", (8, 2)), ("D9", (8, 2)), ("D12", (4, 4)), ("D7", (16, 1))):
        s = stages(BY_ID[rid])
        assert s == ("Etttt", *("tttt",) * 14, "tmL"), rid
        lay = load_plan(BY_ID[rid].plan_path).require_layout()
        assert (lay.pp, lay.vpp) == (pp, vpp)
    assert pipeline_layout.parse("Et|(tt|)*30mL") == d1


def test_recompute_rows() -> None:
    # L2 "full, block, 5 layers"; D1 "selective [mla_up_proj, mlp]"; G6 "selective with empty
    # module list (nothing recomputed)"
    l2 = load_plan(BY_ID["L2"].plan_path).require_layout()
    assert (l2.recompute, l2.recompute_method, l2.recompute_num_layers) == ("full", "block", 5)
    d1 = load_plan(BY_ID["D1"].plan_path).require_layout()
    assert d1.recompute == "selective" and d1.recompute_modules == ("mla_up_proj", "mlp")
    assert load_plan(BY_ID["G6"].plan_path).require_layout().recompute == "none"


def test_deepseek_optimizer_and_routing() -> None:
    # D1: precision-aware optimizer, main_grads bf16, exp_avg(_sq) bf16; HF n_group 8,
    # topk_group 4; grad-reduce overlap off
    r = BY_ID["D1"]
    plan = load_plan(r.plan_path)
    job, lay = plan.job, plan.require_layout()
    assert (job.main_grad_dtype, job.optimizer_state_dtype) == ("bf16", "bf16")
    assert (job.moe_router_num_groups, job.moe_router_group_topk) == (8, 4)
    assert not lay.overlap_grad_reduce and not lay.overlap_param_gather
    f = recipes.emitted_flags(plan)
    assert f["--main-grads-dtype"] == ("bf16",) and "--use-precision-aware-optimizer" in f


def test_kimi_k2_rows() -> None:
    # bridge_recipes.md, Kimi K2: the H100 recipes give Et|(tt|)*30L on pp 16 x vpp 2 (32
    # stages: E + 1 layer, 30 x 2 layers, then the loss alone: 61 layers, no MTP); the others use
    # Bridge's built-in 16-stage list (E + 4, 14 x 4, 1 + loss) on (16, 1) and (4, 4)
    k1 = stages(BY_ID["K1"])
    assert len(k1) == 32 and k1[0] == "Et" and k1[-1] == "L" and "".join(k1).count("t") == 61
    for rid, (pp, vpp) in (("K4", (16, 1)), ("K7", (4, 4)), ("K10", (16, 1)), ("K13", (4, 4))):
        assert stages(BY_ID[rid]) == ("Etttt", *("tttt",) * 14, "tL"), rid
        lay = load_plan(BY_ID[rid].plan_path).require_layout()
        assert (lay.pp, lay.vpp) == (pp, vpp), rid
    # the base recipe's optimizer (optimizer_utils.distributed_muon_with_cosine_annealing):
    # dist_muon = Muon with Megatron's layer-wise distributed optimizer (zero_stage 1), TP mode
    # blockwise, on its legacy whole-parameter path (muon_whole_params; Megatron-LM's
    # --no-use-layer-wise-param-layout): Bridge 067f987d wraps DDP without
    # use_layer_wise_distributed_optimizer (models/model_provider.py:698-706; default False,
    # Megatron-LM 2a75ac12 training/models/dist_utils.py:270) and the recipe sets
    # ddp.use_distributed_optimizer False (recipes/kimi/h100/kimi_k2.py:74); param-gather overlap
    # off in every row, grad-reduce overlap off on H100 only
    for r in (x for x in MODELLED if x.family == "kimi_k2"):
        plan = load_plan(r.plan_path)
        job, lay = plan.job, plan.require_layout()
        assert (job.optimizer, job.muon_tp_mode, lay.zero_stage) == ("muon", "blockwise", 1)
        assert job.muon_whole_params, r.id
        assert not lay.overlap_param_gather
        assert lay.overlap_grad_reduce == (r.gpu != "H100"), r.id
        assert job.moe_router_num_groups is None and job.arch.mtp_num_layers == 0
        f = recipes.emitted_flags(plan)
        assert f["--optimizer"] == ("muon",) and f["--muon-tp-mode"] == ("blockwise",)
        assert "--use-distributed-optimizer" in f and "--no-use-layer-wise-param-layout" in f
    # K6: MXFP8 with fp8_param_gather (and the grad-buffer reuse) off; K16 NVFP4 gathers fp4
    k6 = load_plan(BY_ID["K6"].plan_path).job
    assert (k6.precision, k6.fp8_recipe, k6.fp8_param_gather) == ("fp8", "mxfp8", False)
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in recipes.emitted_flags(
        load_plan(BY_ID["K6"].plan_path)
    )
    assert load_plan(BY_ID["K16"].plan_path).job.fp4_param_gather
    # GB200: TE graphs of the router and the dispatch preprocessing; GB300: none
    k7 = load_plan(BY_ID["K7"].plan_path).job
    assert k7.cuda_graphs and k7.cuda_graph_modules == ("moe_router", "moe_preprocess")
    assert not load_plan(BY_ID["K13"].plan_path).job.cuda_graphs


def test_kimi_k7_first_stage_optimizer_by_hand() -> None:
    # K7 (GB200, 256 GPUs: tp 1, pp 4 x vpp 4, ep 64, dp 64, expert dp 256 / (64 x 4) = 1). Rank
    # 0 holds chunks E+t*4, t*4, t*4, t*4: 16 layers, the first dense (kimi_bridge.py
    # first_k_dense_replace 1). Per layer, MLA 7168 x 1536 + 1536 x 64 x 192 + 7168 x 576 +
    # 512 x 64 x 256 + 8192 x 7168 = 101,122,048, norms 1536 + 512 + 2 x 7168 = 16,384; the dense
    # MLP 3 x 7168 x 18432 = 396,361,728; a MoE layer's router 384 x 7168 + shared expert
    # 3 x 7168 x 2048 = 46,792,704 and 6 of 384 experts 6 x 44,040,192 = 264,241,152; the word
    # embedding 163,840 x 7168 = 1,174,405,120. Muon (8 bytes: fp32 master + momentum) on the
    # decoder matrices, Adam (12) on the embedding and norms (emerging_optimizers.py:140-147).
    # The whole-parameter path deals every dense parameter whole, sorted ascending, over ranks
    # 0..63,63..0 (layer_wise_optimizer.py `_shard_params_ping_pong`, :726, :740, :744-754): the
    # 64 norm tensors first (indices 0-63), then 15 routers (384 x 7168 = 2,752,512; indices
    # 64-78), ..., 128 matrices in all, the word embedding last at index 191 -> rank 63, which
    # also takes index 64's router (index 63's norm: planner spreads the norms evenly). The
    # experts are not sharded (expert dp 1):
    #   norms 16 x 16,384 = 262,144; experts 15 x 264,241,152 = 3,963,617,280
    #   12 x 1,174,405,120 + 8 x 2,752,512 + 12 x 262,144 / 64 + 8 x 3,963,617,280
    #   = 14,092,861,440 + 22,020,096 + 49,152 + 31,708,938,240 = 45,823,868,928 B = 42.68 GiB
    # (on the layer-wise layout, as planned before, K7 peaked at 259.2 of 179.5 GiB)
    plan = load_plan(BY_ID["K7"].plan_path)
    first = memory.estimate(plan.job, plan.require_layout()).stages[0]
    assert first.optimizer == pytest.approx(45_823_868_928, rel=1e-9)
    assert first.weights == pytest.approx(
        2 * (2_716_205_056 + 262_144 + 1_174_405_120 + 3_963_617_280), rel=1e-3
    )


def test_nemotron_3_nano_rows() -> None:
    # bridge_recipes.md, Nemotron 3 Nano: tp 1, pp 1, no recompute (the perf defaults clear it)
    # but on H100 (N1 [moe, layernorm], N2 [layernorm]); flex / hybridep; TE graphs of
    # [attn, mamba] on H100, [attn, mamba, moe_router, moe_preprocess] elsewhere; the precision
    # preset overrides the model's first / last bf16 layers: none
    n1 = load_plan(BY_ID["N1"].plan_path).require_layout()
    assert n1.recompute == "selective" and n1.recompute_modules == ("moe", "layernorm")
    assert load_plan(BY_ID["N2"].plan_path).require_layout().recompute_modules == ("layernorm",)
    for r in (x for x in MODELLED if x.family == "nemotron_3_nano"):
        plan = load_plan(r.plan_path)
        job, lay = plan.job, plan.require_layout()
        assert job.arch.is_hybrid and (lay.tp, lay.pp, lay.ep) == (1, 1, r.ep), r.id
        assert (lay.moe_token_dispatcher_type, lay.moe_flex_dispatcher_backend) == (
            "flex",
            "hybridep",
        )
        graphs = ("attn", "mamba") + (() if r.gpu == "H100" else ("moe_router", "moe_preprocess"))
        assert job.cuda_graphs and job.cuda_graph_modules == graphs, r.id
        assert (job.bf16_layers_at_start, job.bf16_layers_at_end) == (0, 0)
        assert lay.recompute == ("selective" if r.gpu == "H100" else "none"), r.id
        # launched as pretrain_hybrid.py: the pattern, not --num-layers (test_emit_hybrid.py)
        words = {arg[0]: arg[1:] for arg in arguments(plan).flat_args()}
        assert words["--hybrid-layer-pattern"] == (job.arch.hybrid_layer_pattern,)
        assert "--num-layers" not in words
    # N7 / N13 (GB200 / GB300 MXFP8): the TE op fuser's fused grouped MLP and fp8 attention
    for rid in ("N7", "N13"):
        job = load_plan(BY_ID[rid].plan_path).job
        assert job.moe_fused_grouped_mlp and job.fp8_attention and job.fp8_recipe == "mxfp8"


def test_nemotron_h_56b_rows() -> None:
    # bridge_recipes.md, Nemotron-H 56B: the base recipe's NullTokenizer gives a 32000-token
    # vocabulary (the zoo's released model has 131072); tp 8 on H100 with graphs of [mamba], tp 2
    # elsewhere with [mamba, attn]; TP comm overlap on (tp >= 2 with SP); grad-reduce overlap on,
    # param-gather overlap off; no recompute; M3 / M8 (BF16 at 256 GPUs, gbs 192 over dp 128)
    # cannot run as coded
    assert BY_ID["M3"].skip and BY_ID["M8"].skip and "gbs 192" in (BY_ID["M3"].skip or "")
    for r in (x for x in MODELLED if x.family == "nemotronh_56b"):
        plan = load_plan(r.plan_path)
        job, lay = plan.job, plan.require_layout()
        assert job.arch.is_hybrid and not job.arch.is_moe and job.arch.vocab_size == 32000
        assert (lay.tp, lay.pp, lay.recompute) == ((8 if r.gpu == "H100" else 2), 1, "none")
        assert lay.tp_comm_overlap and lay.overlap_grad_reduce and not lay.overlap_param_gather
        modules = ("mamba",) if r.gpu == "H100" else ("mamba", "attn")
        assert job.cuda_graphs and job.cuda_graph_modules == modules, r.id
        assert (job.precision, job.fp8_recipe) == ("fp8", "tensorwise"), r.id


def test_nemotron_3_super_rows() -> None:
    # bridge_recipes.md, Nemotron 3 Super: the base recipe's 2 MTP depths of one repeated "*E"
    # layer on the zoo's 88-layer stack; H100 (S1) keeps the base recipe (tp 8, SP, ep 16,
    # alltoall, bf16 moments, no grad-reduce or param-gather overlap), the others flex / hybridep
    # with fp32 states and both overlaps on
    for r in (x for x in MODELLED if x.family == "nemotron_3_super"):
        plan = load_plan(r.plan_path)
        job, lay = plan.job, plan.require_layout()
        arch = job.arch
        assert (arch.num_layers, arch.mtp_num_layers, arch.mtp_use_repeated_layer) == (88, 2, True)
        assert (arch.hybrid_layer_pattern or "").endswith("E/*E/*E"), r.id
        h100 = r.gpu == "H100"
        assert lay.moe_token_dispatcher_type == ("alltoall" if h100 else "flex"), r.id
        assert (job.optimizer_state_dtype == "bf16") == h100, r.id
        assert lay.overlap_grad_reduce == (not h100) and lay.overlap_param_gather == (not h100)
    s1 = load_plan(BY_ID["S1"].plan_path).require_layout()
    assert (s1.tp, s1.ep, s1.sequence_parallel) == (8, 16, True)
    # S2: selective [moe_act, moe, layernorm, core_attn] and no graphs; S4: tp 2 with graphs
    s2 = load_plan(BY_ID["S2"].plan_path)
    assert s2.require_layout().recompute_modules == ("moe_act", "moe", "layernorm", "core_attn")
    assert not s2.job.cuda_graphs
    s4 = load_plan(BY_ID["S4"].plan_path)
    assert s4.require_layout().tp == 2 and s4.job.cuda_graphs


def test_nemotron_3_ultra_rows() -> None:
    # bridge_recipes.md, Nemotron 3 Ultra: Megatron-FSDP (zero 3) as HSDP over 256 / 64 = 4
    # optimizer instances with outer sharding "optim"; the 2 repeated MTP depths; the TE op
    # fuser's fused grouped MLP (no GLU interleave set) offloaded fine-grained; selective
    # recompute of [moe_act]; U1 (GB200) tp 2 with SP, U2 (GB300) tp 1
    for rid, tp in (("U1", 2), ("U2", 1)):
        plan = load_plan(BY_ID[rid].plan_path)
        job, lay = plan.job, plan.require_layout()
        assert (lay.tp, lay.sequence_parallel, lay.ep, lay.zero_stage) == (tp, tp > 1, 64, 3)
        assert job.optimizer_instances == 4 and job.outer_dp_sharding_strategy == "optim"
        assert (job.arch.mtp_num_layers, job.arch.mtp_use_repeated_layer) == (2, True)
        assert job.moe_fused_grouped_mlp and lay.offload_modules == ("fused_group_mlp",)
        assert lay.recompute_modules == ("moe_act",) and not job.cuda_graphs
        flags = recipes.recipe_flags(BY_ID[rid], recipes.read(BY_ID[rid]))
        assert "--moe-mlp-glu-interleave-size" not in flags
        assert "--reuse-grad-buf-for-mxfp8-param-ag" not in flags  # dropped under FSDP


def test_qwen3_next_rows() -> None:
    # bridge_recipes.md, Qwen3-Next-80B-A3B (X1-X10): the zoo model with its 36 gated delta nets
    # and one MTP layer, no recompute, forced load balancing; H100 alltoall at ep 128; B200 / B300
    # flex / deepep at ep 64; GB200 / GB300 flex / hybridep (16 SMs) at pp 2 with the layout
    # string's 8 stages (vpp 4), ep 32 and TE graphs of attention and the router
    expect = {
        "X1": (1, 1, 128, "alltoall", None),
        "X3": (1, 1, 64, "flex", "deepep"),
        "X7": (1, 1, 64, "flex", "deepep"),
        "X5": (2, 4, 32, "flex", "hybridep"),
        "X9": (2, 4, 32, "flex", "hybridep"),
    }
    for rid, (pp, vpp, ep, dispatcher, backend) in expect.items():
        plan = load_plan(BY_ID[rid].plan_path)
        job, lay = plan.job, plan.require_layout()
        assert job.arch.has_gdn and job.arch.mtp_num_layers == 1
        assert (lay.pp, lay.vpp, lay.ep, lay.recompute) == (pp, vpp, ep, "none")
        assert lay.moe_token_dispatcher_type == dispatcher
        assert backend is None or lay.moe_flex_dispatcher_backend == backend
        assert job.moe_router_force_load_balancing
        assert job.cuda_graphs == (backend == "hybridep")
    gb = load_plan(BY_ID["X9"].plan_path).require_layout()
    # Et*4 | (t*7 |)*5 t*8 | tmL: 4 + 5 x 7 + 8 + 1 = 48 layers in 8 stages
    assert gb.pipeline_layout is not None
    assert [s.count("t") for s in gb.pipeline_layout] == [4, 7, 7, 7, 7, 7, 8, 1]
    assert gb.moe_flex_dispatcher_num_sms == 16
