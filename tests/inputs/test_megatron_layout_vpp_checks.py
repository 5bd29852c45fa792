"""The start-up checks that need the interleaved schedule see the virtual pipeline size that a
--pipeline-model-parallel-layout or a hybrid pattern's '|' segments give, as Megatron-LM does.

Oracle: Megatron-LM d98e8a64 megatron/training/arguments.py. validate_args sets
virtual_pipeline_model_parallel_size from a layout, its stage count over pp, None where that is 1
(:941-952), and from a hybrid pattern, its '|' segment count over pp (:855-860), before it asserts
--overlap-param-gather-with-optimizer-step's needs, among them a virtual pipeline size
(:1066-1075); --overlap-p2p-communication-warmup-flush needs it too (:1010-1012 turn the p2p
overlap off without one). Both lines below that read failed before the fix (refused, exit 2)."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

DENSE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
    "--num-attention-heads 16 --max-position-embeddings 2048 --position-embedding-type rope "
    "--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 32000 --tokenizer-type NullTokenizer "
    "--seq-length 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
    "--lr 1e-4 --train-iters 100 --pipeline-model-parallel-size 2 "
)
STEP = (
    "--use-distributed-optimizer --overlap-param-gather --ckpt-format torch "
    "--overlap-param-gather-with-optimizer-step "
)
HYBRID = (
    "torchrun --nproc-per-node 8 pretrain_hybrid.py --hidden-size 1024 "
    "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
    "--micro-batch-size 1 --global-batch-size 64 --bf16 --position-embedding-type none "
    "--normalization RMSNorm --disable-bias-linear --vocab-size 32000 "
    "--tokenizer-type NullTokenizer --lr 1e-4 --train-iters 100 "
    "--pipeline-model-parallel-size 2 "
)


def read(text: str) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", None, where="t.sh")


@pytest.mark.parametrize(
    "text",
    [
        # layout: 4 stages (counted: Et*2 | t*2 | t*2 | t*2L) / pp 2 = vpp 2 (:941-952)
        DENSE + STEP + "--pipeline-model-parallel-layout 'Et*2|t*2|t*2|t*2L'",
        # the warm-up flush needs the same interleaved schedule (:1010-1012)
        DENSE + "--pipeline-model-parallel-layout 'Et*2|t*2|t*2|t*2L' "
        "--overlap-p2p-communication-warmup-flush",
        # hybrid pattern: 4 '|' segments / pp 2 = vpp 2 (:855-860)
        HYBRID + STEP + "--hybrid-layer-pattern 'M*|M*|M*|M*'",
    ],
)
def test_a_layout_or_pattern_gives_the_interleaved_schedule_the_checks_need(text: str) -> None:
    reading = read(text)
    assert reading.doc["parallel"]["pipeline_model_parallel_layout"]


@pytest.mark.parametrize(
    "text",
    [
        # layout: 2 stages / pp 2 = 1, which validate_args makes None (:951-952)
        DENSE + STEP + "--pipeline-model-parallel-layout 'Et*4|t*4L'",
        # hybrid: 2 segments / pp 2 = 1 (:861-862 leave it None)
        HYBRID + STEP + "--hybrid-layer-pattern 'M*M*|M*M*'",
    ],
)
def test_one_stage_a_rank_is_still_refused(text: str) -> None:
    with pytest.raises(InputError, match="overlap-param-gather-with-optimizer-step: needs the "):
        read(text)
