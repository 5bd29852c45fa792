"""The busiest expert-parallel rank's load for the step time (planner.model.routing_load).

Oracles: a brute-force simulation of Megatron's forced-balance routing (random logits, top-k:
moe_utils.RandomSTE then topk) counting each rank's routed copies, for the formula; a brute-force
draw of expert loads spread about the even share, dealt to ranks in order, for the learned-routing
formula; the exact expected maximum of n standard normals by numerical integration, for Blom's
approximation; hand arithmetic for the learned-routing anchor; and Megatron's rules for the other
cases (ep 1 runs its own tokens' copies exactly; a capacity factor drops beyond it, padding runs
exactly it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import layer_time, routing_load
from planner.model.layer_time import gpu_of
from planner.model.routing_load import (
    EXPERT_LOAD_SPREAD,
    expected_max_normal,
    learned_routing_load,
    memory_load,
    random_routing_load,
    step_load,
)
from planner.model.shard import MOE_LOAD_IMBALANCE


def _simulated_load(tokens: int, experts: int, topk: int, ep: int, trials: int) -> float:
    """Mean over trials of the busiest rank's routed copies over the even share, routing as
    RandomSTE does: each token's top-k of E random logits, experts dealt E / ep per rank in
    order."""
    rng = np.random.default_rng(20261202)
    per_rank = experts // ep
    worst = []
    for _ in range(trials):
        logits = rng.standard_normal((tokens, experts))
        chosen = np.argpartition(-logits, topk - 1, axis=1)[:, :topk]
        counts = np.bincount((chosen // per_rank).ravel(), minlength=ep)
        worst.append(counts.max() / (tokens * topk / ep))
    return float(np.mean(worst))


@pytest.mark.parametrize(
    ("tokens", "experts", "topk", "ep"),
    [
        (4096, 8, 2, 4),  # Mixtral-like, 4 ranks of 2 experts
        (2048, 64, 6, 8),  # fine-grained experts, 8 per rank
        (4096, 256, 8, 32),  # DeepSeek-V3's 256 experts, top 8, ep 32
        (1024, 128, 8, 2),  # two ranks, few tokens
    ],
)
def test_forced_balance_load_matches_a_brute_force_routing(
    tokens: int, experts: int, topk: int, ep: int
) -> None:
    simulated = _simulated_load(tokens, experts, topk, ep, trials=60)
    formula = random_routing_load(tokens, experts, topk, ep)
    # the noise above the even share, within 10% (Blom's z is within 0.03, the trials' mean
    # within a few % of its own excess)
    assert formula - 1 == pytest.approx(simulated - 1, rel=0.10)


def test_blom_against_the_integrated_expected_maximum() -> None:
    # E[max of n normals] = integral of x n phi(x) Phi(x)^(n-1) dx, on a fine grid
    x = np.linspace(-9.0, 9.0, 180_001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = np.cumsum(phi) * (x[1] - x[0])
    for n in (2, 3, 8, 32, 256, 1000):
        exact = float(np.sum(x * n * phi * cdf ** (n - 1)) * (x[1] - x[0]))
        assert expected_max_normal(n) == pytest.approx(exact, abs=0.03)
    assert expected_max_normal(1) == 0.0


def test_forced_balance_noise_shrinks_as_tokens_grow() -> None:
    # sigma / mu ~ 1 / sqrt(T): four times the tokens halve the excess
    small = random_routing_load(4096, 256, 8, 32) - 1
    large = random_routing_load(4 * 4096, 256, 8, 32) - 1
    assert large == pytest.approx(small / 2)


def _simulated_learned_load(experts: int, ep: int, trials: int) -> float:
    """Mean over trials of the busiest rank's load over the even share when each expert's load
    is the even share times (1 + EXPERT_LOAD_SPREAD x an independent normal), normalised to the
    same total, and the experts are dealt E / ep per rank in order."""
    rng = np.random.default_rng(20261203)
    loads = 1.0 + EXPERT_LOAD_SPREAD * rng.standard_normal((trials, experts))
    loads /= loads.mean(axis=1, keepdims=True)
    per_rank = loads.reshape(trials, ep, experts // ep).mean(axis=2)
    return float(per_rank.max(axis=1).mean())


@pytest.mark.parametrize(
    ("experts", "ep"),
    [(256, 32), (8, 8), (8, 4), (32, 2), (128, 8), (64, 16)],
)
def test_learned_routing_load_matches_a_brute_force_draw(experts: int, ep: int) -> None:
    simulated = _simulated_learned_load(experts, ep, trials=20_000)
    # the excess over the even share within 8%: Blom's z is within 0.03 of the exact maximum
    # (5.3% of it at two ranks, 0.590 against 0.564), the draw's normalisation to the same total
    # shrinks each expert's spread by sqrt(1 - 1 / E) (up to 1.6% at 32 experts), and the mean
    # of 20,000 trials is within about 1% of its own expectation
    assert learned_routing_load(experts, ep) - 1 == pytest.approx(simulated - 1, rel=0.08)


def test_learned_routing_load_by_layout() -> None:
    # the anchor: DeepSeek-V3's 256 experts on 32 ranks keep the former planning value 1.2
    # (1 + z(32) 0.274 / sqrt(8) = 1 + 2.0667 x 0.274 / 2.8284 = 1.2002)
    assert learned_routing_load(256, 32) == pytest.approx(1.2002, abs=1e-4)
    assert learned_routing_load(256, 32) == pytest.approx(MOE_LOAD_IMBALANCE, abs=0.01)
    # gpt-oss-20b's 32 experts on 2 ranks: z(2) = 0.5895, 1 + 0.5895 x 0.274 / 4 = 1.0404
    assert learned_routing_load(32, 2) == pytest.approx(1.0404, abs=1e-4)
    # one rank runs every expert: no busiest rank
    assert learned_routing_load(8, 1) == 1.0
    # more experts per rank average out; more ranks at the same experts per rank raise the max
    assert learned_routing_load(64, 8) < learned_routing_load(16, 8)
    assert learned_routing_load(64, 8) < learned_routing_load(512, 64)


def _moe(**kw: object) -> Job:
    return job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 64, **kw)


def test_step_load_by_routing() -> None:
    lay = Layout(tp=2, pp=1, dp=32, ep=8, etp=1, sequence_parallel=True)
    # learned routing over 8 ranks of Mixtral's 8 experts, one each:
    # 1 + z(8) 0.274 = 1 + 1.4338 x 0.274 = 1.3929
    learned = step_load(_moe(), lay)
    assert learned == pytest.approx(1.3929, abs=1e-4)
    # forced balance: the block's 8 ranks each dispatch 4096 / tp = 2048 tokens
    forced = step_load(_moe(moe_router_force_load_balancing=True), lay)
    assert forced == pytest.approx(random_routing_load(8 * 2048, 8, 2, 8))
    assert 1.0 < forced < 1.05
    # one expert-parallel rank runs exactly its own tokens' copies
    assert step_load(_moe(), Layout(tp=1, pp=1, dp=64)) == 1.0
    # a capacity factor drops beyond it; padding runs exactly it
    assert step_load(_moe(moe_expert_capacity_factor=1.1), lay) == 1.1
    assert step_load(_moe(moe_expert_capacity_factor=1.5), lay) == learned
    padded = _moe(moe_expert_capacity_factor=1.5, moe_pad_expert_input_to_capacity=True)
    assert step_load(padded, lay) == 1.5


def test_layer_time_follows_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # a forced-balance layer takes what a learned one takes at the forced load: the same
    # expert GEMMs, permutations and dispatch, only the busiest rank's tokens differ
    lay = Layout(tp=2, pp=1, dp=32, ep=8, etp=1, sequence_parallel=True)
    forced_job = _moe(moe_router_force_load_balancing=True)
    gpu = gpu_of(forced_job)
    forced = layer_time.layer_time(forced_job, lay, gpu, True)
    learned = layer_time.layer_time(_moe(), lay, gpu, True)
    assert forced.fwd < learned.fwd and forced.ep < learned.ep
    forced_load = step_load(forced_job, lay)
    monkeypatch.setattr(routing_load, "learned_routing_load", lambda experts, ep: forced_load)
    same = layer_time.layer_time(_moe(), lay, gpu, True)
    assert (same.fwd, same.bwd, same.ep) == pytest.approx((forced.fwd, forced.bwd, forced.ep))


def test_memory_bounds_the_forced_balance_load_far_out_in_its_tail() -> None:
    # memory takes a bound, not the expectation: MEMORY_TAIL_SIGMAS spreads above the even share
    # (a normal tail of 1.3e-12 per dispatch), far above the step time's expected maximum and
    # far below learned routing's planning value at a training micro-batch's token counts
    lay = Layout(tp=2, pp=1, dp=32, ep=8, etp=1, sequence_parallel=True)
    forced = _moe(moe_router_force_load_balancing=True)
    spread = routing_load.relative_spread(8 * 2048, 8, 2, 8)  # the block's 8 x 4096 / 2 tokens
    bound = memory_load(forced, lay)
    assert bound == pytest.approx(1 + routing_load.MEMORY_TAIL_SIGMAS * spread)
    assert step_load(forced, lay) < bound < MOE_LOAD_IMBALANCE
    # learned routing, and one expert-parallel rank, keep the planning value in memory
    assert memory_load(_moe(), lay) == MOE_LOAD_IMBALANCE
    assert memory_load(forced, Layout(tp=1, pp=1, dp=64)) == MOE_LOAD_IMBALANCE
