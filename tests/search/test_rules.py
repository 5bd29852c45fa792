"""planner.search.rules: every Megatron-LM validation rule, broken and just kept.

Each "broken" case checks that the rule fires and that its message prints both values (Megatron's
style: "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (5)"); each
"kept" case is a layout just inside the rule and must break no rule at all. The oracle is the
integer arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner.emit import megatron_pipeline
from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan
from planner.inputs.plan_layout import layout_from_section
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.plan_resolve import resolve_cluster
from planner.search import rules
from planner.search.rules import Violation, check_plan, violations

# llama3.1-8b: 32 layers, 32 heads, 8 query groups, RoPE, dense
# mixtral-8x7b: 32 layers, 32 heads, 8 query groups, 8 experts


def make_job(
    model: str | ModelArch = "llama3.1-8b",
    num_gpus: int = 8,
    seq_length: int = 4096,
    global_batch_size: int = 64,
    gpu: str = "h100-sxm-80gb",
) -> Job:
    arch = catalog.get_model(model) if isinstance(model, str) else model
    cluster = resolve_cluster(ClusterSection(gpu=gpu, num_gpus=num_gpus), None)
    return Job(
        arch=arch, cluster=cluster, seq_length=seq_length, global_batch_size=global_batch_size
    )


def broken(job: Job, layout: Layout) -> dict[str, Violation]:
    found = violations(job, layout)
    return {v.rule: v for v in found}


def assert_ok(job: Job, layout: Layout) -> None:
    assert violations(job, layout) == []


def tiny(heads: int, groups: int | None = None, **fields: object) -> ModelArch:
    data: dict[str, object] = {
        "name": "tiny",
        "num_layers": 4,
        "hidden_size": heads * 64,
        "ffn_hidden_size": heads * 256,
        "num_attention_heads": heads,
        "num_query_groups": groups,
        "vocab_size": 1000,
    }
    data.update(fields)
    return ModelArch.model_validate(data)


def test_bundled_example_layout_is_clean() -> None:
    # examples/llama3.1-8b-h100.toml: tp1 pp1 dp8 on 8 GPUs, gbs 128 = 16 x (mbs 1 x dp 8)
    job = make_job(num_gpus=8, seq_length=8192, global_batch_size=128)
    assert_ok(job, Layout(dp=8))


# --- world size


def test_degrees_must_multiply_to_num_gpus() -> None:
    job = make_job(num_gpus=8)
    v = broken(job, Layout(tp=2, dp=2, sequence_parallel=True))["world_size"]
    # 2 x 1 x 1 x 2 = 4 != 8
    assert v.field == "parallel"
    assert v.message == "tp x pp x cp x dp (2 x 1 x 1 x 2 = 4) must equal num_gpus (8)"
    assert_ok(job, Layout(tp=2, dp=4, sequence_parallel=True))  # 2 x 4 = 8
    # cp counts toward the world: tp 2 x cp 2 x dp 2 = 8
    assert_ok(job, Layout(tp=2, cp=2, dp=2, sequence_parallel=True))


# --- tensor parallel vs heads and query groups


def test_heads_must_split_over_tp() -> None:
    job = make_job(num_gpus=40, global_batch_size=80)
    v = broken(job, Layout(tp=5, dp=8, sequence_parallel=True))["heads_tp"]
    assert v.field == "parallel.tp"
    assert v.message == (
        "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (5)"
    )
    # tp 4: 32 % 4 == 0 and 8 groups % 4 == 0; 40 / 4 = dp 10; 80 % (1 x 10) == 0
    assert_ok(job, Layout(tp=4, dp=10, sequence_parallel=True))


def test_query_groups_may_divide_tp() -> None:
    # tp 16 with 8 query groups: 16 % 8 == 0, so each group is replicated on 2 ranks (allowed);
    # heads 32 % 16 == 0
    job = make_job(num_gpus=16)
    assert_ok(job, Layout(tp=16, dp=1, sequence_parallel=True))
    # tp 2 with 8 groups: 8 % 2 == 0
    assert_ok(make_job(num_gpus=2), Layout(tp=2, dp=1, sequence_parallel=True))


def test_query_groups_neither_multiple_nor_divisor_of_tp() -> None:
    # 24 heads (24 % 3 == 0, so the heads rule holds), 8 groups, tp 3: 8 % 3 = 2 and 3 % 8 = 3
    # (3,072-token sequences: sequence parallelism splits them over tp 3, `sequence_split`)
    arch = tiny(heads=24, groups=8)
    job = make_job(arch, num_gpus=3, seq_length=3072, global_batch_size=8)
    found = broken(job, Layout(tp=3, dp=1, sequence_parallel=True))
    assert set(found) == {"query_groups_tp"}
    assert found["query_groups_tp"].message == (
        "num_query_groups (8) must be a multiple of tensor_model_parallel_size (3) or divide it"
    )
    # the 8B model at tp 3 breaks both rules (32 % 3 and 8 % 3)
    job8 = make_job(num_gpus=3, seq_length=3072, global_batch_size=9)
    assert set(broken(job8, Layout(tp=3, dp=1, sequence_parallel=True))) == {
        "heads_tp",
        "query_groups_tp",
    }


def test_query_groups_rule_skips_multi_latent_attention() -> None:
    # the same 24-head / 8-group shape at tp 3 as above, but with MLA there are no KV heads to
    # shard, so only the heads rule applies (24 % 3 == 0)
    mla = dict(
        multi_latent_attention=True,
        kv_lora_rank=64,
        qk_head_dim=32,
        qk_pos_emb_head_dim=16,
        v_head_dim=32,
    )
    job = make_job(
        tiny(heads=24, groups=8, **mla), num_gpus=3, seq_length=3072, global_batch_size=8
    )
    assert_ok(job, Layout(tp=3, dp=1, sequence_parallel=True))


def test_sequence_parallelism_needs_tp_to_divide_a_cp_ranks_tokens() -> None:
    # Megatron-Core's _split_along_first_dim asserts tp divides the first dim, s / cp tokens:
    # 4,097 % 2 = 1 breaks it; 4,096 % 2 = 0 and, at cp 2, 2,048 % 4 = 0 do not;
    # 4,100 / 2 = 2,050 and 2,050 % 4 = 2 breaks it; without sequence parallelism nothing splits
    v = broken(make_job(seq_length=4097), Layout(tp=2, dp=4, sequence_parallel=True))["sp_seq"]
    assert v.field == "training.seq_length"
    assert "4097 tokens over tensor_model_parallel_size 2" in v.message
    assert "sp_seq" not in broken(make_job(), Layout(tp=2, dp=4, sequence_parallel=True))
    cp2 = Layout(tp=4, cp=2, dp=1, sequence_parallel=True)
    assert "sp_seq" not in broken(make_job(seq_length=4096), cp2)
    assert "sp_seq" in broken(make_job(seq_length=4100), cp2)
    assert "sp_seq" not in broken(make_job(seq_length=4097), Layout(tp=2, dp=4))


# --- pipeline split


def test_layers_must_split_over_pp_times_vpp() -> None:
    job = make_job(num_gpus=3)
    v = broken(job, Layout(pp=3, dp=1))["layers_pp"]
    assert v.field == "parallel.pp"
    # 32 % (3 x 1) = 2
    assert "num_layers (32) must be a multiple of pipeline_model_parallel_size x vpp" in v.message
    assert "(3 x 1 = 3)" in v.message
    # pp 4 x vpp 3 = 12 does not divide 32 either; pp 4 x vpp 2 = 8 does
    job4 = make_job(num_gpus=4)
    assert "(4 x 3 = 12)" in broken(job4, Layout(pp=4, vpp=3, dp=1))["layers_pp"].message
    assert_ok(job4, Layout(pp=4, vpp=2, dp=1))  # 64 micro-batches % pp 4 == 0
    # an uneven split is fine once pipeline_layers says how: 11 + 11 + 10 = 32
    assert_ok(job, Layout(pp=3, dp=1, pipeline_layers=(11, 11, 10)))


def test_pipeline_layers_sum_and_length() -> None:
    job = make_job(num_gpus=3)
    v = broken(job, Layout(pp=3, dp=1, pipeline_layers=(11, 11, 11)))["pipeline_layers"]
    assert v.field == "parallel.pipeline_layers"
    assert v.message == "pipeline_layers sum to 33 but num_layers is 32"  # 11 x 3 = 33
    v = broken(job, Layout(pp=3, dp=1, pipeline_layers=(16, 16)))["pipeline_layers"]
    assert v.message == "pipeline_layers has 2 entries but pipeline_model_parallel_size is 3"
    assert_ok(job, Layout(pp=3, dp=1, pipeline_layers=(10, 12, 10)))


def test_pipeline_layers_need_a_layer_per_rank() -> None:
    """Counts that are not multiples of vpp are Megatron's layout string, whose virtual stages may
    be empty (megatron_rules.md section 7): (31, 1) at vpp 2 is stages 16 | 1 | 15 | 0 layers."""
    job = make_job(num_gpus=2)
    v = broken(job, Layout(pp=2, vpp=2, dp=1, pipeline_layers=(32, 0)))["pipeline_layers"]
    assert v.message == "every pipeline rank needs a layer (got 0)"
    odd = Layout(pp=2, vpp=2, dp=1, pipeline_layers=(31, 1))
    assert_ok(job, odd)
    assert_ok(job, Layout(pp=2, vpp=2, dp=1, pipeline_layers=(30, 2)))
    # launched as that string: rank 0's 31 layers in chunks of 16 and 15, rank 1's 1 and 0
    layout_arg = ("--pipeline-model-parallel-layout", "Et*16|t|t*15|L")
    assert megatron_pipeline.pipeline_args(job.arch, odd) == [layout_arg]


# --- virtual pipeline


def test_vpp_needs_pp() -> None:
    job = make_job(num_gpus=8)
    v = broken(job, Layout(vpp=2, dp=8))["vpp_pp"]
    assert v.field == "parallel.vpp"
    assert v.message == ("virtual pipeline size (2) needs pipeline_model_parallel_size > 1 (got 1)")
    assert_ok(job, Layout(pp=2, vpp=2, dp=4))  # 64 / 4 = 16 micro-batches, 16 % 2 == 0


def test_interleaved_schedule_needs_microbatches_multiple_of_pp() -> None:
    # pp 4 x dp 2 = 8 GPUs; gbs 12 / (dp 2 x mbs 1) = 6 micro-batches; 6 % 4 = 2
    job = make_job(num_gpus=8, global_batch_size=12)
    v = broken(job, Layout(pp=4, vpp=2, dp=2))["vpp_microbatches"]
    assert v.field == "parallel.vpp"
    assert "number of micro-batches (6)" in v.message
    assert "pipeline_model_parallel_size (4)" in v.message
    # plain 1F1B (vpp 1) has no such rule
    assert_ok(job, Layout(pp=4, vpp=1, dp=2))
    # gbs 16 / 2 = 8 micro-batches, 8 % 4 == 0
    assert_ok(make_job(num_gpus=8, global_batch_size=16), Layout(pp=4, vpp=2, dp=2))


# --- mixture of experts


def test_experts_must_split_over_ep() -> None:
    job = make_job("mixtral-8x7b", num_gpus=6, global_batch_size=60)
    v = broken(job, Layout(dp=6, ep=3))["experts_ep"]
    assert v.field == "parallel.ep"
    # 8 % 3 = 2
    assert v.message == ("num_moe_experts (8) must be a multiple of expert_model_parallel_size (3)")
    assert_ok(make_job("mixtral-8x7b", num_gpus=8), Layout(dp=8, ep=4))  # 8 % 4 == 0
    assert_ok(make_job("mixtral-8x7b", num_gpus=8), Layout(dp=8, ep=8))  # 8 % 8 == 0


def test_expert_grid_must_divide_world() -> None:
    # etp 1 x ep 8 x pp 2 = 16 ranks per expert grid, but the world is 8
    job = make_job("mixtral-8x7b", num_gpus=8)
    v = broken(job, Layout(pp=2, dp=4, ep=8, etp=1))["expert_grid"]
    assert v.field == "parallel.ep"
    assert "num_gpus (8) must be a multiple of" in v.message
    assert "(1 x 8 x 2 = 16)" in v.message
    # ep 4: 1 x 4 x 2 = 8 divides 8
    assert_ok(job, Layout(pp=2, dp=4, ep=4, etp=1))
    # etp defaults to tp: tp 2 x ep 4 x pp 1 = 8 divides 8; tp 2 x ep 8 = 16 does not
    assert_ok(job, Layout(tp=2, dp=4, ep=4, sequence_parallel=True))
    v = broken(job, Layout(tp=2, dp=4, ep=8, sequence_parallel=True))["expert_grid"]
    assert "(2 x 8 x 1 = 16)" in v.message
    # an etp other than tp is named: etp 2 x ep 8 x pp 1 = 16 does not divide 8
    v = broken(job, Layout(dp=8, ep=8, etp=2))["expert_grid"]
    assert v.field == "parallel.etp"
    assert "(2 x 8 x 1 = 16)" in v.message


def test_moe_with_tp_without_sequence_parallel_is_refused() -> None:
    """ModelParallelConfig only warns, but the MoE layer raises ValueError at its first training
    forward wherever its attention TP group (the TP group, transformer MoE moe_layer.py:181
    d98e8a64) has more than one rank and sequence parallelism is off (moe_layer.py:636-640),
    at any ep, dispatcher or expert TP."""
    job = make_job("mixtral-8x7b", num_gpus=8)
    for lay in (
        Layout(tp=2, dp=4, ep=2, sequence_parallel=False),
        Layout(tp=2, dp=4, sequence_parallel=False),  # ep 1: the check reads no ep
        Layout(tp=2, dp=4, ep=4, etp=1, sequence_parallel=False),  # nor expert TP
        Layout(tp=2, dp=4, ep=4, sequence_parallel=False, moe_token_dispatcher_type="allgather"),
    ):
        v = broken(job, lay)["moe_tp_sp"]
        assert v.field == "parallel.sequence_parallel"
        assert "tensor_model_parallel_size 2" in v.message
    # with sequence parallelism, at tp 1, or without experts it runs
    assert_ok(job, Layout(tp=2, dp=4, ep=2, sequence_parallel=True))
    assert_ok(job, Layout(dp=8, ep=2))
    assert_ok(make_job(num_gpus=8), Layout(tp=2, dp=4, sequence_parallel=False))


def test_ep_needs_an_moe_model() -> None:
    job = make_job(num_gpus=8)
    v = broken(job, Layout(dp=8, ep=2))["ep_dense"]
    assert v.field == "parallel.ep"
    assert "expert_model_parallel_size (2)" in v.message


# --- context and sequence parallelism


def test_seq_length_must_split_over_two_cp() -> None:
    # load balancing splits the sequence into 2 x cp chunks: 4096 % 6 = 4
    job = make_job(num_gpus=3)
    v = broken(job, Layout(cp=3, dp=1))["seq_cp"]
    assert v.field == "parallel.cp"
    assert (
        v.message == "seq_length (4096) must be a multiple of 2 x context_parallel_size (2 x 3 = 6)"
    )
    assert_ok(make_job(num_gpus=4), Layout(cp=4, dp=1))  # 4096 % 8 == 0
    # seq 4100: 4100 % (2 x 2) == 0 but 4100 % (2 x 4) = 4
    assert_ok(make_job(num_gpus=2, seq_length=4100), Layout(cp=2, dp=1))
    assert "seq_cp" in broken(make_job(num_gpus=4, seq_length=4100), Layout(cp=4, dp=1))


def test_context_parallelism_needs_flash_attention() -> None:
    """Megatron's local attention asserts CP == 1 and Transformer Engine drops its unfused
    backend under CP: a job without flash attention cannot use cp > 1."""
    job = replace(make_job(num_gpus=4), flash_attention=False)
    v = broken(job, Layout(cp=4, dp=1))["cp_attention"]
    assert v.field == "parallel.cp"
    assert "training.flash_attention is false" in v.message
    assert_ok(job, Layout(dp=4))
    assert_ok(make_job(num_gpus=4), Layout(cp=4, dp=1))


def test_sequence_parallel_at_tp1_is_off_not_refused() -> None:
    """Megatron turns sequence parallelism off at tp 1 with a warning (arguments.py:1433-1439
    d98e8a64) and then asserts it on for TP overlap (:1441-1442): sequence parallelism alone
    at tp 1 runs, with TP overlap it does not."""
    job = make_job(num_gpus=8)
    assert_ok(job, Layout(dp=8, sequence_parallel=True))
    v = broken(job, Layout(dp=8, sequence_parallel=True, tp_comm_overlap=True))["tp_overlap_sp"]
    assert v.field == "parallel.tp_comm_overlap"
    assert "turns it off at tensor_model_parallel_size 1" in v.message
    assert_ok(job, Layout(tp=2, dp=4, sequence_parallel=True))


def test_param_gather_overlap_needs_grad_reduce_overlap() -> None:
    job = make_job(num_gpus=8)
    v = broken(job, Layout(dp=8, overlap_grad_reduce=False))["param_gather_overlap"]
    assert v.field == "parallel.overlap_param_gather"
    assert "needs overlap_grad_reduce = true" in v.message
    assert_ok(job, Layout(dp=8, overlap_grad_reduce=False, overlap_param_gather=False))
    # without a sharded optimizer there is no parameter all-gather to overlap
    assert_ok(job, Layout(dp=8, zero_stage=0, overlap_grad_reduce=False))


def test_ep_comm_overlap_conditions() -> None:
    """TransformerConfig asserts ep > 1, vpp with pp > 1, no full recompute and at most one MTP
    layer; before Blackwell TP or CP with it is only a warning in validate_args (NVIDIA runs
    DeepSeek-V3 at tp 2 with it), reported and not refused."""
    job = make_job("mixtral-8x7b", num_gpus=16)
    ov = Layout(dp=16, ep=8, ep_comm_overlap=True)
    assert_ok(job, ov)
    assert_ok(job, Layout(pp=2, vpp=2, dp=8, ep=8, ep_comm_overlap=True))
    v = broken(job, Layout(dp=16, ep_comm_overlap=True))["ep_overlap_ep"]
    assert v.field == "parallel.ep_comm_overlap"
    assert "expert_model_parallel_size > 1" in v.message
    v = broken(job, Layout(pp=2, dp=8, ep=8, ep_comm_overlap=True))["ep_overlap_vpp"]
    assert "pipeline_model_parallel_size (2)" in v.message
    assert "ep_overlap_recompute" in broken(job, ov.with_(recompute="full"))
    assert_ok(job, ov.with_(recompute="selective"))
    # recomputing the whole MoE layer is barred too; the allgather dispatcher cannot overlap
    moe_recompute = ov.with_(recompute="selective", recompute_modules=("moe",))
    assert "ep_overlap_recompute" in broken(job, moe_recompute)
    assert "ep_overlap_dispatcher" in broken(job, ov.with_(moe_token_dispatcher_type="allgather"))
    # Megatron-FSDP under the interleaved schedule: combined_1f1b.py (d98e8a64) asserts "EP
    # overlap 1F1B with FSDP is not supported for interleaved pipeline parallelism"; at pp 1 it
    # runs, and ZeRO 1 runs interleaved
    interleaved = Layout(pp=2, vpp=2, dp=8, ep=8, ep_comm_overlap=True)
    assert "ep_overlap_fsdp" in broken(job, interleaved.with_(zero_stage=3))
    assert "ep_overlap_fsdp" not in broken(job, interleaved.with_(zero_stage=1))
    assert "ep_overlap_fsdp" not in broken(job, ov.with_(zero_stage=3))
    tp2 = Layout(tp=2, dp=8, ep=8, sequence_parallel=True, ep_comm_overlap=True)
    assert_ok(job, tp2)
    (w,) = rules.warnings(job, tp2)
    assert w.rule == "connections" and "tp (2) or cp (1)" in w.message
    assert "h100-sxm-80gb" in w.message
    assert [
        w.rule for w in rules.warnings(job, Layout(cp=2, dp=8, ep=8, ep_comm_overlap=True))
    ] == ["connections"]
    # Blackwell does not need CUDA_DEVICE_MAX_CONNECTIONS=1 for TP: nothing to warn about
    b200 = make_job("mixtral-8x7b", num_gpus=16, gpu="b200-sxm-180gb")
    assert_ok(b200, tp2)
    assert rules.warnings(b200, tp2) == []
    # DeepSeek-V3 has one MTP layer: allowed; two are not
    two = catalog.get_model("deepseek-v3").model_copy(update={"mtp_num_layers": 2})
    v = broken(make_job(two, num_gpus=64), Layout(dp=64, ep=64, ep_comm_overlap=True))[
        "ep_overlap_mtp"
    ]
    assert "(model has 2)" in v.message
    assert "ep_overlap_mtp" not in broken(
        make_job("deepseek-v3", num_gpus=64), Layout(dp=64, ep=64, ep_comm_overlap=True)
    )


# --- batch


def test_global_batch_must_split_over_mbs_times_dp() -> None:
    job = make_job(num_gpus=8, global_batch_size=64)
    v = broken(job, Layout(dp=8, micro_batch_size=3))["batch"]
    assert v.field == "training.global_batch_size"
    # 64 % (3 x 8 = 24) = 16
    assert v.message == (
        "global_batch_size (64) must be a multiple of micro_batch_size x dp (3 x 8 = 24)"
    )
    assert_ok(job, Layout(dp=8, micro_batch_size=2))  # 64 % 16 == 0
    assert_ok(job, Layout(dp=8, micro_batch_size=8))  # 64 == 8 x 8: one micro-batch each


def test_learned_positions_cap_seq_length() -> None:
    arch = tiny(heads=8, max_position_embeddings=2048, position_embedding_type="learned_absolute")
    v = broken(make_job(arch, num_gpus=1, seq_length=4096), Layout())["max_positions"]
    assert v.field == "training.seq_length"
    assert "seq_length (4096)" in v.message and "max_position_embeddings (2048)" in v.message
    assert_ok(make_job(arch, num_gpus=1, seq_length=2048), Layout())
    # RoPE has no such cap
    rope = tiny(heads=8, max_position_embeddings=2048)
    assert_ok(make_job(rope, num_gpus=1, seq_length=4096), Layout())


def test_all_broken_rules_are_reported() -> None:
    # one layout, three independent faults: TP overlap at tp 1 (no sequence parallelism there,
    # arguments.py:1433-1442 d98e8a64), ep on a dense model, mbs 3 over gbs 64
    job = make_job(num_gpus=8)
    found = broken(job, Layout(dp=8, ep=2, tp_comm_overlap=True, micro_batch_size=3))
    assert set(found) == {"tp_overlap_sp", "ep_dense", "batch"}


# --- from the [parallel] table


def test_layout_from_section_derives_dp_and_sp() -> None:
    job = make_job(num_gpus=64)
    lay = layout_from_section(job, ParallelSection(tp=4, pp=2, cp=2), None)
    assert lay.dp == 4  # 64 / (4 x 2 x 2)
    assert lay.sequence_parallel is True  # default on when tp > 1
    assert layout_from_section(job, ParallelSection(tp=1, pp=1), None).sequence_parallel is False


def checked(job: Job, section: ParallelSection, path: Path | None) -> Layout:
    """The layout of a plan with this [parallel] table, once check_plan has passed it."""
    plan = check_plan(Plan(job, layout_from_section(job, section, path), path))
    assert plan.layout is not None
    return plan.layout


def test_check_plan_raises_one_input_error_with_every_violation() -> None:
    job = make_job(num_gpus=8)
    # two faults: ep on a dense model, TP overlap at tp 1 (sequence parallelism is off there,
    # arguments.py:1433-1442 d98e8a64)
    section = ParallelSection(ep=2, sequence_parallel=True, tp_comm_overlap=True)
    with pytest.raises(InputError) as info:
        checked(job, section, Path("plan.toml"))
    lines = str(info.value).splitlines()
    assert (
        "plan.toml: parallel.ep: expert_model_parallel_size (2) needs a mixture-of-experts model"
        in lines
    )
    assert any(line.startswith("plan.toml: parallel.tp_comm_overlap: ") for line in lines)
    assert len(lines) == 2


def test_sequence_parallel_at_tp1_reads_as_off() -> None:
    """A plan's sequence_parallel = true at tp 1 is read off, as Megatron turns it off there
    (arguments.py:1433-1439 d98e8a64): the plan passes check."""
    job = make_job(num_gpus=8)
    lay = checked(job, ParallelSection(sequence_parallel=True), Path("plan.toml"))
    assert lay.tp == 1 and not lay.sequence_parallel


def test_layout_from_section_dp_not_whole() -> None:
    job = make_job(num_gpus=8)
    with pytest.raises(InputError, match=r"num_gpus \(8\) must be a multiple of tp x pp x cp"):
        layout_from_section(job, ParallelSection(tp=3), None)


def test_check_plan_passes_a_clean_layout() -> None:
    job = make_job(num_gpus=16)
    lay = checked(job, ParallelSection(tp=2, pp=2, micro_batch_size=2), None)
    assert lay == Layout(tp=2, pp=2, dp=4, sequence_parallel=True, micro_batch_size=2)
