"""Megatron's default gradient sync under the interleaved schedule: each chunk's buckets launched
whole, `rank` backwards after the chunk's last micro-batch's backward
(planner.model.interleaved_sync).

Oracles: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py read by hand --
with grad_sync_func set (training.py:4356-4357, align_grad_reduce default True) the rank's
backward k launches the chunk whose last micro-batch's backward is table entry k - rank
(:1446-1453; chunk mirrored, :1248), the rest after the last backward (:2063-2068) -- timed on
planner.model.schedule.simulate (an independent event simulation of Megatron's order); a
step-by-step replay of the launched chunks on one link; each chunk's parameters summed by hand
(Llama 3.1 8B); and hand arithmetic."""

from __future__ import annotations

import random

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import cost, dp_sync, schedule
from planner.model.interleaved_sync import RankChunks, chunk_exposed, chunk_sync
from planner.model.stage_params import chunk_params, stage_params


def _table(m: int, vpp: int, g: int) -> list[tuple[int, int]]:
    # get_schedule_table (schedules.py:986-1016): groups of g, the last taking what is left
    return [
        (i, c)
        for first in range(0, m, g)
        for c in range(vpp)
        for i in range(first, m if first + g >= m else first + g)
    ]


def _replayed(shares: list[float], gap: float, lead: float) -> float:
    # each chunk's seconds launched at its time before the end (0), chunk vpp - 1 first; one
    # link, first come first served: how far past the end the last finishes
    return _replayed_at(shares, [-max(gap * c, lead) for c in range(len(shares))])


def _replayed_at(shares: list[float], launch: list[float]) -> float:
    # chunk c's shares[c] seconds launched at launch[c] (in order of launch, ties by the
    # higher chunk first, as the cooldown and the final loop launch them); one link
    free = -float("inf")
    for c in sorted(range(len(shares)), key=lambda c: (launch[c], -c)):
        free = max(free, launch[c]) + shares[c]
    return max(free, 0.0)


@pytest.mark.parametrize(
    ("pp", "vpp", "m", "g"),
    [
        (4, 6, 6, 6),
        (4, 2, 8, 4),
        (4, 3, 8, 8),
        (8, 4, 12, 12),
        (4, 3, 10, 5),
        (3, 4, 8, 5),
        # last groups smaller than g: L = 10 mod 6 = 4, 14 mod 5 = 4
        (4, 3, 10, 6),
        (4, 2, 14, 5),
    ],
)
def test_each_chunk_launches_as_long_before_the_end_on_every_rank(
    pp: int, vpp: int, m: int, g: int
) -> None:
    # equal stages, forward 1, backward 2 (a chunk backward 2 / vpp): the step ends with rank
    # 0's last backward; rank r launches chunk c at the end of its backward j_c + r (j_c the
    # chunk's last micro-batch's backward), or after its last backward. Then uneven shares of
    # the sync replayed on one link from those simulated launches: `chunk_exposed` with the
    # rank's own lead, and never more on a later rank than on an earlier one (its drain is
    # longer): what cost.estimate relies on where ranks share a result
    bwd = 2.0
    sched = schedule.simulate(pp, m, 1.0, bwd, vpp, group=g)
    end = max(op.end for ops in sched for op in ops)
    table = _table(m, vpp, g)
    total = m * vpp
    rng = random.Random(pp * 100 + vpp * 10 + m)
    draws = [[rng.uniform(0.0, 2.0 * m) for _ in range(vpp)] for _ in range(20)]
    before = [float("inf")] * len(draws)
    for rank, ops in enumerate(sched):
        backwards = [op for op in ops if op.kind == "B"]
        lay = Layout(pp=pp, vpp=vpp, microbatch_group_size_per_vp_stage=g)
        chunked = chunk_sync(bwd, lay, m, rank)
        assert chunked is not None
        _, gap, lead = chunked
        launched = {}
        for k in range(total):
            j = k - rank
            if j >= 0 and table[j][0] == m - 1:
                launched[vpp - 1 - table[j][1]] = backwards[k].end
        at = [launched.get(c, backwards[-1].end) for c in range(vpp)]
        for c in range(vpp):
            assert end - at[c] == pytest.approx(max(gap * c, lead)), (rank, c)
        for i, shares in enumerate(draws):
            got = chunk_exposed(shares, chunked)
            assert got == pytest.approx(_replayed_at(shares, [a - end for a in at])), rank
            assert got <= before[i] + 1e-9
            before[i] = got


