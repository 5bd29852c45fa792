"""How Megatron-LM d98e8a64 reads the deprecated and whole-layer / whole-step CUDA-graph scopes
(--cuda-graph-scope, --cuda-graph-modules full / full_iteration), and what it refuses of them."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

GPT = (
    "python pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
    "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 "
    "--bf16 --vocab-size 131072 --tokenizer-type NullTokenizer --train-iters 10 --lr 1e-4 "
    "--no-check-for-nan-in-loss-and-grad"
)


@pytest.mark.parametrize(
    "extra",
    [
        "--cuda-graph-scope full_iteration",
        "--cuda-graph-impl none --cuda-graph-modules full_iteration",
        "--enable-cuda-graph --cuda-graph-scope full_iteration",
    ],
)
def test_a_deprecated_full_iteration_scope_alone_runs_the_full_iteration_graph(extra: str) -> None:
    """arguments.py d98e8a64 :633-641 moves --cuda-graph-scope into cuda_graph_modules;
    cuda_graph_config.py :10-13 maps its 'full_iteration' to ('cuda_graph_impl',
    'full_iteration'), :129-136 returns that migration whatever the impl (only the inference
    scope is dropped under none), and arguments.py :276-292 sets it: the impl need not be given.
    The planner returned before reading the scope (eager)."""
    plan = parse_plan(megatron_args.to_plan(f"{GPT} {extra}", "h100-sxm-80gb", 8))
    assert plan.job.cuda_graphs and plan.job.cuda_graph_impl == "full_iteration"
    assert plan.job.cuda_graph_modules == ()


@pytest.mark.parametrize(
    ("extra", "flag", "named"),
    [
        # cuda_graph_config.py:107-111: full_iteration needs impl none / local / full_iteration
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-scope full_iteration",
            "--cuda-graph-scope",
            "full_iteration",
        ),
        (
            "--external-cuda-graph --cuda-graph-modules full_iteration",
            "--cuda-graph-modules",
            "full_iteration",
        ),
        # cuda_graph_config.py:39-40: "full scope cannot be used with other scopes."
        (
            "--cuda-graph-impl local --cuda-graph-modules full attn",
            "--cuda-graph-modules",
            "full,attn",
        ),
        # arguments.py:1969-1971: --cuda-graph-modules must be empty under full_iteration (the
        # deprecated scope moved to the impl, attn stays a module)
        (
            "--cuda-graph-impl local --cuda-graph-modules full_iteration attn",
            "--cuda-graph-modules",
            "full_iteration,attn",
        ),
    ],
)
def test_scopes_megatron_refuses_are_bad_input(extra: str, flag: str, named: str) -> None:
    """Each line Megatron-LM refuses at start-up is refused naming the flag and its value; the
    planner dropped full / full_iteration and said the line fits."""
    with pytest.raises(InputError, match=f"{flag}: .*{named}"):
        megatron_args.to_plan(f"{GPT} {extra}", "h100-sxm-80gb", 8)
