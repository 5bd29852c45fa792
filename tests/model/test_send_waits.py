"""The interleaved schedule's waits on its forward sends (schedule.interleaved_p2p_exposed's
`waits`, cost.estimate's pp_comm_exposed).

Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py:1811-1815: in
`pp_post_forward`, with deallocate_pipeline_outputs (training/argument_utils.py:305), the send of
the forward's output is waited on before the output is freed; the wait holds the compute stream
until the NCCL send has completed, which needs the peer's receive (NCCL ncclSend: "blocking for
the GPU"). The sender's next op starts a hop after its forward ends.

Oracle: an event simulation written here: each rank runs planner.model.schedule.op_order's
Megatron order (checked against Megatron's table in tests/model/test_schedule.py), an op starts
when its rank is free and its input is there (a forward's from the previous rank, or rank 0's
chunk c from the last rank's chunk c - 1; a backward's from the next rank, or the last rank's
chunk c from rank 0's chunk c + 1; the last chunk's backward after its own forward), an input
from another rank a hop after its op ends; with the waits, a forward that sends (all but the
last rank's last chunk) holds its rank a hop longer.
"""

from __future__ import annotations

import random

import pytest
from cost_jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import reframe
from planner.model import cost, schedule
from planner.model.schedule import interleaved_p2p_exposed, op_order


def _makespan(
    pp: int, m: int, fs: list[float], bs: list[float], vpp: int, hop: float, waits: bool
) -> float:
    order = [op_order(pp, m, vpp, r) for r in range(pp)]
    done: dict[tuple[str, int, int, int], float] = {}
    free, pos = [0.0] * pp, [0] * pp
    while any(pos[r] < len(order[r]) for r in range(pp)):
        for r in range(pp):
            while pos[r] < len(order[r]):
                kind, i, c = order[r][pos[r]]
                if kind == "F":
                    src = (kind, r - 1, i, c) if r else ("F", pp - 1, i, c - 1)
                    dep = src if r or c else None
                elif r < pp - 1:
                    dep = ("B", r + 1, i, c)
                else:
                    dep = ("B", 0, i, c + 1) if c < vpp - 1 else ("F", r, i, c)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (hop if dep[1] != r else 0.0)
                end = max(free[r], ready) + (fs[r] if kind == "F" else bs[r]) / vpp
                done[(kind, r, i, c)] = end
                sends = kind == "F" and not (r == pp - 1 and c == vpp - 1)
                free[r] = end + (hop if waits and sends else 0.0)
                pos[r] += 1
    return max(done.values())


def test_equal_stages_expose_the_last_ranks_waits_beyond_pp_micro_batches() -> None:
    # equal stages (forward 1, backward 2), a hop of 1% and 5% of a chunk's forward: the waits
    # add (vpp - 1) (m - pp) hops, the last rank's sends past the fill and drain (brute force)
    for pp in (2, 3, 4, 6):
        for vpp in (2, 3, 4):
            for k in (1, 2, 3, 5):
                for share in (0.01, 0.05):
                    m, hop = pp * k, share / vpp
                    ones, twos = [1.0] * pp, [2.0] * pp
                    extra = _makespan(pp, m, ones, twos, vpp, hop, True)
                    extra -= _makespan(pp, m, ones, twos, vpp, hop, False)
                    assert extra == pytest.approx((vpp - 1) * (m - pp) * hop), (pp, vpp, m)
                    closed = interleaved_p2p_exposed(vpp, m, hop, ones, twos, waits=vpp - 1)
                    closed -= interleaved_p2p_exposed(vpp, m, hop, ones, twos)
                    assert closed == pytest.approx(extra), (pp, vpp, m)


def test_uneven_stages_within_the_band() -> None:
    # uneven stages, a hop up to a fifth of a chunk's forward: the closed form's waits within
    # -4% .. +2.5% of the simulated step of what the simulation's waits add
    rng = random.Random(1)
    for _ in range(150):
        pp, vpp = rng.randint(2, 6), rng.randint(2, 4)
        m = pp * rng.randint(1, 6)
        fs = [rng.uniform(0.8, 1.2) for _ in range(pp)]
        bs = [2 * f * rng.uniform(0.9, 1.1) for f in fs]
        hop = rng.uniform(0.0, 0.2) * min(fs) / vpp
        plain = _makespan(pp, m, fs, bs, vpp, hop, False)
        extra = _makespan(pp, m, fs, bs, vpp, hop, True) - plain
        worst = max(range(pp), key=lambda r: fs[r] + bs[r])
        waits = vpp - (worst == pp - 1)
        closed = interleaved_p2p_exposed(vpp, m, hop, fs, bs, waits=waits)
        closed -= interleaved_p2p_exposed(vpp, m, hop, fs, bs)
        assert -0.04 <= (closed - extra) / plain <= 0.025, (pp, vpp, m, hop)


def test_estimate_adds_the_waits_on_megatron_only() -> None:
    # Llama 3.1 70B, tp 8 SP, pp 8, vpp 2, m 64: the pp exposure grows by (m - pp) x waits
    # hops, waits = vpp of the slowest rank's sends a micro-batch (vpp - 1 on the last rank,
    # whose last chunk sends nothing); the pipeline's message delay itself (p2p_hop) unchanged
    j = job("llama3.1-70b", gbs=64)
    lay = Layout(tp=8, pp=8, dp=1, sequence_parallel=True, vpp=2)
    p = cost.estimate(j, lay)
    fwd, bwd = zip(*p.stages, strict=True)
    hop = p.p2p_hop
    assert hop > 0
    without = schedule.interleaved_p2p_exposed(2, 64, hop, fwd, bwd)
    added = p.breakdown.pp_comm_exposed - without
    assert added == pytest.approx((64 - 8) * 1 * hop) or added == pytest.approx((64 - 8) * 2 * hop)
    # torchtitan's Interleaved1F1B (torch.distributed.pipelining) runs no such wait
    titan = reframe(j, "torchtitan")
    t = cost.estimate(titan, lay)
    fwd, bwd = zip(*t.stages, strict=True)
    assert t.breakdown.pp_comm_exposed == pytest.approx(
        schedule.interleaved_p2p_exposed(2, 64, t.p2p_hop, fwd, bwd)
    )