def test_chunk_exposed_is_the_replayed_link() -> None:
    rng = random.Random(3)
    for i in range(1000):
        vpp = rng.randint(2, 12)
        pp = rng.randint(2, 8)
        rank = rng.randrange(pp)
        last = rng.randint(pp, 3 * pp)  # the last group: at least pp
        chunk = rng.uniform(0.01, 1.0)
        red = rng.uniform(0.0, 3.0 * vpp * last * chunk)
        if i % 2:  # uneven: any split of red over the chunks
            cuts = sorted(rng.uniform(0.0, red) for _ in range(vpp - 1))
            shares = [b - a for a, b in zip([0.0, *cuts], [*cuts, red], strict=True)]
        else:
            shares = [red / vpp] * vpp
        chunked = (vpp, last * chunk, rank * chunk)
        assert chunk_exposed(shares, chunked) == pytest.approx(
            _replayed(shares, last * chunk, rank * chunk)
        )


def test_chunk_zeros_share_shows_on_rank_0_where_one_bucket_did() -> None:
    # hand arithmetic: 6 s of gradients in 60 buckets, pp 4, vpp 3, m 8 (g 4: L 4), one
    # micro-batch's backward 3 s (a chunk 1 s): the chunks launch 8, 4 and 0 s before the end
    # on rank 0: chunk 0's 2 s show whole (max(6 / 3, 6 - 2 x 4) = 2); as buckets became
    # final the window gave max(6 - (1 + 2 x 4) + 3 / 60, 0.1) = 0.1
    lay = Layout(pp=4, vpp=3, dp=8, overlap_grad_reduce=True)
    part = [("nvlink", 6.0, 0.0, 0.1, 0.0, ())]
    got = dp_sync.windowed(part, 0.0, 3.0, chunk_sync(3.0, lay, 8))
    assert got == pytest.approx((2.0, 4.0))
    # a 20 s sync: 20 - 2 x 4 = 12 s outlast the compute (chunk 2's window is 8 s)
    part = [("nvlink", 20.0, 0.0, 20.0 / 60, 0.0, ())]
    got = dp_sync.windowed(part, 0.0, 3.0, chunk_sync(3.0, lay, 8))
    assert got == pytest.approx((12.0, 8.0))
    # rank 3 (a drain of 3 chunk backwards): chunk 0's 2 s hide
    assert chunk_exposed([2.0] * 3, chunk_sync(3.0, lay, 8, 3) or (1, 0, 0)) == 0.0


def test_each_chunk_syncs_its_own_parameters() -> None:
    # hand arithmetic, the same stage: 6 s of gradients, chunk 0 holding half the rank's
    # parameters (an embedding) and chunks 1 and 2 a quarter each: 3, 1.5 and 1.5 s launched
    # 0, 4 and 8 s before the end: chunk 0's 3 s show (3 - 0; 4.5 - 4 = 0.5; 6 - 8 < 0), where
    # even thirds showed 2. A second kind on the same tier (2 s, even) adds its thirds: 3 + 2 / 3
    # s on chunk 0. On rank 3 (lead 3 s) chunk 0's 3 s start 3 s before the end: 0.5 s (4.5 -
    # 4) decides
    lay = Layout(pp=4, vpp=3, dp=8, overlap_grad_reduce=True)
    part = [("nvlink", 6.0, 0.0, 0.1, 0.0, (0.5, 0.25, 0.25))]
    assert dp_sync.windowed(part, 0.0, 3.0, chunk_sync(3.0, lay, 8)) == pytest.approx((3.0, 3.0))
    two = [*part, ("nvlink", 2.0, 0.0, 0.1, 0.0, ())]
    got = dp_sync.windowed(two, 0.0, 3.0, chunk_sync(3.0, lay, 8))
    assert got == pytest.approx((3.0 + 2.0 / 3, 8.0 - 3.0 - 2.0 / 3))
    got = dp_sync.windowed(part, 0.0, 3.0, chunk_sync(3.0, lay, 8, 3))
    assert got == pytest.approx((0.5, 5.5))


