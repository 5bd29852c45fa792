"""Megatron-Core's own attention (--transformer-impl local) and --no-masked-softmax-fusion: the
softmax's saved bytes per score (`planner.model.scores`), read from and written to Megatron's
command line.

Oracles: Megatron-LM d98e8a64 megatron/core/fusions/fused_softmax.py:253-260 (the fused kernel only
with masked_softmax_fusion and 16 < s_k <= 4096, s_q and s_k multiples of 4) and :313-340 (the
torch softmax: upcast to fp32 only with softmax_in_fp32, the fp32 output kept by its backward,
cast back); dot_product_attention.py:100-109 (the flags it is built with) and arguments.py:1714-1715
(--apply-query-key-layer-scaling sets attention_softmax_in_fp32), 2887-2891
(--no-masked-softmax-fusion); TransformerEngine d0067d0d
transformer_engine/pytorch/attention/dot_product_attention/softmax.py:296-329, 355-383 (TE's own
rule, 16 < s_k < 16384, and its torch path, always fp32 there: softmax_in_fp32 default true, :262,
built without it, backends.py:383); the dropout after the softmax (backends.py:714,
dot_product_attention.py's attention_dropout) keeps only its 1-byte mask and its 16-bit output.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import functional_tests as ft
from planner.emit import bridge, megatron
from planner.inputs import megatron_args, nemo_keys
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.inputs.plan_writer import render
from planner.model import memory, scores

MIB = 1024**2


@pytest.mark.parametrize(
    ("s", "attention", "fusion", "dropout", "per_score"),
    [
        # TE: fused kernel 2 (+ mask 1 + output 2); torch path fp32 4 (+ 1 + 2), or without
        # dropout 4 + the 16-bit cast the second GEMM keeps 2
        (4096, "te", True, True, 5),
        (8192, "te", True, True, 5),  # TE's kernel takes up to 16383 keys
        (16384, "te", True, True, 7),
        (16384, "te", True, False, 6),
        (16384, "te", False, True, 7),  # the flag is not TE's: still its torch path
        (4096, "te", False, True, 5),
        # Megatron's local attention: the kernel up to 4096 keys and only with the flag
        (4096, "local_fp32", True, True, 5),
        (4096, "local_fp32", True, False, 2),
        (8192, "local_fp32", True, True, 7),  # 4 + 1 + 2
        (8192, "local_fp32", True, False, 6),  # 4 + 2
        (1024, "local_fp32", False, True, 7),
        (1024, "local_fp32", False, False, 6),
        # its torch softmax without attention_softmax_in_fp32 (the command line's default): the
        # 16-bit output 2, then the dropout's 1 + 2, or nothing more (the GEMM keeps that output)
        (1024, "local", False, True, 5),
        (1024, "local", False, False, 2),
        (8192, "local", True, True, 5),
    ],
)
def test_bytes_per_score_by_softmax_path(
    s: int, attention: str, fusion: bool, dropout: bool, per_score: int
) -> None:
    heads, b = 8, 4
    got = scores.score_bytes(heads, s, b, dropout, attention, fusion)  # type: ignore[arg-type]
    assert got == per_score * heads * s * s * b


def test_kernel_key_limits() -> None:
    # fused_softmax.py:256 `16 < sk <= 4096`, :258 `sk % 4 == 0`; TE softmax.py:304-307
    assert scores.local_fused_softmax(4096) and not scores.local_fused_softmax(4100)
    assert not scores.local_fused_softmax(16, True, 8) and scores.local_fused_softmax(20, True, 8)
    assert not scores.local_fused_softmax(1024, fusion=False)
    assert scores.fused_softmax(16376) and not scores.fused_softmax(16384)


CASE = "gpt/gpt3_mcore_tp2_pp2_uninstall_te"  # sha256 digest 5107...: a usable case


def _case_line() -> str:
    case = next(c for c in ft.load_cases() if c["name"] == CASE)
    return " ".join(ft.command_line(case))


def test_functional_case_reads_the_local_torch_softmax_in_fp32() -> None:
    # --transformer-impl local --no-masked-softmax-fusion --fp16 --apply-query-key-layer-scaling,
    # seq 1024, 8 heads, micro-batch 4, attention dropout 0.1 (Megatron's default): 7 bytes a
    # score, 7 x 8 x 1024^2 x 4 = 224 MiB a layer before the TP split, where the TE rule it was
    # planned with before counted 5 (160 MiB); the case peaks at 1.94 GiB on A100 (golden values),
    # planner's last stage 1.726 GiB with 5 bytes, 1.913 with 7 (functional_tests.py)
    job = parse_plan(megatron_args.read(_case_line(), "a100-sxm-80gb", 8, CASE).doc).job
    assert job.unfused_attention == "local_fp32" and not job.masked_softmax_fusion
    assert not job.flash_attention and job.attention_dropout
    got = scores.score_bytes(8, 1024, 4, True, job.unfused_attention, job.masked_softmax_fusion)
    assert got == 224 * MIB
    assert scores.score_bytes(8, 1024, 4) == 160 * MIB
    # and the estimate reads them: the last stage (pp 2, 6 of 12 layers, tp 2, 1F1B: one
    # micro-batch in flight there) keeps (224 - 160) / 2 MiB more per layer, 6 x 32 = 192 MiB,
    # x the allocator's fragmentation allowance activations carry (memory.FRAGMENTATION)
    plan = parse_plan(megatron_args.read(_case_line(), "a100-sxm-80gb", 8, CASE).doc)
    lay = plan.require_layout()
    te = replace(plan.job, unfused_attention="te", masked_softmax_fusion=True)
    last = memory.estimate(plan.job, lay).stages[-1].activations
    assert last - memory.estimate(te, lay).stages[-1].activations == pytest.approx(
        192 * MIB * memory.FRAGMENTATION
    )


SMALL = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 "
)


@pytest.mark.parametrize(
    ("flags", "attention", "fusion"),
    [
        ("", "te", True),
        ("--attention-backend unfused --no-masked-softmax-fusion", "te", False),
        ("--transformer-impl local", "local", True),
        ("--transformer-impl local --attention-softmax-in-fp32", "local_fp32", True),
        (
            "--spec local --attention-backend local --apply-query-key-layer-scaling",
            "local_fp32",
            True,
        ),
        ("--transformer-impl local --no-masked-softmax-fusion", "local", False),
    ],
)
def test_read_from_megatron_args(flags: str, attention: str, fusion: bool) -> None:
    reading = megatron_args.read(SMALL + flags, "h100-sxm-80gb", 8, "train.sh")
    job = parse_plan(reading.doc).job
    assert (job.unfused_attention, job.masked_softmax_fusion) == (attention, fusion)


def test_flag_written_back_by_the_plan_and_the_launch() -> None:
    line = SMALL + "--transformer-impl local --no-masked-softmax-fusion"
    plan = parse_plan(megatron_args.read(line, "h100-sxm-80gb", 8, "train.sh").doc)
    text = render(plan.job, plan.require_layout(), {"name": "gpt"}, [])
    assert "masked_softmax_fusion = false" in text and 'unfused_attention = "local"' in text
    # the launch targets write TE's layers: Megatron's local attention is refused, naming the
    # field (arguments.py:436-437 @d98e8a64: local attention needs --spec local)
    with pytest.raises(InputError, match=r"training\.unfused_attention.*'local'"):
        megatron.arguments(plan)
    with pytest.raises(InputError, match=r"training\.unfused_attention"):
        bridge.sections(plan)
    te = SMALL + "--attention-backend unfused --no-masked-softmax-fusion"
    plan = parse_plan(megatron_args.read(te, "h100-sxm-80gb", 8, "train.sh").doc)
    assert "--no-masked-softmax-fusion" in megatron.arguments(plan).flat()
    plain = parse_plan(megatron_args.read(SMALL, "h100-sxm-80gb", 8, "train.sh").doc)
    assert "--no-masked-softmax-fusion" not in megatron.arguments(plain).flat()
    assert "softmax" not in render(plain.job, plain.require_layout(), {"name": "gpt"}, [])


def test_nemo_override_of_the_fusion_is_harmless() -> None:
    # NeMo builds TE's attention, which ignores Megatron's flag and reads
    # NVTE_MASKED_SOFTMAX_FUSION (TE d0067d0d dot_product_attention/softmax.py:264-266): listed
    # as ignored, not refused as a read flag it does not translate
    missing: list[str] = []
    notes: list[str] = []
    values = {"model.config.masked_softmax_fusion": False}
    assert nemo_keys.classify(values, "x", missing, notes) == ["model.config.masked_softmax_fusion"]
    assert missing == notes == []


def test_the_local_kernel_needs_whole_blocks_of_batches() -> None:
    # fused_softmax.py:251-265 @d98e8a64: b x heads per TP rank a multiple of 4 and, for the
    # causal kernel, of its batches per block (get_batch_per_block: 128 threads, warps of
    # min(2^ceil(log2 s_k), 32) lanes, 2 batches a warp up to 128 keys): 8 at s_k <= 128, else 4
    assert [scores.batches_per_block(s) for s in (32, 128, 256, 4096)] == [8, 8, 4, 4]
    # Llama 2 13B's 40 heads at tp 8, micro-batch 2: 10 batches, not a multiple of 4: the torch
    # softmax in fp32 (local_fp32), 4 + 2 bytes a score without dropout, not the kernel's 2
    per_score = 40 * 4096**2 * 2
    assert scores.score_bytes(40, 4096, 2, False, "local_fp32", True, tp=8) == 6 * per_score
    # at tp 4, 20 batches: the kernel
    assert scores.score_bytes(40, 4096, 2, False, "local_fp32", True, tp=4) == 2 * per_score
    # s_k = 128: 8 batches a block; 12 batches (a multiple of 4) are not whole blocks
    assert not scores.local_fused_softmax(128, True, 12)
    assert scores.local_fused_softmax(128, True, 16)


def test_local_attention_needs_flash_off() -> None:
    # Megatron-Core's own attention has no flash path (dot_product_attention.py:100-109): a plan
    # naming it with flash attention on is refused, naming the field
    doc = {
        "model": {"name": "llama2-7b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 8, "unfused_attention": "local"},
        "parallel": {"tp": 8},
    }
    with pytest.raises(InputError, match=r"training\.unfused_attention.*flash_attention = false"):
        parse_plan(doc)
    doc["training"]["flash_attention"] = False  # type: ignore[index]
    assert parse_plan(doc).job.unfused_attention == "local"
