"""Megatron-LM command lines read as Megatron-LM d98e8a64 runs them (QA pass 2, issues 1-9):
what it refuses at start-up or at the first training step exits 2 naming the flag; what it
rewrites is read rewritten.

Oracles (NVIDIA/Megatron-LM d98e8a64; args = megatron/training/arguments.py, tc =
megatron/core/transformer/transformer_config.py, mpc = megatron/core/model_parallel_config.py):
the source line each case names. Each case failed before the fix (read, exit 0/1)."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import memory

DENSE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --max-position-embeddings 8192 --position-embedding-type rope "
    "--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--seq-length 8192 --micro-batch-size 1 --global-batch-size 128 --bf16 "
    "--lr 1e-4 --train-iters 100 "
)
MOE = DENSE.replace("--num-layers 8", "--num-layers 4") + (
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024 --moe-grouped-gemm "
)
FSDP2 = "--use-torch-fsdp2 --no-gradient-accumulation-fusion "
TP2 = "--tensor-model-parallel-size 2 --sequence-parallel "


def read(extra: str, base: str = DENSE) -> megatron_args.Reading:
    return megatron_args.read(base + extra, "h100-sxm-80gb", None, where="t.sh")


REFUSED = [
    # issue 4: args:1034-1037
    (FSDP2 + "--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size", DENSE),
    (FSDP2 + "--expert-model-parallel-size 2", "--expert-model-parallel-size", MOE + TP2),
    # issue 5: moe_layer.py:636-640 (tp 2, no --sequence-parallel)
    ("--tensor-model-parallel-size 2", "--sequence-parallel", MOE),
    # issue 3: fine_grained_activation_offload.py:641-648 (pp 2) and :1084 (above 1024 x 1024)
    (
        "--pipeline-model-parallel-size 2 --fine-grained-activation-offloading "
        "--offload-modules core_attn --delta-offload-bytes-across-pp-ranks 1000000",
        "--delta-offload-bytes-across-pp-ranks: 1000000",
        DENSE,
    ),
    (
        "--fine-grained-activation-offloading --offload-modules core_attn "
        "--min-offloaded-tensor-size 2097152",
        "--min-offloaded-tensor-size: 2097152",
        DENSE,
    ),
    # issue 9: parallel_state.py:922-926 divides by it
    ("--num-distributed-optimizer-instances 0", "--num-distributed-optimizer-instances", DENSE),
    # issue 7
    (
        TP2 + "--distribute-saved-activations --recompute-granularity full --recompute-method "
        "uniform --recompute-num-layers 1",
        "must be off with --sequence-parallel",
        DENSE,
    ),  # tc:1934
    (
        "--distribute-saved-activations --recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1",
        "--tensor-model-parallel-size > 1",
        DENSE,
    ),  # args:1410
    (
        "--tensor-model-parallel-size 2 --distribute-saved-activations --recompute-activations",
        "--recompute-granularity full",
        DENSE,
    ),  # args:1413-1418
    (
        "--pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce "
        "--overlap-param-gather --overlap-param-gather-with-optimizer-step",
        "the interleaved schedule",
        DENSE,
    ),  # args:1070-1072
    (
        "--use-megatron-fsdp --megatron-fsdp-version 2 --use-distributed-optimizer "
        "--ckpt-format fsdp_dtensor",
        "--megatron-fsdp-version",
        DENSE,
    ),  # args:1124-1126
    ("--delay-wgrad-compute", "--delay-wgrad-compute", MOE),  # tc:3074-3077
    ("--ep-overlap-early-attn-memory-release", "--ep-overlap-early", MOE),  # tc:3097-3101
    ("--moe-enable-deepep", "flex only, not allgather", MOE),  # tc:1743-1745
    (
        "--moe-token-dispatcher-type flex --moe-enable-deepep --moe-flex-dispatcher-backend "
        "hybridep",
        "hybridep",
        MOE,
    ),  # tc:1746-1747
    (
        "--moe-token-dispatcher-type alltoall --moe-dispatch-fwd-dtype mxfp8",
        "--moe-dispatch-fwd-dtype",
        MOE,
    ),  # tc:1776-1783
    ("--moe-single-grouped-weight", "--moe-use-grouped-tensor", MOE),  # tc:1736-1737
    ("--cuda-graph-modules attn --cuda-graph-scope attn", "--cuda-graph-scope", DENSE),  # :633
    ("--enable-cuda-graph --external-cuda-graph", "--external-cuda-graph", DENSE),  # :615-617
    ("--fp16-lm-cross-entropy", "needs --fp16", DENSE),  # args:1372-1373
    (
        "--pipeline-model-parallel-size 2 --defer-embedding-wgrad-compute "
        "--no-gradient-accumulation-fusion",
        "--defer-embedding",
        DENSE,
    ),  # mpc:550-553
    (
        "--optimizer muon --use-distributed-optimizer --num-distributed-optimizer-instances 2",
        "--num-distributed-optimizer-instances: 2",
        DENSE,
    ),  # optimizer/__init__.py:838-845
    (
        "--pipeline-model-parallel-size 2 --overlap-p2p-communication-warmup-flush",
        "--overlap-p2p-communication-warmup-flush",
        DENSE,
    ),  # mpc:570-575, args:1010-1012
    # issue 8: allow_abbrev=False, no positionals (args:119-120)
    ("--tensor-model-par 2", "abbreviates --tensor-model-parallel-size", DENSE),
]


@pytest.mark.parametrize(("extra", "words", "base"), REFUSED)
def test_what_megatron_refuses_exits_2_naming_the_flag(extra: str, words: str, base: str) -> None:
    with pytest.raises(InputError, match=words.replace("+", r"\+").replace("(", r"\(")):
        read(extra, base)


def test_a_word_before_the_first_flag_exits_2() -> None:
    text = DENSE.replace("pretrain_gpt.py ", "pretrain_gpt.py @more_args.txt ")
    with pytest.raises(InputError, match=r"@more_args\.txt: a word before the first flag"):
        megatron_args.read(text, "h100-sxm-80gb", None, where="t.sh")


def test_what_megatron_accepts_still_reads() -> None:
    """The counterparts: each flag where Megatron lets it through."""
    read(FSDP2)
    read(TP2, MOE)
    read("--moe-token-dispatcher-type flex --moe-enable-deepep", MOE)
    read("--delay-wgrad-compute --overlap-moe-expert-parallel-comm --expert-model-parallel-size 8 "
         "--moe-token-dispatcher-type alltoall", MOE)  # fmt: skip
    read("--fine-grained-activation-offloading --offload-modules core_attn "
         "--min-offloaded-tensor-size 1024 --delta-offload-bytes-across-pp-ranks 5")  # fmt: skip
    read("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
         "--overlap-p2p-communication-warmup-flush")  # fmt: skip
    # --torch-fsdp2-no-reshard-after-forward without FSDP2: get_megatron_ddp_config ignores it
    read("--torch-fsdp2-no-reshard-after-forward")
    # with it: read (parallel.torch_fsdp2_reshard_after_forward, tests/model/
    # test_torch_fsdp2_megatron.py)
    read(FSDP2 + "--torch-fsdp2-no-reshard-after-forward")


def test_fsdp2_fp8_param_gather_reads_as_megatron_rewrites_it() -> None:
    """args:1051-1057: under --use-torch-fsdp2 with TE >= 2.0 validate_args sets
    fp8_param_gather False: the line reads as the one without the flag, with a note."""
    fp8 = FSDP2 + "--fp8-format hybrid "
    with_flag, without = read(fp8 + "--fp8-param-gather"), read(fp8)
    assert with_flag.doc["training"]["fp8_param_gather"] is False
    assert with_flag.doc == without.doc
    assert any("arguments.py:1051-1057" in n for n in with_flag.notes)


def test_tp_overlap_with_every_overlap_disabled_reads_off() -> None:
    """mpc:271-289: the four fields --tp-comm-overlap turns on, each off by --disable-...; with
    all four off no GEMM overlaps (transformer_engine.py:1193-1199, 1458-1464)."""
    on = TP2 + "--tp-comm-overlap "
    off = "--disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs "
    off += "--no-tp-comm-bulk-dgrad --disable-tp-comm-bulk-wgrad"
    assert read(on).doc["parallel"]["tp_comm_overlap"] is True
    r = read(on + off)
    assert r.doc["parallel"]["tp_comm_overlap"] is False
    assert any("every overlap turned off" in n for n in r.not_modelled)
    some = read(on + "--disable-tp-comm-overlap-ag")  # conservative step: off, said so
    assert some.doc["parallel"]["tp_comm_overlap"] is False
    assert any("all-gather (ag) turned off" in n for n in some.not_modelled)
    assert "--disable-tp-comm-overlap-ag" not in some.ignored


def test_batch_invariant_mode_is_said_to_be_timed_as_the_default_kernels() -> None:
    r = read("--batch-invariant-mode")  # tc:1184-1189 "will significantly affect speed"
    assert any(n.startswith("--batch-invariant-mode") for n in r.not_modelled)


def test_a_training_line_without_a_micro_batch_is_told_megatron_needs_it() -> None:
    r = read("", DENSE.replace("--micro-batch-size 1 ", ""))  # args:693 asserts it
    assert any(n.startswith("--micro-batch-size: not given") for n in r.notes)
    assert not any("--micro-batch-size" in n for n in read("").notes)


def test_the_fsdp2_repro_no_longer_reads_low() -> None:
    """QA repro r2: the FSDP2 line with --fp8-param-gather read 63.6 GiB (FP8 weights gathered)
    where Megatron gathers bf16 (79.6 GiB, the line without the flag)."""
    base = DENSE.replace("--num-layers 8", "--num-layers 4") + FSDP2 + TP2 + "--fp8-format hybrid "
    a, b = read("--fp8-param-gather", base), read("", base)
    plans = [parse_plan(r.doc) for r in (a, b)]
    peak = [memory.estimate(p.job, p.require_layout()).peak for p in plans]
    assert peak[0] == peak[1]
