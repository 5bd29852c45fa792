"""An sbatch script that runs the plan's torchrun job on Slurm.

One task per node (`--ntasks-per-node=1`, the pattern of Megatron-LM's mcore-run-on-slurm guide,
ecosystem.md 2.2): `srun` starts torchrun on every node, and torchrun's c10d rendezvous meets on
the first node of the allocation (`scontrol show hostnames`), with the Slurm job id as the
rendezvous id. The `#SBATCH --job-name` is a slug of the job name (sbatch reads directives
itself, not through a shell); the exact name lives in the quoted JOB_NAME variable. The argument
arrays, settings and environment are those of `planner.emit.torchrun`.

A plan priced on part of each multi-node NVLink domain (`ClusterSpec.domain_used`: 64 of an
NVL72 rack's 72 GPUs, or the plan's `[cluster] gpus_per_domain_used`) asks Slurm for that
placement: `#SBATCH --segment=N`, N nodes of one block (rack) per segment (Slurm >= 24.11's
topology/block option; NVIDIA's MLPerf GB200/GB300 configs set SEGMENT=16 trays,
mlcommons/training_results_v5.1 @4da2d1cd config_GB300_128x4x1xtp2pp1cp4_8b.sh:23-25).
"""

from __future__ import annotations

from planner.emit.common import comment_block, comment_safe, file_word, nodes, slug
from planner.emit.pools import pool_nodes, procid_node_rank, rank_lines
from planner.emit.prediction import HEADROOM, header, predict
from planner.emit.torchrun import (
    env_block,
    megatron_arrays,
    megatron_words,
    pool_distributed,
    settings_block,
    torchrun_body,
)
from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import Plan

DEFAULT_TIME = "04:00:00"


def sbatch_name(job_name: str) -> str:
    """The job name as a directive can hold it: letters, digits, '.', '_' and '-' (runs of
    anything else become '-'); a name without any falls back to `slug`'s error."""
    return file_word(job_name, 64) or slug(job_name)


def node_directives(
    nnodes: int, per: int, name: str | None, segment: int | None = None
) -> list[str]:
    """The #SBATCH options of one torchrun on each of `nnodes` nodes of `per` GPUs; with the
    job's `name` (a whole job, or a heterogeneous job's first component) its name and output;
    with a `segment`, its nodes in segments of that many nodes of one block (`segment_nodes`)."""
    out = [f"--nodes={nnodes}", "--ntasks-per-node=1", f"--gpus-per-node={per}"]
    out += [] if segment is None else [f"--segment={segment}"]
    out += ["--exclusive", f"--time={DEFAULT_TIME}"]
    return out if name is None else [f"--job-name={name}", *out, f"--output={name}-%j.out"]


