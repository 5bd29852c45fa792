"""Reading Megatron-LM launch scripts into plans (`planner check --megatron-args`).

Oracles: Megatron-LM's own example script for Llama 3 8B (its shape gives the released
checkpoint's parameter count), its argument semantics (defaults, flags that need others), the
arithmetic of the pipeline split in comments, and the same model named from the zoo."""

from __future__ import annotations

import re

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import memory, params
from planner.search.rules import check_plan

# Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh (ecosystem.md 1.6), with variables and
# continuations as such scripts have them.
LLAMA3_8B = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
TP=2
PP=2
MODEL_ARGS=(
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
  --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128
  --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear
  --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192  # model shape
  --position-embedding-type rope
)
torchrun --nproc_per_node 8 pretrain_gpt.py "${MODEL_ARGS[@]}" \\
  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP --sequence-parallel \\
  --micro-batch-size 1 --global-batch-size 128 --bf16 \\
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
  --recompute-granularity selective --lr 3e-4 --data-path "/data/my corpus"
"""
NO_NAN = "--no-check-for-nan-in-loss-and-grad"


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


# --- issue 21: what Megatron-LM's functional-test lines say

SMALL = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 "
)


def read(text: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "train.sh")


@pytest.mark.parametrize(
    ("flags", "flash"),
    [
        # megatron_rules.md section 10: TE's unfused backend and MCore's own DotProductAttention
        # (--transformer-impl local, --attention-backend local with --spec local) keep the s x s
        # scores; flash, fused and auto (the default) keep none
        ("", True),
        ("--attention-backend auto", True),
        ("--attention-backend flash", True),
        ("--attention-backend fused", True),
        ("--attention-backend unfused", False),
        ("--transformer-impl local", False),
        ("--transformer-impl local --spec local --attention-backend local", False),
        ("--transformer-impl transformer_engine", True),
    ],
)
def test_attention_backend_decides_flash_attention(flags: str, flash: bool) -> None:
    plan = parse_plan(read(SMALL + flags).doc)
    assert plan.job.flash_attention is flash


def test_local_backend_needs_the_local_spec() -> None:
    # Megatron-LM arguments.py:436-437 asserts --spec local with --attention-backend local
    with pytest.raises(InputError, match="--attention-backend: 'local' needs --spec local"):
        read(SMALL + "--attention-backend local")


def test_unfused_attention_stores_the_scores() -> None:
    """The issue's 'about a third low': unfused runs keep softmax, its dropout mask and output
    per layer, 5 a s^2 b bytes (Korthikanti et al. 2022 Table 2), which flash attention does not.
    One stage, tp 1, one micro-batch in flight: the activations differ by at least 4 layers x
    5 a s^2 b (allocator overhead on top)."""

    def activations(flags: str) -> float:
        plan = parse_plan(read(SMALL + "--global-batch-size 1 " + flags, gpus=1).doc)
        assert plan.layout is not None
        return memory.estimate(plan.job, plan.layout).stages[0].activations

    a, s, b, layers = 16, 4096, 1, 4
    scores = layers * 5 * a * s * s * b
    assert activations("--attention-backend unfused") - activations("") >= scores


def test_hierarchical_context_parallel_sizes_multiply_to_cp() -> None:
    # megatron_rules.md section 11: their product must equal cp (args.py:580-582); the flag takes
    # one int per word (nargs="+", type=int: megatron_flags.txt), so argparse refuses "2 2" as one
    # word and "2,2" (int() of either raises: "invalid int value")
    doc = read(SMALL + "--context-parallel-size 4 --hierarchical-context-parallel-sizes 2 2")
    assert doc.doc["parallel"]["cp"] == 4
    for one_word in ("'2 2'", "2,2"):
        with pytest.raises(InputError, match="--hierarchical-context-parallel-sizes"):
            read(
                SMALL
                + f"--context-parallel-size 4 --hierarchical-context-parallel-sizes {one_word}"
            )
    with pytest.raises(InputError, match=r"product \(8\) must equal --context-parallel-size \(4\)"):
        read(SMALL + "--context-parallel-size 4 --hierarchical-context-parallel-sizes 2 4")


def test_precision_flags() -> None:
    assert read(SMALL).doc["training"]["precision"] == "bf16"
    fp16 = read(SMALL.replace("--bf16", "--fp16"))
    # arguments.py:1195-1197 (d98e8a64): --fp16 makes params_dtype torch.half
    assert fp16.doc["training"]["precision"] == "fp16"
    assert any("--fp16" in n for n in fp16.notes) and not fp16.not_modelled
    # neither: Megatron's params_dtype stays torch.float (arguments.py:1194): precision fp32
    fp32 = read(SMALL.replace("--bf16", ""))
    assert fp32.doc["training"]["precision"] == "fp32" and not fp32.not_modelled
    assert any("fp32 training" in n for n in fp32.notes)
    # the same with the LM head in MXFP8, whose flag once stood in the same if-chain: FP8 GEMMs
    # on fp32 parameters (params_dtype torch.float), modelled
    mx = "--fp8-format e4m3 --fp8-recipe mxfp8 --fp8-output-proj"
    fp8_fp32 = read(SMALL.replace("--bf16", mx))
    assert fp8_fp32.doc["training"]["params_dtype"] == "fp32" and not fp8_fp32.not_modelled
    assert "params_dtype" not in read(SMALL + mx).doc["training"]  # bf16 parameters
    assert not read(SMALL + mx).not_modelled


def test_megatron_fsdp_gradients_default_to_the_parameter_dtype() -> None:
    """DistributedDataParallelConfig.megatron_fsdp_main_grads_dtype None ('auto') resolves to
    the parameters' dtype (megatron_fsdp/param_and_grad_buffer.py _resolve_group_grad_dtype)."""
    fsdp = SMALL + (
        "--use-megatron-fsdp --ckpt-format fsdp_dtensor "
        "--data-parallel-sharding-strategy optim_grads_params "
    )
    assert read(fsdp).doc["training"]["main_grad_dtype"] == "bf16"
    assert (
        read(fsdp + "--megatron-fsdp-main-grads-dtype auto").doc["training"]["main_grad_dtype"]
        == "bf16"
    )
    fp32 = read(fsdp + "--megatron-fsdp-main-grads-dtype fp32").doc["training"]
    assert "main_grad_dtype" not in fp32  # the plan's default, fp32
    assert "main_grad_dtype" not in read(SMALL + "--use-distributed-optimizer").doc["training"]
    # the precision-aware optimizer's --main-grads-dtype bf16; --grad-reduce-in-bf16
    aware = SMALL + "--use-distributed-optimizer --use-precision-aware-optimizer "
    assert read(aware + "--main-grads-dtype bf16").doc["training"]["main_grad_dtype"] == "bf16"
    assert read(SMALL + "--grad-reduce-in-bf16").doc["training"]["main_grad_dtype"] == "bf16"


