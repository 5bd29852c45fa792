"""torchtitan's Python configurations (b5bcd76c, the configuration torchtitan takes since
9810191b) as an era of their own: what makes a plan theirs (`python_config_era`), and what that
era cannot run (`head_era`), from benchmarks/data/torchtitan_head_config.md."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import DEEPEP_MODELS, HEAD_CONTEXT, MODELS, flavor_name
from planner.search.rules.base import Violation


def python_config_era(job: Job, lay: Layout) -> str | None:
    """What makes the plan torchtitan's Python configurations' (b5bcd76c; the TOML target
    refuses each): a chunked loss (`[torchtitan] loss_chunks` > 1), MTP layers
    (`[torchtitan] num_mtp_layers`: e347b1e5 has none), float8 experts with
    pipelining or context parallelism (e347b1e5's grouped float8 converter asserts pp and cp 1:
    `torchtitan_float8.grouped_float8_problem`), or DeepEP for a model whose e347b1e5 parallelize
    ignores it (not in DEEPEP_MODELS: its TOML runs the all-to-all); None where none."""
    if job.titan.loss_chunks > 1:
        return f"with loss_chunks {job.titan.loss_chunks}"
    if job.titan.num_mtp_layers:  # e347b1e5 has no MTP module (b5bcd76c models/deepseek_v3/mtp.py)
        return f"with num_mtp_layers {job.titan.num_mtp_layers}"
    if job.titan.float8_experts and (lay.pp > 1 or lay.cp > 1):
        return f"with float8_experts at pp {lay.pp}, cp {lay.cp}"
    name = MODELS.get(flavor_name(job.arch), ("", ""))[0]
    if lay.ep > 1 and lay.moe_token_dispatcher_type == "flex" and name not in DEEPEP_MODELS:
        return f"with DeepEP for {name or job.arch.name} (moe_token_dispatcher_type flex)"
    return None


def head_era(job: Job, lay: Layout) -> Violation | None:
    """The Python configurations (`python_config_era`) have no every-N-layers checkpointing, no
    expert TP (its EP takes the TP ranks) and float8 rowwise only (benchmarks/data/
    torchtitan_head_config.md 2e, 2g, 2h), and their flavors refuse a context beyond their RoPE
    tables (`HEAD_CONTEXT`): a plan of that era cannot have any of them (nor could any
    torchtitan run it)."""
    if job.framework != "torchtitan" or (era := python_config_era(job, lay)) is None:
        return None
    head = f"{era} (torchtitan's Python configurations)"
    if job.titan.selective_layer_every is not None:
        return Violation(
            "tt_head_every",
            "torchtitan.selective_layer_every",
            f"{head} activation checkpointing is per op or whole: there is no every-N-layers "
            "option",
        )
    if lay.ep > 1 and lay.expert_tp > 1:
        return Violation(
            "tt_head_etp",
            "parallel.etp",
            f"{head} there is no expert TP (etp {lay.expert_tp}): its EP takes the TP ranks; "
            "etp = 1",
        )
    if job.precision == "fp8" and job.fp8_recipe == "tensorwise":
        return Violation(
            "tt_head_float8",
            "training.fp8_recipe",
            f'{head} float8 is rowwise only (got "tensorwise"): set fp8_recipe = "rowwise"',
        )
    table = HEAD_CONTEXT.get(flavor_name(job.arch))
    if table is not None and job.seq_length > table:
        return Violation(
            "tt_head_context",
            "training.seq_length",
            f"{head} the model's flavor has a RoPE table of {table:,} positions and refuses a "
            f"longer context (got {job.seq_length:,})",
        )
    return None
