"""Megatron-LM's own functional-test command lines (issue #21): every line of a transformer
model reads as written, and the others are refused with the reason.

Oracle: Megatron-LM ran these lines in its CI (NVIDIA/Megatron-LM d98e8a64,
tests/functional_tests/test_cases/*/*/model_config.yaml, as flattened in
benchmarks/data/megatron_functional_tests/command_lines.json) on the GPU counts of its recipes,
so Megatron's parser and validate_args accepted them. Only the cases usable for calibration are in
the repository. The families planner does not model are refused, each with the reason.
benchmarks/functional_tests.py prints the full table."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import functional_platforms
from benchmarks import functional_tests as ft
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.search.rules import check_plan

REFUSED: dict[str, str] = {}
"""Families planner does not model, and the words the refusal says: none since T5 reads
(`planner.inputs.megatron_t5`). The NeMo cases (gpt-nemo: `nemo llm pretrain` overrides) read
with their recipe's nemo_model as the line's --factory."""

UNSET: dict[str, str] = {}
"""Lines whose tokenizer is a variable the case does not set, which planner asks for
(`check --vocab-size`) as it would of a user: none since a --tiktoken-pattern on the line names
TikTokenizer (`test_a_shell_variable_tokenizer_reads_by_its_tiktoken_pattern`)."""


MEGATRON_REFUSES: dict[str, str] = {
    "gpt/gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap": (
        "deterministic = true does not run with tp_comm_overlap"
    ),
    "gpt/gpt3_mcore_tp1_pp1_fsdp2_resume_torch_dist_te": (
        "--untie-embeddings-and-output-weights: must be given with --use-torch-fsdp2"
    ),
}
"""Lines Megatron-LM itself refuses at d98e8a64, and the words planner's refusal says: this weekly
case passes --deterministic-mode with --tp-comm-overlap, which megatron/training/determinism.py
asserts against (ARG_VALUES_REQUIRED_FOR_DETERMINISM); its golden values predate the assertion.
The FSDP2 resume case passes --use-torch-fsdp2 with tied embeddings and --fp16, both of which
validate_args asserts against there (arguments.py, the --use-torch-fsdp2 block)."""

NOT_MODELLED_LINES: dict[str, str] = {
    "gpt/gpt_static_inference_tp1_pp1_583m_fp8_cudagraphs": (
        "--fp8-param-gather: without --use-distributed-optimizer or FSDP only inference runs it"
    ),
}
"""Lines Megatron-LM runs that planner refuses, and the words its refusal says: this inference
case passes --fp8-param-gather without a sharded optimizer, which validate_args lets through only
without gradients (arguments.py:1095-1097) and which makes the FP8 weights the parameters
(argument_utils.py:312, transformer_block.py:354-355); planner reads an inference line as if it
trained, a run Megatron refuses, and counts FP8 parameters only with a sharded optimizer
(test_megatron_dist_optimizer_reading.py)."""


def cases() -> list[dict[str, Any]]:
    return ft.load_cases()


def outcome(case: dict[str, Any]) -> str | None:
    """None when every platform's run reads; else the first message."""
    words = ft.command_line(case)
    for t in functional_platforms.targets(case):
        try:
            n = t.num_gpus or ft.needed_gpus(
                megatron_args.to_plan(
                    shlex.join(words), t.gpu, 8, case["name"], ft.vocab_given(words)
                )
            )
            doc = megatron_args.to_plan(
                shlex.join(words), t.gpu, n, case["name"], ft.vocab_given(words)
            )
            check_plan(parse_plan(doc, Path(case["name"])))
        except InputError as e:
            return str(e)
    return None


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_functional_test_line(case: dict[str, Any]) -> None:
    message = outcome(case)
    expected = (
        REFUSED.get(case["family"])
        or UNSET.get(case["name"])
        or MEGATRON_REFUSES.get(case["name"])
        or NOT_MODELLED_LINES.get(case["name"])
    )
    if expected is None:
        assert message is None
    else:
        assert message is not None and expected in message, message


def test_the_read_rate_of_modelled_lines() -> None:
    modelled = [c for c in cases() if c["family"] not in REFUSED]
    read = [c for c in modelled if outcome(c) is None]
    # 199 lines of GPT, MoE, Mixtral, BERT and VLM language models and NeMo recipes, 18 of
    # hybrid Mamba stacks and 9 of T5 (of the cases usable for calibration; the held-out ones are
    # not in the repository), every one read but those Megatron refuses too (MEGATRON_REFUSES)
    # and the inference line planner does not model (NOT_MODELLED_LINES)
    refused = len(MEGATRON_REFUSES) + len(NOT_MODELLED_LINES)
    assert (len(modelled), len(read)) == (226, 226 - refused)


def test_a_shell_variable_tokenizer_reads_by_its_tiktoken_pattern() -> None:
    # The Nemotron 3 Super release lines say --tokenizer-type ${TOKENIZER_TYPE} and
    # --tiktoken-pattern v2, which only TikTokenizer reads: its default 2^17 = 131,072 entries,
    # the vocabulary of Megatron-LM's own Nemotron 3 configuration (d98e8a64
    # tests/unit_tests/models/test_hybrid_moe_model.py, vocab_size 131072)
    case = next(c for c in cases() if c["name"] == "nemotron/nemotron3_super_release_gb200")
    line = shlex.join(ft.command_line(case))
    doc = megatron_args.to_plan(line, "gb200-nvl72", 64, case["name"])
    assert doc["model"]["vocab_size"] == 131_072
    # without the pattern the variable is still asked for
    bare = line.replace("--tiktoken-pattern v2", "")
    with pytest.raises(InputError, match="shell variable"):
        megatron_args.to_plan(bare, "gb200-nvl72", 64, case["name"])
