"""torchtitan's forced-balance routing priced by its exact round robin (planner.model.round_robin,
routing_load's torchtitan branch), Megatron's random routing left as it was.

Oracles:
- a brute-force replay of torchtitan's index construction, written here from the source:
  pytorch/torchtitan b5bcd76c torchtitan models common moe.py:224-231 (the same at e347b1e5
  torchtitan models moe moe.py:242-247): topk_expert_ids = arange(T * k).reshape(T, k) % E, over
  the T tokens one router call scores; b5bcd76c moe.py:424-429 counts each token once per expert
  it picks (a one-hot routing map summed over tokens); an EP rank holds E / ep consecutive
  experts and receives what every rank of its group routes to them (token_dispatcher.py:293-306,
  the output splits); e347b1e5's ReordererSequenceParallel hands TP rank j the rows
  [j T / tp, (j + 1) T / tp) of its router's output (distributed/expert_parallel.py:282-290), and
  its expert-parallel group is ep consecutive ranks with TP innermost
  (distributed/parallel_dims.py:149-158);
- hand arithmetic for Qwen3-30B-A3B's remainders and for Megatron's unchanged figures
  (random_routing_load and the 7-spread memory bound, written out).
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import round_robin, routing_load
from planner.model.routing_load import memory_load, memory_loads, node_load, step_load


def _router_ids(tokens: int, topk: int, experts: int) -> np.ndarray:
    """One router call's (T, k) expert ids under debug.moe_force_load_balance (moe.py:224-231)."""
    return np.arange(tokens * topk, dtype=np.int64).reshape(tokens, topk) % experts


def _routing_map(ids: np.ndarray, experts: int) -> np.ndarray:
    """The (T, E) one-hot routing map of moe.py:424-428 (scatter_ of True at each id)."""
    rmap = np.zeros((ids.shape[0], experts), dtype=bool)
    np.put_along_axis(rmap, ids, True, axis=1)
    return rmap


