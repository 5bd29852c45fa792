"""planner.search.rules on training features: each of Megatron-LM's asserts (refused) and warnings
(reported, accepted), broken and just kept.

Oracle: Megatron-LM d98e8a64's own conditions, as benchmarks/data/megatron_rules.md records them
with file and line (TC = TransformerConfig.__post_init__): recompute modules and methods (TC
1908-2012), CPU offloading (TC 1884-1899), the flex dispatcher and capacity (TC 1754-1866,
token_dispatcher.py 1835-1862), group-limited routing (TC 2671-2689), the interleaved schedule's
micro-batch groups (schedules.py 1160-1180), the EP overlap (TC 3003-3046, args.py 1453-1475),
pipeline layouts (pipeline_parallel_layer_layout.py 94-136, TC 2241-2287).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.pipeline_layout import parse
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.search import rules, space, top_k


def make_job(
    model: str | ModelArch = "llama3.1-8b",
    num_gpus: int = 8,
    gpu: str = "h100-sxm-80gb",
    **fields: object,
) -> Job:
    arch = catalog.get_model(model) if isinstance(model, str) else model
    cluster = resolve_cluster(ClusterSection(gpu=gpu, num_gpus=num_gpus), None)
    job = Job(arch=arch, cluster=cluster, seq_length=4096, global_batch_size=64)
    return replace(job, **fields)  # type: ignore[arg-type]


def broken(job: Job, lay: Layout) -> dict[str, rules.Violation]:
    return {v.rule: v for v in rules.violations(job, lay)}


def warned(job: Job, lay: Layout) -> dict[str, rules.Violation]:
    return {v.rule: v for v in rules.warnings(job, lay)}


# --- recompute


def test_modules_read_only_with_selective_and_method_only_with_full() -> None:
    job = make_job(num_gpus=8)
    lay = Layout(dp=8)
    mlp = lay.with_(recompute="selective", recompute_modules=("mlp", "layernorm"))
    assert broken(job, mlp) == {}
    # Megatron reads the modules only with selective recompute (transformer_config.py:1943
    # d98e8a64): beside none they are unread, not refused (tests/search/test_rules_accepted.py)
    assert "recompute_modules" not in broken(job, mlp.with_(recompute="none"))
    block = lay.with_(recompute="full", recompute_method="block", recompute_num_layers=4)
    assert broken(job, block) == {}
    v = broken(job, block.with_(recompute="selective"))["recompute_method"]
    assert "recompute_method (block)" in v.message and "recompute_num_layers (4)" in v.message


def test_mla_up_proj_needs_mla_and_delayed_fp8_refuses_output_discarding_modules() -> None:
    lay = Layout(dp=8, recompute="selective", recompute_modules=("mla_up_proj",))
    assert "recompute_modules" in broken(make_job(), lay)  # llama: no MLA
    assert broken(make_job("deepseek-v3", 64), lay.with_(dp=64)) == {}
    # TC 2000-2012: moe_act / layernorm recompute cannot run under delayed scaling
    norm = Layout(dp=8, recompute="selective", recompute_modules=("layernorm",))
    delayed = make_job(precision="fp8", fp8_recipe="delayed")
    assert "delayed FP8 recipe" in broken(delayed, norm)["recompute_modules"].message
    assert broken(make_job(precision="fp8", fp8_recipe="tensorwise"), norm) == {}
    assert broken(make_job(), norm) == {}  # bf16: no FP8 recipe at all


def test_core_attn_recompute_with_fused_attention_is_a_warning() -> None:
    lay = Layout(dp=8, recompute="selective")  # Megatron's default module list: core_attn
    job = make_job()
    assert broken(job, lay) == {}
    assert "saves no memory" in warned(job, lay)["core_attn"].message
    assert warned(replace(job, flash_attention=False), lay) == {}


# --- activation offloading


@pytest.mark.parametrize(
    ("lay", "rule"),
    [
        # 0 <= n < num_layers (32 here), total layers not per stage
        (Layout(dp=8, cpu_offloading_num_layers=32), "offload_layers"),
        (Layout(pp=2, dp=4, cpu_offloading_num_layers=4), "offload_pp"),
        (Layout(dp=8, cpu_offloading_num_layers=4, recompute="full"), "offload_recompute"),
    ],
)
def test_offloading_conditions(lay: Layout, rule: str) -> None:
    job = make_job()
    assert rule in broken(job, lay)
    assert broken(job, Layout(dp=8, cpu_offloading_num_layers=31)) == {}


# --- MoE dispatch, routing, token dropping


def test_flex_with_deepep_needs_expert_parallelism_and_no_padding() -> None:
    job = make_job("mixtral-8x7b", 8)
    flex = Layout(dp=8, moe_token_dispatcher_type="flex")
    assert "expert_tensor_parallel_size x" in broken(job, flex)["dispatcher"].message
    assert broken(job, flex.with_(ep=8)) == {}
    assert broken(job, flex.with_(moe_flex_dispatcher_backend="hybridep")) == {}
    padded = replace(job, moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    assert broken(padded, flex.with_(ep=8))["dispatcher"].field == (
        "training.moe_pad_expert_input_to_capacity"
    )
    assert broken(padded, Layout(dp=8, ep=8)) == {}  # alltoall pads fine
    no_capacity = replace(job, moe_pad_expert_input_to_capacity=True)
    assert (
        "needs moe_expert_capacity_factor" in broken(no_capacity, Layout(dp=8))["capacity"].message
    )


@pytest.mark.parametrize("gpu", ["mi300x-192gb", "mi355x-288gb"])
def test_flex_is_refused_on_amd_gpus(gpu: str) -> None:
    # Megatron-LM's flex backends come from NVIDIA's deep_ep package (fused_a2a.py d98e8a64),
    # which has no ROCm build (ROCm/aiter issue #421): on AMD the same layout with alltoall is kept
    amd = make_job("mixtral-8x7b", 8, gpu=gpu)
    flex = Layout(dp=8, ep=8, moe_token_dispatcher_type="flex")
    for backend in ("deepep", "hybridep"):
        v = broken(amd, flex.with_(moe_flex_dispatcher_backend=backend))["dispatcher"]
        assert v.field == "parallel.moe_token_dispatcher_type" and gpu in v.message
    assert broken(amd, flex.with_(moe_token_dispatcher_type="alltoall")) == {}
    assert broken(make_job("mixtral-8x7b", 8), flex) == {}  # the same on H100 runs


def test_group_limited_routing() -> None:
    # DeepSeek-V3: 256 experts in 8 groups, 4 per token (its HF config n_group / topk_group)
    job = make_job("deepseek-v3", 64, moe_router_num_groups=8, moe_router_group_topk=4)
    lay = Layout(dp=64, ep=64)
    assert broken(job, lay) == {}
    assert (
        "exceeds moe_router_num_groups (8)"
        in broken(replace(job, moe_router_group_topk=9), lay)["routing"].message
    )
    assert (
        "multiple of moe_router_num_groups (6)"
        in broken(replace(job, moe_router_num_groups=6), lay)["routing"].message
    )
    assert (
        "needs moe_router_num_groups"
        in broken(replace(job, moe_router_num_groups=None), lay)["routing"].message
    )
    # ep 64 over 8-GPU nodes spans 8 nodes: 4 groups per token fit; 16 experts per rank, ep 16
    # spans 2 nodes, where 4 groups per token are more nodes than there are: a warning only
    assert warned(job, lay) == {}
    narrow = Layout(dp=64, ep=16)
    assert broken(job, narrow) == {}
    assert "exceeds the 2 nodes" in warned(job, narrow)["routing"].message


def test_mxfp8_needs_blackwell() -> None:
    job = make_job(precision="fp8", fp8_recipe="mxfp8")
    assert broken(job, Layout(dp=8))["fp8_recipe"].field == "training.fp8_recipe"
    b200 = make_job(gpu="b200-sxm-180gb", precision="fp8", fp8_recipe="mxfp8")
    assert broken(b200, Layout(dp=8)) == {}


# --- interleaved micro-batch groups


@pytest.mark.parametrize(
    ("m", "group", "ok"),
    [
        (8, None, True),  # default group = pp = 4: 8 is a multiple
        (6, None, False),  # 6 mod 4 = 2 < pp
        (3, None, False),  # fewer than pp
        (6, 6, True),  # one group of 6
        (10, 6, True),  # 10 mod 6 = 4 >= pp
        (9, 6, False),  # 9 mod 6 = 3 < pp
        (6, 3, False),  # group below pp
        (6, 8, False),  # group above m
    ],
)
def test_microbatch_groups_of_the_interleaved_schedule(m: int, group: int | None, ok: bool) -> None:
    job = replace(make_job(num_gpus=8), global_batch_size=2 * m)  # dp 2, mbs 1: m micro-batches
    lay = Layout(pp=4, dp=2, vpp=2, microbatch_group_size_per_vp_stage=group)
    assert ("vpp_microbatches" not in broken(job, lay)) == ok


# --- pipeline layouts


def test_layout_string_rules() -> None:
    job = replace(make_job("deepseek-v3", 256), global_batch_size=256)  # 16 micro-batches
    stages = parse("Et*3|(tt|)*29,m|L")
    assert stages is not None
    lay = Layout(pp=16, vpp=2, dp=16, ep=16, pipeline_layout=stages)
    assert broken(job, lay) == {}
    assert "vpp is 2" in broken(job, lay.with_(vpp=1))["pipeline_layout"].message
    short = parse("Et*3|(tt|)*28,t|m|L")  # 32 stages, 60 decoder layers of 61
    assert short is not None
    v = broken(job, lay.with_(pipeline_layout=short))["pipeline_layout"]
    assert "holds 60 decoder layers" in v.message and "num_layers is 61" in v.message
    both = lay.with_(account_for_loss_in_pipeline_split=True)
    message = broken(job, both)["pipeline_layout"].message
    assert "cannot be combined with account_for_loss_in_pipeline_split " in message


def test_account_for_switches_count_a_layer_in_the_split() -> None:
    # Llama 3.1 405B (126 layers): +1 for the embedding, +1 for the loss = 128 = pp 16 x vpp 8
    job = make_job("llama3.1-405b", 1024)
    both = Layout(
        tp=8,
        pp=16,
        dp=8,
        vpp=8,
        sequence_parallel=True,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    assert broken(replace(job, global_batch_size=128), both) == {}
    one = both.with_(account_for_loss_in_pipeline_split=False)  # 127: not a multiple of 128
    assert (
        "num_layers + 1 (127)"
        in broken(replace(job, global_batch_size=128), one)["layers_pp"].message
    )


def test_search_on_amd_never_picks_flex() -> None:
    # the search generates no flex base on an AMD GPU (space._dispatchers), so none of its picks
    # is a layout the rule would refuse; on H100 the same job's bases include flex ones
    amd = make_job("mixtral-8x7b", 16, gpu="mi355x-288gb")
    picks = top_k.search(amd, top_k=5).candidates
    assert picks and all(c.layout.moe_token_dispatcher_type != "flex" for c in picks)
    s = space.Structure(tp=1, cp=1, pp=1, dp=16, ep=8, etp=1)
    assert space._dispatchers(amd, s, space.Space()) == ["alltoall"]
    nvidia = make_job("mixtral-8x7b", 16)
    assert "flex" in space._dispatchers(nvidia, s, space.Space())
