"""planner.search.rules: Megatron-LM's validation rules of expert parallelism, context parallelism
and the communication overlaps, broken and just kept.

Each "broken" case checks that the rule fires and that its message prints both values (Megatron's
style: "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (5)"); each
"kept" case is a layout just inside the rule and must break no rule at all. The oracle is the
integer arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace

from rules_cases import assert_ok, broken, make_job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.search import rules

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
