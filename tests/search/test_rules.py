"""planner.search.rules: Megatron-LM's validation rules of the layout's degrees, heads, query
groups, sequence parallelism, pipeline split, batch and positions, broken and just kept.

Each "broken" case checks that the rule fires and that its message prints both values (Megatron's
style: "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (5)"); each
"kept" case is a layout just inside the rule and must break no rule at all. The oracle is the
integer arithmetic in the comments.
"""

from __future__ import annotations

from rules_cases import assert_ok, broken, make_job

from planner.emit import megatron_pipeline
from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout


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
