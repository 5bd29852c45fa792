"""Which torchtitan a plan's training code is: what makes a plan torchtitan's Python
configurations' (b5bcd76c, the configuration torchtitan takes since 9810191b), which the TOML
target (e347b1e5) refuses (`python_config_era`); the search's rule for what that era cannot run
(`planner.search.rules.torchtitan_era`) and the attention kernel a plan runs
(`planner.model.titan_attention`) ask it alike."""

from __future__ import annotations

from planner.inputs.job import Job
from planner.inputs.layout import Layout
from planner.inputs.torchtitan import DEEPEP_MODELS, MODELS, flavor_name
from planner.inputs.torchtitan_toml import plan_era_problem


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