def test_batch_size_schedule_is_read_at_its_largest_batch() -> None:
    # the release cases: "0:384 200B:768 400B:1152" (THRESHOLD:BATCH, K/M/B/T suffixes;
    # num_microbatches_calculator.py) -> the largest batch, 1152
    text = SMALL + "--step-batch-size-schedule '0:384 200B:768 400B:1152'"
    assert read(text).doc["training"]["global_batch_size"] == 1152
    # Megatron raises ValueError for both at once (arguments.py "Batch size")
    with pytest.raises(InputError, match="--global-batch-size"):
        read(text + " --global-batch-size 64")
    with pytest.raises(InputError, match="THRESHOLD:BATCH"):
        read(SMALL + "--step-batch-size-schedule 0-384")


def test_moe_layer_freq_as_the_functional_tests_write_it() -> None:
    # moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed writes --moe-layer-freq ([0]*1+[1]*15):
    # one word with parentheses
    text = SMALL.replace("--num-layers 4", "--num-layers 16") + (
        "--num-experts 8 --moe-router-topk 2 --moe-layer-freq ([0]*1+[1]*15)"
    )
    arch = parse_plan(read(text).doc).job.arch
    assert arch.moe_layers == [False] + [True] * 15


def test_window_flags() -> None:
    # Megatron-LM d98e8a64: --window-size is tuple_type ("127,0" or "(127,0)"), -1 an infinite
    # side; --window-attn-skip-freq takes --moe-layer-freq's int or list expression
    arch = parse_plan(read(SMALL + "--window-size 127,0 --window-attn-skip-freq 2").doc).job.arch
    assert (arch.window_size, arch.window_attn_skip_freq) == (127, 2)
    listed = read(SMALL + "--window-size (63,0) --window-attn-skip-freq [1,1,1,0]").doc["model"]
    assert (listed["window_size"], listed["window_attn_skip_freq"]) == (63, [1, 1, 1, 0])
    # "-1,0" after a space is an option to argparse (not its negative-number pattern): "=" form
    assert "window_size" not in read(SMALL + "--window-size=-1,0").doc["model"]
    for bad in ("128,5", "128", "a,b"):
        with pytest.raises(InputError, match="--window-size"):
            read(SMALL + f"--window-size {bad}")


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        ("--position-embedding-type yarn", {"position_embedding_type": "rope"}),
        ("--use-rotary-position-embeddings", {"position_embedding_type": "rope"}),
        ("", {"position_embedding_type": "learned_absolute"}),  # Megatron's default
        # argument_utils.py: --quick-geglu sets gated_linear_unit with quick_gelu
        ("--quick-geglu", {"gated_linear_unit": True, "activation": "geglu"}),
        ("--swiglu", {"gated_linear_unit": True, "activation": "swiglu"}),
        ("--squared-relu", {"activation": "squared_relu"}),
    ],
)
def test_model_switches(flags: str, fields: dict[str, object]) -> None:
    model = read(SMALL + flags).doc["model"]
    assert {k: model[k] for k in fields} == fields


