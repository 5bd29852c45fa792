"""Launch files for a plan over heterogeneous pools (issue 25): a Slurm heterogeneous job and a
torchrun script per pool, placing every pipeline rank on its pool.

Megatron-LM's rank order is tp-cp-ep-dp-pp (`parallel_state`, order "tp-cp-ep-dp-pp"): global
rank g = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank)), EP folded inside the dp x cp ranks,
so pipeline rank r holds global ranks [r s, (r + 1) s), s = tp x cp x dp. torchrun numbers a
worker node_rank x nproc_per_node + local_rank; so with node ranks in pipeline order, pool k's
nodes (its ranks' global ranks / GPUs per node) get node ranks [o_k, o_k + nodes_k). The files
use torchrun's static rendezvous (`--node-rank`, `--master-addr`), which keeps that order, not
c10d's, which numbers nodes in arrival order.

Slurm: one hetjob component per pool, in pipeline order (`#SBATCH hetjob` between them; the
user adds each component's --partition / --constraint); one `srun --het-group` step over all of
them, one task per node, so SLURM_PROCID is the node's place in pipeline order. torchrun: one
script per pool, run on each of its nodes with NODE_INDEX set (0 .. nodes - 1). The scripts
themselves: `planner.emit.slurm.render_hetjob`, `planner.emit.torchrun.render_pool`; what they
share (the pools' nodes, the header's rank lines) is here.
"""

from __future__ import annotations

from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model.pools import pool_stages, stage_gpus


def pool_nodes(plan: Plan) -> list[tuple[str, int, int, int]]:
    """Per pool in pipeline order: (name, nodes, GPUs per node, first node rank); each pool must
    be whole nodes of one GPU count (torchrun's nproc_per_node is one number)."""
    out, first = [], 0
    pers = {p.cluster.gpus_per_node for p in plan.job.pools}
    if len(pers) > 1:
        raise InputError(
            f"{plan.path}: cluster.pools: gpus_per_node differs between pools ({sorted(pers)}); "
            "torchrun starts the same number of workers on every node"
        )
    for k, p in enumerate(plan.job.pools):
        n, per = p.cluster.num_gpus, p.cluster.gpus_per_node
        if n % per:
            raise InputError(
                f"{plan.path}: cluster.pools[{k}].num_gpus: {n} GPUs are not a whole number of "
                f"nodes of gpus_per_node ({per})"
            )
        out.append((p.name, n // per, per, first))
        first += n // per
    return out


def rank_lines(plan: Plan) -> list[str]:
    """The header's account of where every pipeline rank runs."""
    lay = plan.require_layout()
    s = stage_gpus(lay)
    lines = [
        "rank order (Megatron tp-cp-ep-dp-pp): global rank = tp_rank + tp x (cp_rank + cp x "
        f"(dp_rank + dp x pp_rank)); tp {lay.tp}, cp {lay.cp}, dp {lay.dp}, pp {lay.pp}: "
        f"pipeline rank r holds global ranks [{s} r, {s} (r + 1))",
    ]
    r = 0
    counts = pool_stages(plan.job, lay)
    for (name, nodes, per, first), n in zip(pool_nodes(plan), counts, strict=True):
        lines.append(
            f"pool {name!r}: pipeline ranks {r}-{r + n - 1}, global ranks {r * s}-"
            f"{(r + n) * s - 1}, node ranks {first}-{first + nodes - 1} ({nodes} x {per} GPUs)"
        )
        r += n
    if lay.recompute == "full":
        lines.append(
            "recompute: Megatron takes one --recompute-num-layers for every stage (block: each "
            "stage recomputes min(N, its layers)); layers per stage: "
            "--pipeline-model-parallel-layout"
        )
    return lines
