"""What Megatron-LM's selective recompute runs: the modules of --recompute-modules, never
PyTorch's per-op policy (`training.selective_recompute = "per_op"`, torchtitan's "op" mode).

Megatron-LM d98e8a64 has no per-op checkpointing: --recompute-granularity takes full or
selective (arguments.py), and selective recomputes TransformerConfig.recompute_modules, default
core_attn (transformer_config.py:1940-1941, each module checked at :1943-1960). A Megatron plan
that times the per-op policy would launch a job that keeps what planner counts as recomputed
(QA: Llama 3.1 8B at seq 16384, tp 2 pp 4, planned at 61.2 GiB, runs at 88.7 GiB), so the rule
refuses it where it would run: recompute = "selective" in a Megatron-LM plan. torchtitan's
plans take only the per-op policy there (`rules.torchtitan.features`, the mirror of this rule);
the search offers a Megatron job no per-op rung (`planner.search.rungs.selective`).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def per_op(job: Job, lay: Layout) -> Violation | None:
    """The per-op policy under a Megatron-LM plan's selective recompute."""
    if job.framework != "megatron" or lay.recompute != "selective":
        return None
    if job.selective_recompute != "per_op":
        return None
    return Violation(
        "selective_per_op",
        "training.selective_recompute",
        '"per_op": Megatron-LM has no per-op recompute policy; its selective recompute runs '
        "the modules of --recompute-modules, default core_attn (transformer_config.py:"
        "1940-1960 @d98e8a64), so the launched job would keep what this plan counts as "
        'recomputed: set selective_recompute = "core_attn" (with parallel.recompute_modules) '
        'or framework = "torchtitan"',
    )
