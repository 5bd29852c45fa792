"""Reading Megatron-LM launch scripts into plans (`planner check --megatron-args`): the example
script, DP overlap, FSDP / FP8 / MoE flags, the pipeline split, virtual stages, block recompute
and bad arguments.

Oracles: Megatron-LM's own example script for Llama 3 8B (its shape gives the released
checkpoint's parameter count), its argument semantics (defaults, flags that need others), the
arithmetic of the pipeline split in comments, and the same model named from the zoo.
"""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import memory, params
from planner.search.rules import check_plan
from tests.inputs.megatron_scripts import LLAMA3_8B


def test_reads_the_llama3_example_into_the_zoo_model() -> None:
    doc = megatron_args.to_plan(LLAMA3_8B, "h100-sxm-80gb", 16)
    plan = parse_plan(doc)
    # the released Llama 3.1 8B checkpoint: 8,030,261,248 parameters (HF meta-llama/Llama-3.1-8B)
    assert params.params_total(plan.job.arch) == 8_030_261_248
    lay = plan.layout
    assert lay is not None
    assert (lay.tp, lay.pp, lay.dp, lay.micro_batch_size) == (2, 2, 4, 1)
    assert lay.sequence_parallel and lay.zero_stage == 1 and lay.recompute == "selective"
    assert plan.job.seq_length == 8192 and plan.job.global_batch_size == 128


def test_dp_overlap_flags_are_read() -> None:
    """Megatron overlaps DP traffic only when asked: a script without the flags is predicted
    with the reduction and the all-gather after the backward."""
    with_flags = parse_plan(megatron_args.to_plan(LLAMA3_8B, "h100-sxm-80gb", 16)).layout
    assert with_flags is not None
    assert with_flags.overlap_grad_reduce and with_flags.overlap_param_gather
    bare = LLAMA3_8B.replace("--overlap-grad-reduce --overlap-param-gather", "")
    plan = parse_plan(megatron_args.to_plan(bare, "h100-sxm-80gb", 16))
    assert plan.layout is not None
    assert not plan.layout.overlap_grad_reduce and not plan.layout.overlap_param_gather
    # only the reduction overlapped
    half = LLAMA3_8B.replace("--overlap-param-gather", "")
    lay = parse_plan(megatron_args.to_plan(half, "h100-sxm-80gb", 16)).layout
    assert lay is not None and lay.overlap_grad_reduce and not lay.overlap_param_gather
    # Megatron rejects a parameter-gather overlap without the reduction overlap; so does check
    bad = LLAMA3_8B.replace("--overlap-grad-reduce", "")
    with pytest.raises(InputError, match="overlap_param_gather"):
        check_plan(parse_plan(megatron_args.to_plan(bad, "h100-sxm-80gb", 16)))


def test_fsdp_and_fp8_and_moe_flags() -> None:
    text = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
        "--seq-length 4096 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 2048 "
        "--moe-layer-freq [0]*1+[1]*3 --expert-model-parallel-size 4 --use-megatron-fsdp "
        "--data-parallel-sharding-strategy optim_grads --fp8-format hybrid "
        "--ckpt-format fsdp_dtensor"
    )
    doc = megatron_args.to_plan(text, "h100-sxm-80gb", 8)
    plan = parse_plan(doc)
    assert plan.job.arch.moe_layers == [False, True, True, True]
    assert plan.job.precision == "fp8"
    assert plan.layout is not None and plan.layout.zero_stage == 2 and plan.layout.ep == 4
    # Megatron's default ffn_hidden_size without --swiglu is 4h
    assert plan.job.arch.ffn_hidden_size == 4096