def test_unfused_swiglu() -> None:
    # argument_utils.py: with --swiglu, bias_activation_fusion = --bias-swiglu-fusion (default on)
    training = read(SMALL + "--swiglu --no-bias-swiglu-fusion").doc["training"]
    assert training["fused_swiglu"] is False
    assert "fused_swiglu" not in read(SMALL + "--swiglu").doc["training"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (SMALL + "--encoder-num-layers 12", "cannot be given with --num-layers"),
        (SMALL + "--hybrid-layer-pattern M-X*-", "--hybrid-layer-pattern: 'X' in the main"),
        ("trainer.devices=8 model.config.num_layers=12 data.seq_length=2048", "name no model"),
        ("trainer_devices=8 model_config.num_layers=12", "NeMo-style"),
        ("", "no Megatron-LM flags"),
        (SMALL.replace("--num-layers 4 ", "") + "--use-checkpoint-args", "from the checkpoint"),
        (SMALL + "--tensor-model-parallel-size ${TP}", "'${TP}' is a shell variable"),
        # argparse's moe_freq_type evals it: a SyntaxError, refused before it is read
        (SMALL + "--moe-layer-freq ([0]*1+[1]*3", "--moe-layer-freq: expected an integer or a"),
    ],
)
def test_lines_that_cannot_be_read_say_why(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        read(text)


def test_not_modelled_flags_are_noted_only_off_their_defaults() -> None:
    assert not read(SMALL + "--optimizer adam --main-params-dtype fp32").not_modelled
    # (16-bit main weights only with the precision-aware optimizer: OptimizerConfig asserts it)
    aware = "--use-precision-aware-optimizer --use-distributed-optimizer "
    notes = read(SMALL + aware + "--optimizer sgd --main-params-dtype fp16").not_modelled
    # (--main-params-dtype fp16 is modelled: planner.model.adam_step; no note for it)
    assert [n.split(":")[0] for n in notes] == ["--optimizer"]
    # a switch is off by default: noted wherever it is given (Megatron-FSDP's FP8 transposes,
    # megatron/core/distributed/fsdp/src/README.md: ~1 byte per parameter kept)
    notes = read(SMALL + "--keep-fp8-transpose-cache").not_modelled
    assert [n.split(":")[0] for n in notes] == ["--keep-fp8-transpose-cache"]
    assert "under-estimated" in notes[0]
    # optimizer states in host memory are modelled (tests/model/test_optimizer_offload.py)
    line = SMALL + "--use-distributed-optimizer --use-precision-aware-optimizer "
    assert not read(line + "--optimizer-cpu-offload").not_modelled


def test_optimizer_instances_and_the_native_loss_fusion_are_read() -> None:
    training = read(SMALL).doc["training"]
    assert "optimizer_instances" not in training and "compiled_loss_fusion" not in training
    line = SMALL + "--num-distributed-optimizer-instances 2 --cross-entropy-loss-fusion"
    training = read(line).doc["training"]
    assert training["optimizer_instances"] == 2 and training["compiled_loss_fusion"]
    # the impl without --cross-entropy-loss-fusion chooses nothing: Megatron's unfused loss
    te = read(SMALL + "--cross-entropy-fusion-impl te").doc["training"]
    assert te["loss_fusion"] is False and "compiled_loss_fusion" not in te


def test_the_fused_te_loss_is_read_with_the_megatron_lm_that_refuses_it_named() -> None:
    """Megatron-LM asserts --cross-entropy-loss-fusion off with --cross-entropy-fusion-impl te
    from 168cb15d (2026-06-03; d98e8a64 arguments.py, benchmarks/data/megatron_rules.md section
    13); the Megatron-MoE-ModelZoo scripts of May 2026 ask for it on the Megatron-LM of their
    day. The line is read as it ran there (TE's in-place kernel: no compiled fusion's extra fp32
    copy) and the reading names the commit that refuses it; native or no impl says nothing."""
    reading = read(SMALL + "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    training = reading.doc["training"]
    assert "compiled_loss_fusion" not in training and "loss_fusion" not in training
    (note,) = [n for n in reading.notes if "--cross-entropy-fusion-impl te" in n]
    assert "168cb15d" in note and "native" in note
    for impl in ("native", "te"):
        line = SMALL + ("--cross-entropy-loss-fusion " if impl == "native" else "")
        quiet = read(line + f"--cross-entropy-fusion-impl {impl}")
        assert not [n for n in quiet.notes if "cross-entropy" in n]


def test_the_rl_steps_kv_cache_and_separate_inference_model_are_read() -> None:
    rl = read(SMALL + "--perform-rl-step").doc["training"]
    assert rl["rl_kv_cache_gib"] == 40.0 and "rl_inference_parallel" not in rl  # the defaults
    line = SMALL + (
        "--perform-rl-step --inference-dynamic-batching-buffer-size-gb 20 "
        "--tensor-model-parallel-size 8 --rl-inference-tensor-model-parallel-size 4"
    )
    rl = read(line).doc["training"]
    assert rl["rl_kv_cache_gib"] == 20.0
    assert rl["rl_inference_parallel"] == [4, 1, 1, 8]  # (tp, pp, ep, etp): the rest training's


@pytest.mark.parametrize(
    ("extra", "graphs", "impl"),
    [
        ("", False, None),
        ("--cuda-graph-impl none", False, None),
        ("--cuda-graph-impl local", True, "local"),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-scope attn",
            True,
            "transformer_engine",
        ),
        (f"--cuda-graph-impl full_iteration {NO_NAN}", True, "full_iteration"),
        ("--enable-cuda-graph", True, "local"),  # deprecated: local (arguments.py d98e8a64)
        ("--external-cuda-graph", True, "transformer_engine"),  # deprecated: transformer_engine
        # the deprecated full_iteration region: arguments.py migrates it to the implementation
        (
            f"--cuda-graph-impl local --cuda-graph-modules full_iteration {NO_NAN}",
            True,
            "full_iteration",
        ),
    ],
)
def test_cuda_graph_flags_are_read(extra: str, graphs: bool, impl: str | None) -> None:
    """Megatron-LM d98e8a64 arguments.py: --cuda-graph-impl none | local | transformer_engine |
    full_iteration, kept as the job's (`Job.cuda_graph_impl`); --enable-cuda-graph and
    --external-cuda-graph set local and transformer_engine."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    plan = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))
    assert plan.job.cuda_graphs is graphs and plan.job.cuda_graph_impl == impl


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        # validate_args: "--no-check-for-nan-in-loss-and-grad should be set with
        # --cuda-graph-impl=full_iteration for training"
        ("--cuda-graph-impl full_iteration", "--cuda-graph-impl"),
        ("--cuda-graph-impl local --cuda-graph-modules full_iteration", "--cuda-graph-impl"),
        # TransformerConfig: fine_grained_offloading_max_inflight_offloads "must be a
        # non-negative integer when using fine-grained activation offloading with
        # full-iteration CUDA graphs"
        (
            f"--cuda-graph-impl full_iteration {NO_NAN} --fine-grained-activation-offloading "
            "--offload-modules core_attn",
            "--fine-grained-offloading-max-inflight-offloads",
        ),
        (
            f"--cuda-graph-impl full_iteration {NO_NAN} --fine-grained-activation-offloading "
            "--offload-modules core_attn --fine-grained-offloading-max-inflight-offloads -1",
            "--fine-grained-offloading-max-inflight-offloads",
        ),
    ],
)
def test_what_megatron_asserts_of_a_full_iteration_graph_exits_2(extra: str, flag: str) -> None:
    """Megatron-LM d98e8a64 refuses these lines at start-up; planner said they fit."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match=re.escape(flag)):
        megatron_args.to_plan(text, "h100-sxm-80gb", 16)
    # fp16's dynamic loss scaling turns the NaN check off itself (validate_args, before it)
    if "offload" not in extra:
        fp16 = text.replace("--bf16", "--fp16")
        assert parse_plan(megatron_args.to_plan(fp16, "h100-sxm-80gb", 16)).job.cuda_graphs
    else:  # 0 (a join after every copy) is non-negative
        inflight = "--fine-grained-offloading-max-inflight-offloads"
        fixed = extra.split(f" {inflight}")[0] + f" {inflight} 0"
        fixed_text = LLAMA3_8B.replace("--bf16", f"--bf16 {fixed}")
        plan = parse_plan(megatron_args.to_plan(fixed_text, "h100-sxm-80gb", 16))
        assert plan.require_layout().offload_modules == ("core_attn",)


@pytest.mark.parametrize(
    ("extra", "modules"),
    [
        ("--cuda-graph-impl local", ()),
        ("--cuda-graph-impl local --cuda-graph-modules full", ()),
        ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn", ("attn",)),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router "
            "moe_preprocess",
            ("attn", "moe_router", "moe_preprocess"),
        ),
    ],
)
def test_cuda_graph_modules_are_read(extra: str, modules: tuple[str, ...]) -> None:
    """--cuda-graph-modules (or the deprecated --cuda-graph-scope) names the regions captured;
    "full" (the default) the whole layer, which the job keeps as ()."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    plan = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))
    assert plan.job.cuda_graphs and plan.job.cuda_graph_modules == modules


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ("--cuda-graph-impl local --cuda-graph-modules attention", "--cuda-graph-modules"),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-modules moe_preprocess",
            "moe_preprocess",
        ),
    ],
)
def test_bad_cuda_graph_modules_are_bad_input(extra: str, flag: str) -> None:
    """A region Megatron-Core does not know, and moe_preprocess without moe_router under
    Transformer Engine's graphs (transformer_config.py:2821-2824 d98e8a64 asserts it; the local
    implementation appends the router first, :2806-2816), are refused naming what is wrong."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match=flag):
        parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))


