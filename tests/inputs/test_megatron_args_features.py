"""Reading Megatron-LM's functional-test lines (issue 21): the attention backend, context
parallelism, precision, Megatron-FSDP gradients, batch schedules, MoE layer frequency, windows,
model switches, optimizer instances, the loss fusions, and lines or flags that are noted.

Oracles: Megatron-LM d98e8a64's argument semantics (arguments.py: defaults, flags that need
others, what validate_args asserts), restated in each test, and hand arithmetic in comments.
"""

from __future__ import annotations

import re

import pytest
from megatron_scripts import SMALL, read

from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import memory

# --- issue 21: what Megatron-LM's functional-test lines say


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
        # argument_utils.py:323-326: --quick-geglu sets gated_linear_unit with quick_gelu (a dense
        # MLP fuses it only without --no-bias-gelu-fusion's fused kernel: mlp.py:317-318)
        (
            "--quick-geglu --no-bias-gelu-fusion",
            {"gated_linear_unit": True, "activation": "quick_geglu"},
        ),
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


HYBRID_CP = "--context-parallel-size 2 --hybrid-context-parallel --calculate-per-token-loss "


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        # Megatron-LM d98e8a64 arguments.py:1444-1449 asserts each beside --hybrid-context-parallel
        # (the dataloader type defaults to single, :1254-1255)
        ("--pipeline-model-parallel-size 2", "pipeline parallelism"),
        ("--enable-cuda-graph", "--enable-cuda-graph"),
        ("--use-megatron-fsdp --ckpt-format fsdp_dtensor", "--use-megatron-fsdp"),
        ("--dataloader-type cyclic", "--dataloader-type single"),
    ],
)
def test_what_validate_args_refuses_beside_hybrid_context_parallel_exits_2(
    extra: str, why: str
) -> None:
    assert read(SMALL + HYBRID_CP).doc["parallel"]["cp"] == 2  # the line alone is read (noted)
    with pytest.raises(InputError, match=f"--hybrid-context-parallel: .*{re.escape(why)}"):
        read(SMALL + HYBRID_CP + extra)
    without = HYBRID_CP.replace("--calculate-per-token-loss ", "")
    with pytest.raises(InputError, match="needs --calculate-per-token-loss"):
        read(SMALL + without)
