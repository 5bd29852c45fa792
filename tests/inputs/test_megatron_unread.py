"""Megatron-LM flags the reader does not read but that change memory or time: a line with one is
noted (or refused) naming the flag, and with Megatron's default value is not; NeMo's overrides of
the same settings share the text.

Oracles: Megatron-LM d98e8a64's source, cited per case (the line that adds each flag is in
planner/inputs/megatron_flags.txt; what it changes at the cited lines), and NeMo-Run's convention
that a switch's key takes True / False (`nemo_keys.TRUE_WORDS`)."""

from __future__ import annotations

import pytest
from nemo_lines import HEAD
from nemo_lines import read as nemo_read

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_unread import NOT_MODELLED, REFUSED, TIME_ONLY, memory_notes
from planner.inputs.nemo_unread import NOTED

LINE = (
    "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
    "--seq-length 128 --micro-batch-size 1 --bf16 "
)


def _read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(LINE + extra, "h100-sxm-80gb", 8)


@pytest.mark.parametrize(
    "flag",
    [
        # arguments.py:2899 store_false dest bias_dropout_fusion: present = the unfused add
        "--no-bias-dropout-fusion",
        # arguments.py:2892: the unfused bias-GELU
        "--no-bias-gelu-fusion",
        # common_config.py:152 -> core jit.py:27-30: jit_fuser becomes a no-op decorator
        "--disable-jit-fuser",
        # arguments.py:3171: NCCL user buffers for the DP / FSDP buffers
        "--use-nccl-ub",
        # common_config.py:112: SHARP for the data-parallel groups
        "--use-sharp",
        # arguments.py:2920, training.py:4449: the optimizer step in a CUDA graph
        "--optimizer-cuda-graph",
        # training_config.py:477 -> checkpointing.py:2355-2362: tp / pp / ep from the checkpoint
        "--use-mp-args-from-checkpoint-args",
    ],
)
def test_a_switch_that_changes_memory_or_time_is_noted(flag: str) -> None:
    reading = _read(flag)
    assert any(n.startswith(f"{flag}: ") for n in reading.not_modelled)
    assert flag not in reading.ignored  # noted, not listed as harmless


@pytest.mark.parametrize(
    ("flag", "default", "other"),
    [
        # transformer_config.py:1298 mlp_chunks_for_training: int = 1
        ("--mlp-chunks-for-training", "1", "4"),
        # training_config.py:48 empty_unused_memory_level = 0
        ("--empty-unused-memory-level", "0", "2"),
        # arguments.py:3075 choices bf16 / fp32: bf16 is a bf16 run's output-layer input dtype
        ("--output-logit-dtype", "bf16", "fp32"),
    ],
)
def test_a_value_is_noted_but_not_the_default(flag: str, default: str, other: str) -> None:
    noted = _read(f"{flag} {other}")
    assert any(n.startswith(f"{flag}: ") for n in noted.not_modelled)
    plain = _read(f"{flag} {default}")
    assert not any(flag in n for n in plain.not_modelled)
    assert flag in plain.ignored


def test_a_line_without_them_has_no_such_note() -> None:
    # none of the flags above is on the line: nothing of NOT_MODELLED is noted
    reading = _read("")
    assert not any(n.split(":")[0] in NOT_MODELLED for n in reading.not_modelled)


def test_a_distillation_teacher_is_noted() -> None:
    # post_training utils.py:28-30 turns ModelOpt on; model_builder.py:474-494 builds the
    # teacher from that checkpoint's config beside the student (a note, not a refusal: Megatron's
    # functional tests run such lines, tests/inputs/test_megatron_functional_lines.py)
    flag = "--export-kd-teacher-load"
    reading = _read(f"{flag} /ckpt/teacher")
    assert any(n.startswith(f"{flag}: ") for n in reading.not_modelled)


def test_a_forward_only_run_is_refused() -> None:
    # training.py:2353-2354: forward only; arguments.py:1839-1844: distributed optimizer off
    with pytest.raises(InputError, match=r"--freeze-all-layers: planner does not model it"):
        _read("--freeze-all-layers")
    assert "--freeze-all-layers" in REFUSED


@pytest.mark.parametrize(
    ("key", "value", "flag"),
    [
        # NeMo's TransformerConfig field of the Megatron-LM switch: the same setting
        ("model.config.distribute_saved_activations", "True", "--distribute-saved-activations"),
        ("model.config.bias_dropout_fusion", "False", "--no-bias-dropout-fusion"),
        ("model.config.moe_permute_fusion", "True", "--moe-permute-fusion"),
    ],
)
def test_nemo_and_megatron_share_one_text(key: str, value: str, flag: str) -> None:
    assert NOTED[key][1] == NOT_MODELLED[flag]
    notes = nemo_read(HEAD + f"{key}={value}").not_modelled
    assert f"{key}={value == 'True'!r}: {NOT_MODELLED[flag]}" in notes


def test_a_nemo_key_of_a_noted_flag_is_noted_only_when_it_asks_for_it() -> None:
    # model.config.moe_router_fusion is TransformerConfig's field of --moe-router-fusion
    # (transformer_config.py:944, False by default): True asks for the fusion, False does not
    key = "model.config.moe_router_fusion"
    on = nemo_read(HEAD + f"{key}=True")
    assert any(n.startswith(f"{key} (--moe-router-fusion)") for n in on.not_modelled)
    off = nemo_read(HEAD + f"{key}=False")
    assert key in off.ignored and not any(key in n for n in off.not_modelled)


def test_step_time_notes_leave_the_memory_as_read() -> None:
    """A line's notes on step time alone (a fusion: the kernels' time, not what they save) do not
    mark its memory as not modelled (`memory_notes`: the memory benchmarks and the GPU-count
    inference from memory skip only memory notes); a memory note stays."""
    time_only = _read("--moe-permute-fusion --no-bias-gelu-fusion").not_modelled
    assert len(time_only) == 2 and memory_notes(time_only) == ()
    both = _read("--moe-permute-fusion --record-memory-history").not_modelled
    assert [n.split(":")[0] for n in memory_notes(both)] == ["--record-memory-history"]
    assert TIME_ONLY.issubset(NOT_MODELLED)  # each a flag the reader notes


def test_an_mxfp8_gather_without_the_gradient_buffer_reuse_is_noted() -> None:
    """d98e8a64 param_and_grad_buffer.py:1245-1263: without --reuse-grad-buf-for-mxfp8-param-ag
    every parameter is backed by a persistent parameter buffer (optimizer_config.py:416-422
    warns of the memory); planner prices the reuse, which its launch writes."""
    gather = "--use-distributed-optimizer --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather"
    noted = _read(gather).not_modelled
    assert any(n.startswith("--fp8-param-gather with --fp8-recipe mxfp8") for n in noted)
    assert memory_notes(noted) == noted  # a memory note
    assert not _read(gather + " --reuse-grad-buf-for-mxfp8-param-ag").not_modelled
    tensorwise = gather.replace("mxfp8", "tensorwise")
    assert not _read(tensorwise).not_modelled  # its weights map into the buffer: no note