@pytest.mark.parametrize(
    "extra",
    ["--cuda-graph-impl always", "--enable-cuda-graph --cuda-graph-impl local"],
)
def test_bad_cuda_graph_flags_are_bad_input(extra: str) -> None:
    """An impl Megatron does not accept, and the deprecated flag with the new one (Megatron
    asserts it), are refused naming the flag."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match="--cuda-graph-impl"):
        megatron_args.to_plan(text, "h100-sxm-80gb", 16)


def test_deterministic_mode_on_blackwell_is_noted_not_modelled() -> None:
    # Transformer Engine runs no cuDNN fused attention backward in deterministic mode on
    # Blackwell before cuDNN 9.18.1 (TransformerEngine PRs #2130, #2584): the step time is not
    # modelled there, and check says so; on Hopper cuDNN's deterministic backward runs
    line = LLAMA3_8B.replace("--bf16", "--bf16 --deterministic-mode")
    gb200 = megatron_args.read(line, "gb200-nvl72", 16)
    assert any(n.startswith("--deterministic-mode") for n in gb200.not_modelled)
    assert "--deterministic-mode" not in gb200.ignored
    h100 = megatron_args.read(line, "h100-sxm-80gb", 16)
    assert not any(n.startswith("--deterministic-mode") for n in h100.not_modelled)


def test_nvfp4_lines_are_read_and_a_custom_quantiser_is_refused() -> None:
    # Megatron-LM d98e8a64: --fp4-format e2m1 with --fp4-recipe nvfp4 (TransformerConfig's
    # default) or custom (a user quantiser factory planner cannot know)
    nvfp4 = LLAMA3_8B.replace("--bf16", "--bf16 --fp4-format e2m1 --fp4-param-gather")
    job = parse_plan(megatron_args.to_plan(nvfp4, "b200-sxm-180gb", 16)).job
    assert job.precision == "fp4" and job.fp4_param_gather
    custom = nvfp4.replace("--fp4-format e2m1", "--fp4-format e2m1 --fp4-recipe custom")
    with pytest.raises(InputError, match="--fp4-recipe: 'custom'"):
        megatron_args.to_plan(custom, "b200-sxm-180gb", 16)
    # Hopper has no FP4 tensor cores: the line is bad input for that GPU, named
    with pytest.raises(InputError, match=r'training\.precision: "fp4"'):
        parse_plan(megatron_args.to_plan(nvfp4, "h100-sxm-80gb", 16))


@pytest.mark.parametrize(
    ("prefix", "expandable", "margin"),
    [
        ("", None, None),
        # a launch script's exports (the Megatron-MoE-ModelZoo's ENV_VARS, Megatron-Bridge's
        # recipes), and PyTorch's newer name for the allocator's settings
        ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n", True, None),
        (
            "PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.6,expandable_segments:True ",
            True,
            None,
        ),
        ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False\n", None, None),
        # MLPerf's DeepSeek-V3 configs: NVTE_EXT_MARGIN_SM=16
        ("NVTE_EXT_MARGIN_SM=16\n", None, 16),
    ],
)
def test_the_runs_environment_is_read(prefix: str, expandable: bool | None, margin: int) -> None:
    training = megatron_args.to_plan(prefix + SMALL, "h100-sxm-80gb", 8)["training"]
    assert training.get("expandable_segments") == expandable
    assert training.get("gemm_sm_margin") == margin


def test_a_margin_that_is_no_count_is_bad_input() -> None:
    with pytest.raises(InputError, match="NVTE_EXT_MARGIN_SM: expected a count of SMs"):
        megatron_args.to_plan("NVTE_EXT_MARGIN_SM=x\n" + SMALL, "h100-sxm-80gb", 8)


def test_a_yaml_cfg_line_is_refused_because_megatron_ignores_its_flags() -> None:
    # Megatron-LM d98e8a64 parse_args: with --yaml-cfg, args = load_yaml(path), which warns
    # "argparse arguments will be ignored": the line's own flags (here a whole model) do not run
    with pytest.raises(InputError, match=r"--yaml-cfg cfg\.yaml: Megatron-LM then takes every"):
        megatron_args.to_plan(LLAMA3_8B + " --yaml-cfg cfg.yaml", "h100-sxm-80gb", 8)


# --- a file that launches more than one Python script

EVAL = "torchrun --nproc_per_node 1 tasks/main.py --task LAMBADA --tensor-model-parallel-size 1"
CONVERT = "python tools/checkpoint/convert.py --target-tensor-parallel-size 1 --load /ckpt"


def test_the_training_command_is_read_alone() -> None:
    """A checkpoint conversion before training and an evaluation after it: each their own
    flags (an evaluation at tp 1 with mbs 8 was read into the training run's layout, and a
    converter's flag refused as a misspelt Megatron-LM flag); the training command is read
    alone, noted. The oracle: the training command by itself."""
    alone = read(LLAMA3_8B)
    both = read(f"{CONVERT}\n{LLAMA3_8B}\n{EVAL} --micro-batch-size 8 --seq-length 2048\n")
    assert both.doc == alone.doc
    assert any("pretrain_gpt.py's flags alone" in n and "main.py" in n for n in both.notes)
    twice = read(f"{LLAMA3_8B}\n{LLAMA3_8B}")  # the same run launched again is one run
    assert twice.doc == alone.doc


def test_two_different_training_commands_are_refused() -> None:
    other = LLAMA3_8B.replace("--micro-batch-size 1", "--micro-batch-size 2")
    with pytest.raises(InputError, match="launches 2 training commands with different flags"):
        read(f"{LLAMA3_8B}\n{other}")


def test_a_module_run_with_dash_m_is_the_script() -> None:
    """`python -m torch.distributed.run ... -m examples.mimo.pretrain_mimo` launches that
    module (a launcher module is not the script): the GPU count is the launcher's, the flags
    the module's; the MIMO example's heterogeneous grids (--llm-tp, --encoder-tp: the language
    model and the encoder on ranks of their own) are refused, not read as tp 1."""
    line = LLAMA3_8B.split("torchrun --nproc_per_node 8 pretrain_gpt.py ")[1]
    model = LLAMA3_8B.split("torchrun")[0]
    text = f"{model}python -m torch.distributed.run --nproc-per-node 8 -m pretrain_gpt {line}"
    got = megatron_args.read(text, "h100-sxm-80gb", None, "train.sh")
    assert got.doc == read(LLAMA3_8B).doc
    hetero = f"{model}torchrun --nproc-per-node 8 -m examples.mimo.pretrain_mimo {line} --llm-tp 2"
    with pytest.raises(InputError, match=r"--llm-tp: examples/mimo/pretrain_mimo\.py places"):
        megatron_args.read(hetero, "h100-sxm-80gb", 8, "train.sh")


def test_the_multimodal_examples_models_are_refused() -> None:
    """Megatron-LM's examples/multimodal/train.py (the NVLM scripts) builds its models from
    --language-model-type / --vision-model-type (examples/multimodal/config.py): read as
    pretrain_vlm.py's LLaVA, a Qwen2 72B + InternViT-6B run was sized with a second 72B model as
    its vision encoder (323 GiB); refused, naming the flag."""
    line = LLAMA3_8B.replace("pretrain_gpt.py", "examples/multimodal/train.py")
    text = line.rstrip() + " --language-model-type llama3_8b --vision-model-type clip\n"
    with pytest.raises(InputError, match="--language-model-type: Megatron-LM's examples/multi"):
        read(text)
