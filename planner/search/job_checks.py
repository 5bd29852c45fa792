"""Job settings that no layout runs, refused before any search (exit 2, as `check` refuses them):
`suggest` and `scale` once answered them "nothing fits" (exit 1), which reads as memory.

Two kinds. The rules on the job alone (`rules.job_violations`: one broken refuses every layout
at every GPU count), which both commands refuse (`check_job`). And the settings a layout's
data-parallel degree must divide at the job's own GPU count (`check_sized`), which `suggest`
refuses; `scale` plans other counts, where they may divide, so it says per size instead."""

from __future__ import annotations

from pathlib import Path

from planner.inputs.errors import InputError
from planner.inputs.plan import Job
from planner.search import rules


def _where(path: Path | None) -> str:
    return str(path) if path is not None else "<flags>"


def check_job(job: Job, path: Path | None) -> None:
    """InputError naming the job file `path` (None: the flags), the field and its value for each
    rule on the job alone that the job breaks, as `check` reports them (`check_found`)."""
    broken = rules.job_violations(job)
    if broken:
        where = _where(path)
        raise InputError("\n".join(f"{where}: {v.field}: {v.message}" for v in broken))


def check_sized(job: Job, path: Path | None) -> None:
    """InputError where a setting must divide a degree that divides the job's GPU count and does
    not divide the count itself: no layout of the job's GPUs runs it.

    Megatron's --num-distributed-optimizer-instances N must divide dp x cp and the expert
    data-parallel size (`rules.parallel.optimizer_instances`), each of which divides num_gpus
    (tp x cp x pp x dp = num_gpus); at tp = pp = cp = ep = 1 both are num_gpus, so N dividing
    num_gpus is also enough for that rule. torchtitan's dp_replicate r must divide dp
    (`rules.torchtitan.sharding`), which divides num_gpus; at dp = num_gpus it does where r
    divides num_gpus. A job over several pools is the pooled search's (its GPU count is each
    pool's)."""
    if len(job.pools) > 1:
        return
    n = job.cluster.num_gpus
    where = _where(path)
    k = job.optimizer_instances
    if k > 1 and n % k:
        raise InputError(
            f"{where}: training.optimizer_instances: {k} does not divide num_gpus ({n}): it must "
            "divide dp x cp and the expert data-parallel size (Megatron's parallel_state "
            "asserts), which divide num_gpus, so no layout of these GPUs runs it"
        )
    if job.framework == "torchtitan" and n % (r := job.titan.dp_replicate):
        raise InputError(
            f"{where}: torchtitan.dp_replicate: {r} does not divide num_gpus ({n}): torchtitan's "
            "dp is dp_replicate x dp_shard, and dp divides num_gpus, so no layout of these GPUs "
            "runs it"
        )
