"""torchtitan's Python configurations (b5bcd76c, the configuration torchtitan takes since
9810191b) as an era of their own: what makes a plan theirs (`python_config_era`), and what that
era cannot run (`head_era`), from benchmarks/data/torchtitan_head_config.md (`python_config_era`:
`planner.inputs.torchtitan_era`). A layout the TOML era
(e347b1e5) raises on (`torchtitan_toml.era_problem`: the TOML target's `era_refusal`) is the
Python configurations' too: only the module target writes it, so what that era cannot run makes a
plan no torchtitan target writes."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import HEAD_CONTEXT, HEAD_GONE, MODELS, flavor_name
from planner.inputs.torchtitan_era import python_config_era
from planner.search.rules.base import Violation


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
