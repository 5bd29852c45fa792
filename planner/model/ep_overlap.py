"""How much of a stage's expert all-to-all its overlap leaves exposed (moved out of
`planner.model.stage_time`, which re-exports both functions).

EP overlap (`ep_exposed`, Megatron --overlap-moe-expert-parallel-comm: merged forward-backward,
`schedule.unmerged_share`): a merged pair's all-to-all runs under the other micro-batch's compute,
which loses `comms.sm_share` of the SMs to it (COMM_KERNEL_SMS: DeepSeek-V3's and DeepEP's 20;
HybridEP docs/README_Hybrid-EP.md reaches the NIC's bandwidth with 8-16). CPU offloading
(`stage_offload.offload_exposed`, Megatron --cpu-offloading-num-layers): Transformer Engine's
schedule (`planner.model.cpu_offload`) shows each host transfer beyond the layers it may run
under.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.model.schedule import unmerged_share


def ep_exposed(
    lay: Layout, rank: int, m: int, a2a: float, window: float, share: float, shared: float = 0.0
) -> tuple[float, float]:
    """(exposed, hidden) seconds per micro-batch of a stage's expert all-to-all (`a2a`, forward
    and backward). Without `lay.ep_comm_overlap` all of it is exposed but the `shared` seconds
    its shared experts run under (`Layer.ep_shared`, Megatron --moe-shared-expert-overlap). With
    it (Megatron's merged forward-backward, `schedule.unmerged_share`), a merged pair's
    all-to-all runs under the other micro-batch's compute (`window`: the stage's forward +
    backward compute per micro-batch) and shows only beyond it; the forwards and backwards that
    run alone expose theirs. The hidden part still takes `share` of the SMs (`comms.sm_share`)
    from the compute it runs under: that much of it counts as exposed too. Optimistic otherwise:
    each all-to-all really hides under one attention or MLP phase of the other pass."""
    if not lay.ep_comm_overlap:
        return a2a - (1 - share) * shared, shared
    alone = unmerged_share(lay.pp, lay.vpp, rank, m, lay.microbatch_group_size_per_vp_stage)
    shown = alone * a2a + (1 - alone) * max(a2a - window, 0.0)
    hidden = a2a - shown
    return shown + share * hidden, hidden


def a2a_floor(lay: Layout, a2a: float, shared: float, window: float, share: float) -> float:
    """The least a stage's expert all-to-all (`a2a`, of which `shared` under its shared experts)
    adds to its `window` of compute per micro-batch, as `ep_exposed` charges it with every
    forward and backward merged (the search's bounds: the merged share only shrinks as more
    micro-batches run alone)."""
    if lay.ep_comm_overlap:
        return max(a2a - window, 0.0) + share * min(a2a, window)
    return a2a - (1 - share) * shared
