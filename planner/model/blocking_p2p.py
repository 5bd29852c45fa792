"""The interleaved schedule without its p2p overlap (`Layout.overlap_p2p_comm` false, Megatron
--no-overlap-p2p-communication): blocking, batched pipeline exchanges on the compute stream.

NVIDIA/Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py: each steady iteration
runs its chunk forward and chunk backward, then one `send_forward_backward_recv_forward_backward`
(:1900-1949) that sends the forward's output to the next rank and the backward's input gradient to
the previous one and receives the next input and gradient, as one batch_isend_irecv
(p2p_communication.py:22-57; batch_p2p_comm = not overlap_p2p_comm, training/argument_utils.py
:307) waited on and followed by torch.cuda.synchronize (p2p_communication.py:416-424, as 1F1B's);
the warm-up and cool-down exchanges block in both modes (:1633-1660, :2053-2058). Nothing hides a
hop: as 1F1B's blocking sends (`cost._exchanges`), each exchange sits in its rank's time per
micro-batch, each message its sender's hop (the sends of a batch leave through the same GPU's links
one after the other, as bandwidth allows), and the closed form (`schedule.pipeline_time`) takes the
rest: the slowest stage paces the steady state, the others' share the fill and drain. The
interleaved schedule's pipeline is a ring: the last rank sends chunks 0 .. vpp - 2 on to rank 0 and
rank 0 its input gradients of chunks 1 .. vpp - 1 back to it, over the ring's wrap link.

Checked against an event simulation of Megatron's order with each exchange a rendezvous of its
peers' (tests/model/test_blocking_p2p.py): with equal stages, while a hop is at most a chunk's
forward, it lies 4 - 2 / vpp hops above it (the simulation's ends wait less on the fill), with
uneven stages and a hop up to half a chunk's forward within -5% .. +8% of its step (above by the
most at m = pp, where the fill and drain weigh most).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.mtp_hops import SHAPE_BYTES, Hops, standalone_rank


def exchanges(job: Job, lay: Layout, size: float, at: Callable[[float], Hops]) -> list[float]:
    """Each rank's seconds per micro-batch in its blocking exchanges: a hop per message it
    sends, vpp forward outputs to the next rank (vpp - 1 on the last rank, whose last chunk ends
    the model) and vpp input gradients to the previous (vpp - 1 on rank 0, whose chunk 0 begins
    it); at vpp 1, 1F1B's (`cost._exchanges`). `size`: one message's bytes; `at(nbytes)`: each
    rank's (previous, next) hop. The wrap between the last rank and rank 0 takes the slowest
    hop (across pools, the link between them). With the MTP layers on their own stage
    (`mtp_hops`) the last chunks' messages from it on carry (1 + D) x as much, and each
    exchange call first swaps shapes (p2p_communication.py:327-329): one a steady iteration."""
    pp, vpp = lay.pp, lay.vpp
    plain = at(size)
    wrap = max(max(h) for h in plain)
    mtp = standalone_rank(job, lay)
    wide = plain if mtp is None else at((1 + job.arch.mtp_num_layers) * size)
    shape = 0.0 if mtp is None else max(max(h) for h in at(SHAPE_BYTES))
    out = []
    for r in range(pp):
        last_prev = (wide if mtp is not None and r > mtp else plain)[r][0]
        last_next = (wide if mtp is not None and r >= mtp else plain)[r][1]
        fwd = (vpp - 1) * (wrap if r == pp - 1 else plain[r][1])
        fwd += 0.0 if r == pp - 1 else last_next
        bwd = (vpp - 1) * (wrap if r == 0 else plain[r][0])
        bwd += 0.0 if r == 0 else last_prev
        out.append(fwd + bwd + vpp * shape)
    return out


def exposed(times: Sequence[float], exchange: Sequence[float], m: int, vpp: int) -> float:
    """Seconds the exchanges add to the interleaved step (`schedule.pipeline_time`'s closed form
    with each stage's time per micro-batch `times` and its exchanges `exchange` added, less it
    without them)."""
    with_ = [t + x for t, x in zip(times, exchange, strict=True)]
    steady = m * (max(with_) - max(times))
    return steady + (sum(with_) - max(with_) - (sum(times) - max(times))) / vpp
