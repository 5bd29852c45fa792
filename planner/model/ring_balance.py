"""Context parallelism's causal load balance under torchtitan (ring attention, PyTorch's
torch.distributed.tensor.experimental context_parallel with the "headtail" load balancer).

With a causal mask, rank i of cp holding the i-th contiguous s/cp chunk of the sequence attends to
chunks 0..i: i whole blocks of (s/cp)^2 and the half diagonal one, i + 1/2 blocks. The ranks run
in lock step (the backward passes dK/dV round the ring at every step, and every collective
after the attention waits for the slowest rank), and at step j > 0 some rank has a whole block
to compute, so every rank takes the last rank's cp - 1/2 blocks. The head-tail split
(each rank holds chunk i and chunk 2cp - 1 - i of 2cp) gives each rank cp/2 blocks, the average:
what `planner.model.layer_time` times (half the s x s matrix per sequence, spread evenly). Without
it (`[torchtitan] cp_load_balance = false`, context_parallel_load_balancer None) the attention
kernels take (cp - 1/2) / (cp / 2) = (2cp - 1) / cp times as long (`ring_skew`).

Memory does not change: each rank holds s/cp tokens' activations and the all-gathered K/V
(`planner.model.titan_cp`) either way. Megatron-LM's p2p context parallelism always splits
head-tail (no setting).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job


def ring_skew(job: Job, lay: Layout) -> float:
    """How much longer the causal attention kernels take than balanced: (2cp - 1) / cp for a
    torchtitan plan with cp > 1 and cp_load_balance off, else 1."""
    if lay.cp == 1 or job.framework != "torchtitan" or job.titan.cp_load_balance:
        return 1.0
    return (2 * lay.cp - 1) / lay.cp
