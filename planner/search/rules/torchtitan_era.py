"""torchtitan's Python configurations (b5bcd76c, the configuration torchtitan takes since
9810191b) as an era of their own: what makes a plan theirs (`python_config_era`), and what that
era cannot run (`head_era`), from benchmarks/data/torchtitan_head_config.md. A layout the TOML era
(e347b1e5) raises on (`torchtitan_toml.era_problem`: the TOML target's `era_refusal`) is the
Python configurations' too: only the module target writes it, so what that era cannot run makes a
plan no torchtitan target writes."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import (
    DEEPEP_MODELS,
    HEAD_CONTEXT,
    HEAD_GONE,
    MODELS,
    flavor_name,
)
from planner.inputs.torchtitan_toml import plan_era_problem
from planner.search.rules.base import Violation


def toml_era_refusal(job: Job, lay: Layout) -> str | None:
    """What torchtitan e347b1e5 (the TOML target's era) raises on in the layout's degrees
    (`torchtitan_toml.era_problem`, with the degrees the TOML target's `era_refusal` gives it:
    context parallelism or pipelining a model of that era lacks, DDP beside tp or pp, tp or pp
    without FSDP, a sequence not a multiple of tp x 2cp), as "at <field> <value>"; None where
    it runs."""
    name = MODELS.get(flavor_name(job.arch), ("", ""))[0]
    problem = plan_era_problem(job, lay, name)
    if problem is None:
        return None
    field, value, _ = problem
    return f"at {field} {value} (which torchtitan e347b1e5 refuses: the TOML target's era)"


def python_config_era(job: Job, lay: Layout) -> str | None:
    """What makes the plan torchtitan's Python configurations' (b5bcd76c; the TOML target
    refuses each): a chunked loss (`[torchtitan] loss_chunks` > 1), MTP layers
    (`[torchtitan] num_mtp_layers`: e347b1e5 has none), float8 experts with
    pipelining or context parallelism (e347b1e5's grouped float8 converter asserts pp and cp 1:
    `torchtitan_float8.grouped_float8_problem`), or DeepEP for a model whose e347b1e5 parallelize
    ignores it (not in DEEPEP_MODELS: its TOML runs the all-to-all), or degrees e347b1e5
    raises on (`toml_era_refusal`); None where none."""
    if job.titan.loss_chunks > 1:
        return f"with loss_chunks {job.titan.loss_chunks}"
    if job.titan.num_mtp_layers:  # e347b1e5 has no MTP module (b5bcd76c models/deepseek_v3/mtp.py)
        return f"with num_mtp_layers {job.titan.num_mtp_layers}"
    if job.titan.float8_experts and (lay.pp > 1 or lay.cp > 1):
        return f"with float8_experts at pp {lay.pp}, cp {lay.cp}"
    name = MODELS.get(flavor_name(job.arch), ("", ""))[0]
    if lay.ep > 1 and lay.moe_token_dispatcher_type == "flex" and name not in DEEPEP_MODELS:
        return f"with DeepEP for {name or job.arch.name} (moe_token_dispatcher_type flex)"
    return toml_era_refusal(job, lay)


def head_era(job: Job, lay: Layout) -> Violation | None:
    """The Python configurations (`python_config_era`) have no every-N-layers checkpointing, no
    expert TP (its EP takes the TP ranks), no gathered loss under TP (the module target's
    refusal) and float8 rowwise only (benchmarks/data/
    torchtitan_head_config.md 2e, 2g, 2h), and their flavors refuse a context beyond their RoPE
    tables (`HEAD_CONTEXT`): a plan of that era cannot have any of them (nor could any
    torchtitan run it)."""
    if job.framework != "torchtitan" or (era := python_config_era(job, lay)) is None:
        return None
    head = f"{era} (torchtitan's Python configurations)"
    name = MODELS.get(flavor_name(job.arch), ("", ""))[0]
    if name in HEAD_GONE:  # a plan only they write, of a model they do not have
        return Violation(
            "tt_head_model",
            "model.name",
            f"{head} have no {name} ({job.arch.name!r}, {HEAD_GONE[name]}): no torchtitan "
            "target writes the plan",
        )
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
    if job.cross_entropy == "gathered" and lay.tp > 1:
        return Violation(
            "tt_head_loss",
            "training.cross_entropy",
            f"{head} the loss runs vocab-parallel under TP (b5bcd76c components/loss.py:66-75): "
            'set cross_entropy = "pytorch"',
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