def segment_nodes(cluster: ClusterSpec, where: str, field: str) -> int | None:
    """The Slurm segment, in nodes, that places the job as the plan is priced: rank r on NVLink
    domain r // `domain_used` (`planner.model.placement`). None where a domain is one node or less
    (8-GPU nodes: Slurm's nodes are the domains), the job fills every domain it uses (whatever block
    Slurm picks is then priced right) or holds one node at most. A job within one used domain asks
    for one segment of all its nodes. `field`: how messages name the plan's setting (`where`: the
    plan file). Bad input where no segment places it: a node count that is not whole segments
    (Slurm's sbatch --segment needs the node count a multiple of the segment size); a domain share
    of whole nodes the plan checks itself (`planner.inputs.tiers.check_domain_used`)."""
    span, used, per = cluster.tiers[0].span_gpus, cluster.domain_used, cluster.gpus_per_node
    n = cluster.num_gpus
    if span is None or used is None or span <= per or used >= span or n <= per:
        return None
    segment = min(used, n) // per
    if (n // per) % segment:
        raise InputError(
            f"{where}: {field}: {used} GPUs ({segment} nodes) of each NVLink domain: the job's "
            f"{n // per} nodes are not whole segments of {segment} (Slurm --segment)"
        )
    return segment


def sbatch_directives(plan: Plan, name: str) -> list[str]:
    """The #SBATCH options of a job of one torchrun per node (Megatron-LM's and torchtitan's)."""
    n = nodes(plan)
    field = "cluster.gpus_per_domain_used"
    segment = segment_nodes(plan.job.cluster, str(plan.path), field)
    return node_directives(n.nnodes, n.nproc_per_node, name, segment)


FIRST_NODE_MASTER = (
    "\n# the first node of the allocation hosts the c10d rendezvous\n"
    'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")\n'
    'MASTER_ADDR="${NODES[0]}"\n\n'
)
"""MASTER_ADDR in a job of one torchrun per node: the allocation's first node."""


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The whole sbatch script (with pools: a heterogeneous job, `planner.emit.pools`)."""
    if plan.job.pools:
        return render_hetjob(plan, job_name, headroom_pct=headroom_pct)
    n = nodes(plan)
    p = predict(plan, headroom_pct)
    name = sbatch_name(job_name)
    directives = sbatch_directives(plan, name)
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "slurm", job_name, p),
                "submit with sbatch; set --time (and --account / --partition if your cluster "
                "needs them) in the #SBATCH lines",
            ]
        )
        + "".join(f"#SBATCH {d}\n" for d in directives)
        + "\nset -euo pipefail\n\n"
        + settings_block(job_name, False, p.checkpoint_interval_steps)
        + FIRST_NODE_MASTER
        + torchrun_body(plan, n, '"$SLURM_JOB_ID"')
        + "# one torchrun per node; it starts one worker per GPU\n"
        + f'srun --kill-on-bad-exit=1 torchrun "${{DISTRIBUTED_ARGS[@]}}" {megatron_words(plan)}\n'
    )


def render_hetjob(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The sbatch script of a heterogeneous job, one component per pool."""
    p = predict(plan, headroom_pct)
    name = sbatch_name(job_name)
    pools = pool_nodes(plan)
    total = sum(n for _, n, _, _ in pools)
    per = pools[0][2]
    expr = procid_node_rank(plan)  # the data-parallel replicas across pools: nodes interleave
    rank = "$SLURM_PROCID" if expr is None else f"$(( {expr} ))"
    sb = ""
    for k, (pool, count, gpus, _) in enumerate(pools):
        if k:
            sb += "#SBATCH hetjob\n"
        sb += f"# component {k}: pool {comment_safe(pool)}\n"
        field = f"cluster.pools[{k}].gpus_per_domain_used"
        segment = segment_nodes(plan.job.pools[k].cluster, str(plan.path), field)
        directives = node_directives(count, gpus, name if k == 0 else None, segment)
        sb += "".join(f"#SBATCH {d}\n" for d in directives)
    groups = ",".join(str(k) for k in range(len(pools)))
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "slurm", job_name, p),
                *rank_lines(plan),
                "a Slurm heterogeneous job: add each component's --partition / --constraint "
                "(its pool's nodes) to its #SBATCH lines; submit with sbatch",
            ]
        )
        + sb
        + "\nset -euo pipefail\n\n"
        + settings_block(job_name, False, p.checkpoint_interval_steps)
        + "\n# the first node of component 0 (the first pipeline ranks) is the master\n"
        + 'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0")\n'
        + 'MASTER_ADDR="${NODES[0]}"\n\n'
        + env_block(plan)
        + "\n"
        + pool_distributed(total, per, None)
        + megatron_arrays(plan)
        + "\n# one task per node over every component in pipeline order: SLURM_PROCID is the\n"
        + "# node rank, so pipeline rank r lands on its pool\n"
        + "# shellcheck disable=SC2016 # SLURM_PROCID expands in each task, not here\n"
        + f"srun --het-group={groups} --kill-on-bad-exit=1 bash -c \\\n"
        + f'    \'exec torchrun --node-rank "{rank}" "$@"\' \\\n'
        + f'    torchrun-node "${{DISTRIBUTED_ARGS[@]}}" {megatron_words(plan)}\n'
    )