def test_moe_dispatcher_defaults_to_megatrons() -> None:
    # Megatron's TransformerConfig defaults moe_token_dispatcher_type to "allgather"
    # (transformer_config.py:891 @ d98e8a64); a line naming none runs that one, not the plan
    # file's default; a named one is read as named, and a dense line gets no dispatcher.
    moe = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
        "--seq-length 4096 --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4"
    )
    doc = megatron_args.to_plan(moe, "h100-sxm-80gb", 8)
    assert doc["parallel"]["moe_token_dispatcher_type"] == "allgather"
    named = megatron_args.to_plan(moe + " --moe-token-dispatcher-type alltoall", "h100-sxm-80gb", 8)
    assert named["parallel"]["moe_token_dispatcher_type"] == "alltoall"
    dense = moe.replace("--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4", "")
    assert (
        "moe_token_dispatcher_type"
        not in megatron_args.to_plan(dense, "h100-sxm-80gb", 8)["parallel"]
    )


def test_the_deprecated_moe_layer_recompute_is_selective_moe_recompute() -> None:
    # TransformerConfig.__post_init__ (d98e8a64): --moe-layer-recompute sets the granularity to
    # selective and appends "moe" to the modules (default ["core_attn"]), and raises with full
    moe = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
        "--seq-length 4096 --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4 "
    )
    par = megatron_args.to_plan(moe + "--moe-layer-recompute", "h100-sxm-80gb", 8)["parallel"]
    assert (par["recompute"], par["recompute_modules"]) == ("selective", ["core_attn", "moe"])
    both = moe + "--moe-layer-recompute --recompute-granularity selective --recompute-modules moe"
    par = megatron_args.to_plan(both, "h100-sxm-80gb", 8)["parallel"]
    assert par["recompute_modules"] == ["moe"]
    full = moe + "--moe-layer-recompute --recompute-granularity full --recompute-method uniform"
    with pytest.raises(InputError, match="--moe-layer-recompute: Megatron refuses it"):
        megatron_args.to_plan(full, "h100-sxm-80gb", 8)


def test_uneven_first_and_last_stages() -> None:
    # Llama 3 405B style: one fewer layer on the first and last stage (126 layers, pp 16):
    # (126 - 7 - 7) / 14 = 8 layers on each middle rank
    text = (
        "--num-layers 126 --hidden-size 16384 --num-attention-heads 128 --vocab-size 128256 "
        "--seq-length 8192 --pipeline-model-parallel-size 16 "
        "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7"
    )
    doc = megatron_args.to_plan(text, "h100-sxm-80gb", 16)
    assert doc["parallel"]["pipeline_layers"] == (7,) + (8,) * 14 + (7,)


QWEN3_SPLIT = (
    "--num-layers 94 --hidden-size 1024 --num-attention-heads 16 --vocab-size 151936 "
    "--seq-length 4096 --pipeline-model-parallel-size 4 "
)


