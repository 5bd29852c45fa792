"""Job settings that no layout runs, refused before any search (exit 2, as `check` refuses them):
`suggest` and `scale` once answered them "nothing fits" (exit 1), which reads as memory.

Two kinds. The rules on the job alone (`rules.job_violations`: one broken refuses every layout
at every GPU count), which both commands refuse (`check_job`). And the settings a layout's
data-parallel degree must divide (`sized`): `suggest` refuses one that does not divide the job's
own GPU count (`check_sized`); `scale` plans other counts, where it may divide, so it names the
setting in the note of each size it does not divide (`sized_note`) and refuses it only where it
divides none of them (`check_sizes`)."""

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


def sized(job: Job, n: int) -> tuple[str, int, str] | None:
    """(field, value, the degree it must divide) of a setting that must divide a degree dividing
    the GPU count and does not divide `n` GPUs itself, so that no layout of `n` GPUs runs it;
    None where none (or the job is over several pools: the pooled search's, each pool's count).

    Megatron's --num-distributed-optimizer-instances N must divide dp x cp and the expert
    data-parallel size (`rules.parallel.optimizer_instances`), each of which divides num_gpus
    (tp x cp x pp x dp = num_gpus); at tp = pp = cp = ep = 1 both are num_gpus, so N dividing
    num_gpus is also enough for that rule. torchtitan's dp_replicate r must divide dp
    (`rules.torchtitan.sharding`), which divides num_gpus; at dp = num_gpus it does where r
    divides num_gpus."""
    if len(job.pools) > 1:
        return None
    k = job.optimizer_instances
    if k > 1 and n % k:
        return (
            "training.optimizer_instances",
            k,
            "it must divide dp x cp and the expert data-parallel size (Megatron's parallel_state "
            "asserts), which divide num_gpus",
        )
    if job.framework == "torchtitan" and n % (r := job.titan.dp_replicate):
        return (
            "torchtitan.dp_replicate",
            r,
            "torchtitan's dp is dp_replicate x dp_shard, and dp divides num_gpus",
        )
    return None


def sized_note(job: Job) -> str | None:
    """`scale`'s note at a size (the job's GPU count) where a setting no layout of it runs
    (`sized`) stops the search, naming the setting and the count; None where none does."""
    found = sized(job, n := job.cluster.num_gpus)
    if found is None:
        return None
    field, value, _ = found
    return f"no layout runs: {field} {value} divides no data-parallel size at {n:,} GPUs"


def check_sized(job: Job, path: Path | None) -> None:
    """InputError naming the job file `path` (None: the flags), the field and its value where a
    setting no layout of the job's GPU count runs (`sized`): `suggest` plans that count only."""
    n = job.cluster.num_gpus
    found = sized(job, n)
    if found is not None:
        field, value, why = found
        raise InputError(
            f"{_where(path)}: {field}: {value} does not divide num_gpus ({n}): {why}, so no "
            "layout of these GPUs runs it"
        )


def check_sizes(job: Job, sizes: list[int], path: Path | None) -> None:
    """InputError naming the job file, the field and its value where a setting no layout runs
    stops every one of `scale`'s sizes (`sized` at each): no size could be planned, which is
    the setting, not memory (a setting some size runs is the note of the others, `sized_note`)."""
    each = [(n, sized(job, n)) for n in sizes]
    if any(found is None for _, found in each):
        return
    lines = []
    for found in dict.fromkeys(found for _, found in each):
        assert found is not None
        field, value, why = found
        counts = ", ".join(f"{n:,}" for n, f in each if f == found)
        lines.append(
            f"{_where(path)}: {field}: {value} does not divide the GPU counts ({counts}): "
            f"{why}, so no layout of them runs it"
        )
    raise InputError("\n".join(lines))