def _received(sources: list[np.ndarray], experts: int, units: int, distinct: bool) -> np.ndarray:
    """What each of `units` units (E / units consecutive experts) receives from the sources'
    expert ids: copies (the routing maps summed over tokens and the unit's experts), or
    tokens reaching the unit at least once."""
    out = np.zeros(units, dtype=np.int64)
    for ids in sources:
        rmap = _routing_map(ids, experts).reshape(ids.shape[0], units, experts // units)
        out += rmap.any(axis=2).sum(axis=0) if distinct else rmap.sum(axis=(0, 2))
    return out


def _brute_load(sources: list[np.ndarray], experts: int, units: int, distinct: bool) -> float:
    got = _received(sources, experts, units, distinct)
    return float(got.max() / got.mean())


GRID = [
    # (tokens, experts, top_k, ep): exact shares, and remainders below, at and above E / ep
    (4096, 128, 8, 8),  # Qwen3-30B-A3B, T k a multiple of E
    (4100, 128, 8, 8),  # remainder 32: two ranks' worth of the first experts
    (4097, 128, 8, 8),  # remainder 8, within rank 0's 16 experts
    (1001, 8, 2, 4),  # Mixtral-like, remainder 2
    (1003, 8, 2, 8),  # one expert per rank, remainder 6
    (37, 64, 6, 16),  # fewer copies than experts: T k = 222 = 3 x 64 + 30
    (5, 256, 8, 32),  # 40 copies over 256 experts, 5 ranks of 8 get them all
    (333, 32, 4, 2),  # gpt-oss-20b-like, remainder 20
]


@pytest.mark.parametrize(("tokens", "experts", "topk", "ep"), GRID)
def test_counts_match_a_replay_of_torchtitans_indices(
    tokens: int, experts: int, topk: int, ep: int
) -> None:
    ids = _router_ids(tokens, topk, experts)
    per_expert = _routing_map(ids, experts).sum(axis=0)
    m = experts // ep
    for e in range(experts):
        assert round_robin.copies(0, tokens, topk, experts, e, e + 1) == per_expert[e]
    for r in range(ep):
        want = int(per_expert[r * m : (r + 1) * m].sum())
        assert round_robin.copies(0, tokens, topk, experts, r * m, (r + 1) * m) == want
        reach = int(_routing_map(ids, experts)[:, r * m : (r + 1) * m].any(axis=1).sum())
        assert round_robin.reaching(0, tokens, topk, experts, r * m, (r + 1) * m) == reach
    # a group of ep ranks each routing its own T from slot 0 (b5bcd76c): the busiest rank and
    # the busiest expert over their even shares
    group = [ids] * ep
    sources = (0,) * ep
    for units in (ep, experts):
        want_load = _brute_load(group, experts, units, distinct=False)
        assert round_robin.busiest(sources, tokens, topk, experts, units) == pytest.approx(
            want_load, rel=1e-12
        )
    want_reach = _brute_load(group, experts, ep, distinct=True)
    got_reach = round_robin.busiest(sources, tokens, topk, experts, ep, distinct=True)
    assert got_reach == pytest.approx(want_reach, rel=1e-12)


@pytest.mark.parametrize(("tokens", "experts", "topk", "ep"), GRID)
@pytest.mark.parametrize("tp", [2, 4])
def test_e347b1e5_tp_chunks_match_a_replay(
    tokens: int, experts: int, topk: int, ep: int, tp: int
) -> None:
    # e347b1e5 with EP over TP (etp 1): one router call over the whole T, its rows split over
    # the TP ranks; group g = ranks g ep .. g ep + ep - 1, TP rank = rank mod tp
    whole = tokens * tp  # the tokens the TP group's router numbers
    ids = _router_ids(whole, topk, experts)
    for g in range(tp):
        ranks = [(g * ep + i) % tp for i in range(ep)]
        rows = [ids[j * tokens : (j + 1) * tokens] for j in ranks]
        sources = tuple(j * tokens for j in ranks)
        for distinct in (False, True):
            want = _brute_load(rows, experts, ep, distinct)
            got = round_robin.busiest(sources, tokens, topk, experts, ep, distinct)
            assert got == pytest.approx(want, rel=1e-12)


def _titan(seq: int, **kw: object) -> Job:
    return job(
        "qwen3-30b-a3b",
        "h100-sxm-80gb",
        32,
        seq,
        64,
        framework="torchtitan",
        moe_router_force_load_balancing=True,
        **kw,
    )


def _replayed_load(seq: int, lay: Layout, units: int, distinct: bool) -> float:
    """The larger of both torchtitan versions' busiest unit, replayed (module docstring)."""
    experts, topk = 128, 8  # Qwen3-30B-A3B
    numbered = lay.micro_batch_size * seq // lay.cp
    b5 = [_router_ids(numbered // lay.tp, topk, experts)] * lay.ep
    loads = [_brute_load(b5, experts, units, distinct)] if lay.expert_tp == 1 else []
    ids = _router_ids(numbered, topk, experts)
    n = numbered // lay.tp if lay.expert_tp == 1 else numbered
    for g in range(lay.tp):
        chunks = [(g * lay.ep + i) % lay.tp if lay.expert_tp == 1 else 0 for i in range(lay.ep)]
        loads.append(
            _brute_load([ids[j * n : (j + 1) * n] for j in chunks], experts, units, distinct)
        )
    return max(loads)


@pytest.mark.parametrize("seq", [4096, 4100, 4104, 2052])
@pytest.mark.parametrize(
    "lay",
    [
        Layout(tp=1, pp=1, dp=32, ep=8, zero_stage=3),
        Layout(tp=1, pp=1, dp=32, ep=16, zero_stage=3, micro_batch_size=2),
        Layout(tp=2, pp=1, dp=16, ep=8, etp=1, zero_stage=3),
        Layout(tp=4, pp=1, dp=8, ep=2, etp=1, zero_stage=3),
        Layout(tp=2, pp=1, dp=16, ep=4, zero_stage=3),  # etp = tp (e347b1e5's ETP)
    ],
)
def test_torchtitan_loads_are_the_replayed_ones(seq: int, lay: Layout) -> None:
    j = _titan(seq)
    want = _replayed_load(seq, lay, lay.ep, distinct=False)
    assert step_load(j, lay) == pytest.approx(want, rel=1e-12)
    # memory: the exact load, no sampling tail; the running layer the same
    assert memory_load(j, lay) == pytest.approx(want, rel=1e-12)
    assert memory_loads(j, lay) == pytest.approx((want, want), rel=1e-12)
    # the NIC leg: the busiest of 2 nodes' distinct tokens (share given) or copies
    for distinct in (False, True):
        share = 0.5 if distinct else None
        replayed = _replayed_load(seq, lay, 2, distinct)
        assert node_load(j, lay, 2, share) == pytest.approx(replayed, rel=1e-12)


def test_qwen3_at_ep8_by_hand() -> None:
    lay = Layout(tp=1, pp=1, dp=32, ep=8, zero_stage=3)
    # seq 4096, mbs 1: each rank's router numbers 4096 x 8 = 32768 = 256 x 128 slots, 256
    # copies for every expert: every rank receives exactly its share
    assert step_load(_titan(4096), lay) == 1.0
    assert memory_load(_titan(4096), lay) == 1.0
    # seq 4100: 32800 = 256 x 128 + 32 slots, experts 0-31 get 257 from each of the 8 ranks:
    # ranks 0 and 1 (16 experts each) receive 8 x 16 x 257 = 32896, the share is 8 x 32800 / 8
    assert step_load(_titan(4100), lay) == pytest.approx(32896 / 32800, rel=1e-12)
    # memory takes the same exact load (before: Megatron's 7-spread bound, 1.0376)
    assert memory_load(_titan(4100), lay) == pytest.approx(32896 / 32800, rel=1e-12)


def test_megatron_forced_balance_is_unchanged() -> None:
    # Megatron's forced balance stays random routing (Megatron-LM d98e8a64 transformer MoE
    # router.py:861-863 apply_random_logits, moe_utils.py:1277-1279 normal_ logits per EP rank)
    lay = Layout(tp=1, pp=1, dp=32, ep=8, zero_stage=3)
    titan = _titan(4096)
    megatron = replace(titan, framework="megatron")
    # the block: 8 ranks x 4096 tokens = 32768; a rank's copies mu = 32768 x 8 / 8 = 32768,
    # variance 32768 x (8 / 8) x (128 - 8) / (128 - 1); s / mu = sqrt(32768 x 120 / 127) / 32768
    rel = math.sqrt(32768 * 120 / 127) / 32768
    assert rel == pytest.approx(0.0053699, abs=1e-7)
    # step: 1 + z(8) x s / mu, z(8) by Blom: Phi^-1((8 - 0.375) / (8 + 0.25)) = Phi^-1(0.92424)
    z8 = routing_load.expected_max_normal(8)
    assert z8 == pytest.approx(NormalDist().inv_cdf(7.625 / 8.25), rel=1e-12)
    assert step_load(megatron, lay) == pytest.approx(1 + z8 * rel, rel=1e-12)
    # memory: 7 spreads above the share, 1 + 7 x 0.0053699 = 1.037589
    assert memory_load(megatron, lay) == pytest.approx(1 + 7 * rel, rel=1e-12)
    assert memory_load(megatron, lay) == pytest.approx(1.037589, abs=1e-6)
    # and torchtitan's twin is the round robin's exact share
    assert step_load(titan, lay) == memory_load(titan, lay) == 1.0