def _plan() -> tuple[Job, Layout]:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "l40s-48gb", "num_gpus": 64},
        "training": {"seq_length": 4096, "global_batch_size": 128, "precision": "bf16"},
        "parallel": {"tp": 1, "pp": 4, "dp": 16, "vpp": 4, "micro_batch_size": 1},
    }
    p = parse_plan(doc)
    assert p.layout is not None
    return p.job, p.layout


def test_the_embedding_is_in_rank_0s_first_chunk_and_the_output_in_the_last_ranks_last() -> None:
    # Llama 3.1 8B by hand (hidden 4,096, 8 KV heads of 128, FFN 14,336, vocabulary 128,256,
    # untied): a layer is q and o 2 x 4,096^2 = 33,554,432, k and v 2 x 4,096 x 1,024 =
    # 8,388,608, the SwiGLU MLP 3 x 4,096 x 14,336 = 176,160,768 and two norms 8,192:
    # 218,112,000; pp 4 x vpp 4 = 16 virtual stages of 32 / 16 = 2 layers, 436,224,000 a chunk.
    # The embedding 128,256 x 4,096 = 525,336,576 joins chunk 0 of rank 0 only (pre_process:
    # training.py:2389-2399 d98e8a64), the output layer (as many) and the final norm (4,096)
    # the last chunk of rank 3 only (post_process)
    job, lay = _plan()
    chunks = lay.chunk_layers(32)
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    pair = 2 * layer
    emb = 128_256 * 4096
    want = {
        0: [pair + emb, pair, pair, pair],
        1: [pair] * 4,
        2: [pair] * 4,
        3: [pair, pair, pair, pair + emb + 4096],
    }
    for rank in range(4):
        got = chunk_params(job, lay, rank, chunks[rank])
        assert [d for d, _ in got] == want[rank]
        assert sum(d for d, _ in got) == stage_params(job, lay, rank, chunks[rank])[0]
        assert all(e == 0 for _, e in got)


def test_rank_0s_embedding_chunk_shows_in_the_step() -> None:
    # the 8B stage above at ZeRO 1 on 64 L40S: rank 0's chunk 0 holds 961,560,576 of the
    # rank's 961,560,576 + 3 x 436,224,000 = 2,270,232,576 parameters (42.4%), not a quarter.
    # One micro-batch's backward 0.5 s (a chunk 0.125 s), m 8 at g 4 (L 4): the chunks launch
    # 0, 0.5, 1 and 1.5 s before the end. With no forward window the gathers G show whole;
    # evenly, chunk 0's quarter of the R s of reduce-scatters shows (while R <= 2: (c + 1) R / 4
    # - 0.5 c <= R / 4) and three quarters hide, which gives R and G; by parameters chunk 0's
    # 42.4% shows (while R <= 0.5: each later chunk holds 19.2%, 0.192 R <= 0.5)
    job, lay = _plan()
    own = RankChunks(0, chunk_params(job, lay, 0, lay.chunk_layers(32)[0]))
    f0 = own.fractions(0)[0]
    assert f0 == pytest.approx(961_560_576 / 2_270_232_576)
    groups = dp_sync.data_parallel_groups(job.cluster, lay)
    n = stage_params(job, lay, 0, lay.chunk_layers(32)[0])[0]
    exposed, hidden = dp_sync.data_parallel(groups, lay, n, 0.0, 4.0, 0.0, 0.5, 8)
    red = hidden * 4 / 3
    gathers = exposed - red / 4
    assert 0 < red <= 0.5 and gathers > 0  # the premises
    got = dp_sync.data_parallel(groups, lay, n, 0.0, 4.0, 0.0, 0.5, 8, own=own)
    assert got == pytest.approx((gathers + f0 * red, red - f0 * red))
    # in the step, rank 0's tail (its chunk 0 launched last, hiding under nothing) decides
    at = cost.estimate(job, lay)
    assert at.tails[0] == max(at.tails)