@pytest.mark.parametrize(
    ("flags", "vpp"),
    [
        # Megatron-LM validate_args: the embedding and the loss count as one layer each, so
        # (94 + 1 + 1) / 4 = 24 layers a rank, 24 / 1 = 24 virtual stages (the
        # Megatron-MoE-ModelZoo's Qwen3-235B line at pp 4, vpp 24) and 24 / 3 = 8
        (
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
            "--num-layers-per-virtual-pipeline-stage 1",
            24,
        ),
        (
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
            "--num-layers-per-virtual-pipeline-stage 3",
            8,
        ),
        ("--num-virtual-stages-per-pipeline-rank 6", 6),
    ],
)
def test_virtual_stages_count_the_accounted_embedding_and_loss(flags: str, vpp: int) -> None:
    doc = megatron_args.to_plan(QWEN3_SPLIT + flags, "h100-sxm-80gb", 8)
    assert doc["parallel"]["vpp"] == vpp


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        # 94 layers do not split over 4 ranks (Megatron asserts it), nor 96 / 4 = 24 into 5s
        ("--num-layers-per-virtual-pipeline-stage 1", "94 / 4 layers"),
        (
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
            "--num-layers-per-virtual-pipeline-stage 5",
            "96 / 4 layers",
        ),
        ("--num-layers-per-virtual-pipeline-stage 0", "expected a positive integer"),
        (
            "--num-layers-per-virtual-pipeline-stage 2 --decoder-first-pipeline-num-layers 22",
            "--num-virtual-stages-per-pipeline-rank there",
        ),
    ],
)
def test_layers_per_virtual_stage_must_divide_as_megatron_asks(flags: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        megatron_args.to_plan(QWEN3_SPLIT + flags, "h100-sxm-80gb", 8)


def test_without_group_query_attention_the_groups_are_ignored() -> None:
    # Megatron passes num_query_groups only with --group-query-attention (ecosystem.md 1.1)
    text = (
        "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --num-query-groups 2 "
        "--vocab-size 1000 --seq-length 128"
    )
    assert "num_query_groups" not in megatron_args.to_plan(text, "h100-sxm-80gb", 1)["model"]


def test_block_recompute_is_read_as_written_and_sits_between_none_and_full() -> None:
    base = (
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
        "--seq-length 128"
    )
    full = " --recompute-granularity full --recompute-num-layers 1 --recompute-method "
    doc = megatron_args.to_plan(base + full + "block", "h100-sxm-80gb", 1)
    assert doc["parallel"]["recompute"] == "full"
    assert doc["parallel"]["recompute_method"] == "block"
    assert doc["parallel"]["recompute_num_layers"] == 1

    def activations(text: str) -> float:
        plan = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 1))
        assert plan.layout is not None
        return memory.estimate(plan.job, plan.layout).stages[0].activations

    # block 1 of 4 layers: one layer keeps its input, three everything; uniform 1: all four keep
    # their inputs only (and one is rebuilt whole in the backward)
    none, block = activations(base), activations(base + full + "block")
    uniform = activations(base + full + "uniform")
    assert uniform < block < none


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "--hidden-size 512 --num-attention-heads 8 --vocab-size 10 --seq-length 8",
            "--num-layers",
        ),
        (
            # a misspelt layout flag: argparse (allow_abbrev=False) rejects it, and spelt right
            # it would change the layout
            "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8 --tensor-model-paralel-size 2",
            "did you mean --tensor-model-parallel-size",
        ),
        (
            "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8 --pipeline_model_parallel_size 2",
            "did you mean --pipeline-model-parallel-size",
        ),
        (
            "--num-layers x --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8",
            "'x'",
        ),
        (
            # a zero degree (no --global-batch-size: its default divides by the degrees)
            "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8 --tensor-model-parallel-size 0",
            "--tensor-model-parallel-size: expected a positive integer \\(got 0\\)",
        ),
        (
            "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8 --micro-batch-size -1",
            "--micro-batch-size: expected a positive integer",
        ),
        (
            # validate_args sets sequence_parallel False at tp 1, then asserts it for the overlap
            # (the Megatron-MoE-ModelZoo's bf16 lines at tp 1 add --tp-comm-overlap)
            "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 10 "
            "--seq-length 8 --sequence-parallel --tp-comm-overlap",
            "--tp-comm-overlap: at --tensor-model-parallel-size 1",
        ),
    ],
)
def test_bad_arguments(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        megatron_args.to_plan(text, "h100-sxm-80gb", 8, "train.sh")


def test_memory_of_script_equals_memory_of_plan() -> None:
    doc = megatron_args.to_plan(LLAMA3_8B, "h100-sxm-80gb", 16)
    plan = parse_plan(doc)
    assert plan.layout is not None
    a = memory.estimate(plan.job, plan.layout).peak
    zoo_doc = dict(doc, model={"name": "llama3.1-8b"})
    zoo = parse_plan(zoo_doc)
    assert zoo.layout is not None
    # same shape; the script's max_position_embeddings differs, which RoPE models do not store
    assert memory.estimate(zoo.job, zoo.layout).peak == pytest.approx(a)
