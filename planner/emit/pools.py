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
share (the pools' nodes, the header's rank lines, each node's rank) is here.

With the data-parallel replicas across the pools (`Layout.dp_pools` = P, one distributed-optimizer
instance per pool, `--num-distributed-optimizer-instances P`): Megatron's instance k is the k-th
slice of every data-parallel group (parallel_state.py), data-parallel ranks [k dp / P,
(k + 1) dp / P) of every stage, global ranks [r s + k c, r s + (k + 1) c) of stage r, c = tp x cp
x dp / P; so pool k's j-th node, q = c / GPUs per node of them per stage, takes node rank
P (j - j % q) + k q + j % q (`node_rank`: stage j / q), and in the Slurm job, whose one step
numbers the nodes pool after pool (SLURM_PROCID = k pp q + j), `procid_node_rank`.
"""

from __future__ import annotations

from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model.pools import pool_stages, replica_gpus, stage_gpus

READ_BACK_NOTE = (
    "cluster.pools have no Megatron-LM flag: every rank gets these same arguments (the launcher "
    "places each pipeline rank on its pool), so `planner check --megatron-args` reads them back "
    "as one GPU kind (its --gpu for every rank) and predicts another step and peak than this "
    "header's, which are the pools'; check the plan file for those"
)
"""The note of a pooled plan's Megatron-LM arguments (`planner.emit.megatron.arguments`): what
they cannot express, so that a read-back's figures are not taken for the plan's."""


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


def node_rank(plan: Plan, k: int, index: str) -> str:
    """Shell arithmetic for the node rank of pool k's node number `index` (0 .. its nodes - 1)."""
    lay = plan.require_layout()
    _, _, per, first = pool_nodes(plan)[k]
    if lay.dp_pools <= 1:
        return f"{first} + {index}"
    q = replica_gpus(lay) // per
    return f"{lay.dp_pools} * ({index} - {index} % {q}) + {k * q} + {index} % {q}"


def procid_node_rank(plan: Plan) -> str | None:
    """Shell arithmetic for a node's rank from its SLURM_PROCID in the heterogeneous job's one
    step (pool after pool); None where the two are equal (the pipeline across the pools)."""
    lay = plan.require_layout()
    if lay.dp_pools <= 1:
        return None
    per = pool_nodes(plan)[0][2]
    q = replica_gpus(lay) // per
    n = lay.pp * q  # nodes per pool
    j = f"SLURM_PROCID % {n}"
    return f"{lay.dp_pools} * ({j} - {j} % {q}) + {q} * (SLURM_PROCID / {n}) + {j} % {q}"


def rank_lines(plan: Plan) -> list[str]:
    """The header's account of where every pipeline rank runs."""
    lay = plan.require_layout()
    if lay.dp_pools > 1:
        return _replica_lines(plan)
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


def _replica_lines(plan: Plan) -> list[str]:
    """`rank_lines` with the data-parallel replicas across the pools."""
    lay = plan.require_layout()
    s, c, p = stage_gpus(lay), replica_gpus(lay), lay.dp_pools
    per_pool = lay.dp // p
    lines = [
        "rank order (Megatron tp-cp-ep-dp-pp): global rank = tp_rank + tp x (cp_rank + cp x "
        f"(dp_rank + dp x pp_rank)); tp {lay.tp}, cp {lay.cp}, dp {lay.dp}, pp {lay.pp}: "
        f"stage r holds global ranks [{s} r, {s} (r + 1)); the data-parallel replicas span the "
        f"pools: --num-distributed-optimizer-instances {p}, instance k = data-parallel ranks "
        f"[{per_pool} k, {per_pool} (k + 1)) of every stage = global ranks [{s} r + {c} k, "
        f"{s} r + {c} (k + 1)), on pool k; only the gradient all-reduce between the instances "
        "crosses between pools",
    ]
    for k, (name, nodes, per, _) in enumerate(pool_nodes(plan)):
        q = c // per
        ranks = (
            f"node rank r x {p} + {k}"  # one node a replica of a stage
            if q == 1
            else f"node ranks r x {p * q} + {k * q} .. r x {p * q} + {(k + 1) * q - 1}"
        )
        lines.append(
            f"pool {name!r}: data-parallel ranks {per_pool * k}-{per_pool * (k + 1) - 1} of "
            f"every stage, {ranks} for stage r = 0 .. {lay.pp - 1} ({nodes} x {per} GPUs)"
        )
    return lines
