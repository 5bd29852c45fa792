"""How many routed tokens the busiest expert-parallel rank runs, over the even share, for the step
time (`planner.model.layer_time`: its expert GEMMs, permutations and token dispatch).

Every MoE layer's token dispatch and combine are collectives over the expert-parallel group, so
each layer waits for the group's busiest rank: its time follows the largest of the ep ranks'
loads, layer by layer, not their average.

- **One expert-parallel rank** (ep = 1): each rank runs every expert on its own tokens, exactly
  top_k copies of each. Load 1; in memory under torchtitan its copies with the rows its grouped
  GEMMs are padded by (`titan_local_load`).
- **Learned routing** (dropless, balanced by an auxiliary loss or expert biases): some experts stay
  busier than others. Each expert's share of the routed copies spreads EXPERT_LOAD_SPREAD (s / mu)
  about the even share; a rank holding m = E / ep experts carries their mean, which spreads
  s / sqrt(m), and the layer waits for the busiest of its ep ranks: 1 + z(ep) x that
  (`learned_routing_load`, the same order statistics as forced balance). Many experts per rank
  average out, more ranks raise the maximum: two ranks of 16 experts (gpt-oss-20b at ep 2) wait
  1.04x, DeepSeek-V3's 32 ranks of 8 1.20x, Mixtral's 8 ranks of one expert 1.39x. The memory
  model keeps the planning value MOE_LOAD_IMBALANCE (`memory_load`).
- **Forced balance** (Megatron --moe-router-force-load-balancing, the benchmark switch every
  Megatron-Bridge MoE performance recipe sets): the router's logits are replaced by random ones
  (Megatron-Core moe_utils.RandomSTE), so each token's top_k experts are k distinct experts drawn
  uniformly. The load then differs from 1 only by sampling noise (`random_routing_load`).
- **torchtitan's forced balance** (debug.moe_force_load_balance): a round robin, no sampling:
  every expert gets its exact share of each router's copies, the remainder on the first
  experts, the same ones on every rank (`planner.model.round_robin`), in the step time and in
  memory alike.
- A capacity factor drops tokens beyond it (the smaller of it and the load); padding to it runs
  exactly it. HybridEP's per-rank budget (Megatron --moe-expert-rank-capacity-factor c) drops a
  rank's copies beyond c x its even share the same way (`rank_budget`).

The memory model bounds the load instead of taking its expectation (`planner check` must not call
a layout that runs out of memory one that fits): the planning value for learned routing, and under
forced balance MEMORY_TAIL_SIGMAS spreads above the even share (`memory_load`). Under HybridEP's
budget every expert tensor is the budget's size whatever the routing (`memory_loads`), and
Megatron's paged stash moves what the layers keep for the backward into a stash sized on the even
share.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.round_robin import titan_load
from planner.model.shard import MOE_LOAD_IMBALANCE

EXPERT_LOAD_SPREAD = 0.274
"""Spread (s / mu) of one expert's routed copies about the even share under learned, balanced
routing, per layer and micro-batch: a planning value, set so that DeepSeek-V3's training layout
(256 experts over 32 expert-parallel ranks, 8 per rank) keeps the busiest-rank load of 1.2 the
model took for every learned-routing layout before (shard.MOE_LOAD_IMBALANCE). Not fitted:
the measured MoE runs in benchmarks/ mix this load with every other MoE cost, and no published
per-expert load spread was found."""

MEMORY_TAIL_SIGMAS = 7.0
"""The memory's bound on a rank's routed copies under forced balance, in spreads (s of
`relative_spread`) above the even share: the normal tail beyond 7 s is 1.3e-12, so across the
~1e4 dispatches of a step (layers x micro-batches x ranks) and 1e5 steps of a run a rank exceeds
it with probability about 1e-3. Not fitted."""


def expected_max_normal(n: int) -> float:
    """Expected largest of n independent standard normals, by Blom's approximation of the top
    order statistic, Phi^-1((n - 0.375) / (n + 0.25)): within 0.03 of the exact value for n = 2 to
    1000 (0.590 against 0.564 at n = 2, 2.067 against 2.070 at n = 32, by numerical integration
    of n x phi(x) x Phi(x)^(n-1) x). 0 for n = 1."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def relative_spread(tokens: float, experts: int, topk: int, ep: int) -> float:
    """s / mu of one rank's routed copies when each of `tokens` tokens sends its top_k copies to
    k distinct experts drawn uniformly from E, the experts dealt E / ep to each rank.

    A token's copies on one rank (m = E / ep experts) are hypergeometric: mean k m / E, variance
    k (m / E)(1 - m / E)(E - k) / (E - 1). Over T independent tokens a rank's count has mean
    mu = T k / ep and variance T x that, nearly normal at a micro-batch's token counts; the ep
    counts sum to T k, so they are mu + s (Z_i - mean Z) for independent standard normals Z_i, with
    s^2 (1 - 1 / ep) that variance. 0 where every rank gets exactly its share."""
    if ep <= 1 or tokens <= 0 or experts <= topk:
        return 0.0
    share = 1.0 / ep
    s2 = tokens * topk * share * (experts - topk) / (experts - 1)
    return math.sqrt(s2) / (tokens * topk * share)


def random_routing_load(tokens: float, experts: int, topk: int, ep: int) -> float:
    """Expected largest load of the ep ranks over the even share under uniform routing
    (`relative_spread`): the busiest rank carries mu + s x `expected_max_normal`(ep) on average,
    so the load is 1 + z s / mu (`step_load` under forced balance)."""
    return 1.0 + expected_max_normal(ep) * relative_spread(tokens, experts, topk, ep)


def learned_routing_load(experts: int, ep: int) -> float:
    """Expected largest load of the ep ranks over the even share under learned routing (module
    docstring): each rank's m = E / ep experts average their loads, so a rank's load spreads
    EXPERT_LOAD_SPREAD / sqrt(m) about the even share, and the busiest of ep carries
    1 + z(ep) x that (`expected_max_normal`; the ranks' loads summing to the whole only centres
    them, which leaves the expected maximum). 1 for one rank."""
    if ep <= 1:
        return 1.0
    per_rank = max(experts / ep, 1.0)
    return 1.0 + expected_max_normal(ep) * EXPERT_LOAD_SPREAD / math.sqrt(per_rank)


def _block(job: Job, lay: Layout) -> tuple[float, int, int, int]:
    """(tokens, experts, top_k, ep) of the layer's forced-balance routing: the tokens drawn are
    those of the expert-model-parallel block, each of its etp x ep ranks dispatching its
    sequence-parallel shard of the micro-batch."""
    t = lay.micro_batch_size * job.seq_length / lay.cp
    tokens = t / (lay.tp if lay.sequence_parallel else 1) * lay.ep * lay.expert_tp
    return tokens, job.arch.num_moe_experts or 1, job.arch.moe_router_topk, lay.ep


def rank_budget(job: Job, lay: Layout) -> float | None:
    """HybridEP's static per-rank token budget over the rank's even share of routed copies, where
    it applies: Megatron --moe-expert-rank-capacity-factor with the flex dispatcher's HybridEP
    backend, which sizes its dispatch to int(tokens x top_k x c) rows (token_dispatcher.py
    d98e8a64, `_HybridEPManager.setup_metadata`) and drops what a rank receives beyond it. The
    other dispatchers do not read it (None)."""
    c = job.moe_expert_rank_capacity_factor
    flex = lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend == "hybridep"
    return c if flex else None


def _capped(job: Job, load: float, budget: float | None = None) -> float:
    """A load under the job's capacity factor: it drops tokens beyond the factor (the smaller of
    the two), and padding to it runs exactly it (moe_utils.get_capacity, token_dispatcher.py);
    under HybridEP's `budget` too, which drops a rank's copies beyond it."""
    cf = job.moe_expert_capacity_factor
    if cf is not None:
        load = cf if job.moe_pad_expert_input_to_capacity else min(cf, load)
    return load if budget is None else min(budget, load)


def _round_robin(job: Job) -> bool:
    """Forced balance as torchtitan routes it: a round robin (`planner.model.round_robin`), not
    Megatron's random logits."""
    return job.moe_router_force_load_balancing and job.framework == "torchtitan"


_LEAST: dict[int, tuple[Job, Job]] = {}


def least_load_job(job: Job) -> Job:
    """The job whose round robin is priced at its least load, 1, for the search's bounds across
    micro-batch sizes (`planner.search.bound`, `structure_queue.structure_floor`): those take
    each rank's floor at the structure's largest micro-batch as a floor for every smaller one,
    which holds where the load never grows with the micro-batch (learned routing's constant,
    random routing's falling spread) but not for the round robin's remainder (Qwen3-30B-A3B
    at seq 1092, ep 64: 1 at mbs 8, 1.0012 at mbs 9). Its load is at least 1 (the busiest rank
    holds at least the mean) and the layer times grow with it, so at 1 the floors are below
    every micro-batch's exact times. The job itself elsewhere; one copy per job, remembered."""
    if not _round_robin(job) or job.least_routing_load:
        return job
    hit = _LEAST.get(id(job))
    if hit is None or hit[0] is not job:
        if len(_LEAST) >= 64:
            _LEAST.clear()
        hit = _LEAST[id(job)] = (job, replace(job, least_routing_load=True))
    return hit[1]


def _titan_load(job: Job, lay: Layout, units: int, distinct: bool = False) -> float:
    """`titan_load`, or 1 for the bounds' job (`least_load_job`)."""
    return 1.0 if job.least_routing_load else titan_load(job, lay, units, distinct)


def step_load(job: Job, lay: Layout) -> float:
    """The busiest expert-parallel rank's routed tokens over the even share, per MoE layer and
    micro-batch, for the step time (module docstring): 1 with one expert-parallel rank, the
    expected maximum of the ep ranks under forced balance (`random_routing_load`) or learned
    routing (`learned_routing_load`), the exact one under torchtitan's round robin
    (`titan_load`)."""
    budget = rank_budget(job, lay)
    if lay.ep <= 1:
        return _capped(job, 1.0, budget)
    if _round_robin(job):
        return _capped(job, _titan_load(job, lay, lay.ep), budget)
    if job.moe_router_force_load_balancing:
        return _capped(job, random_routing_load(*_block(job, lay)), budget)
    return _capped(job, learned_routing_load(job.arch.num_moe_experts or 1, lay.ep), budget)


def distinct_spread(tokens: float, share: float) -> float:
    """s / mu of the distinct tokens one node receives where each of `tokens` tokens, routed
    independently, reaches it with probability `share`: binomial, sqrt((1 - share) / (tokens x
    share)). 0 where every token reaches it."""
    if tokens <= 0 or share >= 1.0 or share <= 0.0:
        return 0.0
    return math.sqrt((1.0 - share) / (tokens * share))


def node_load(job: Job, lay: Layout, nodes: int, share: float | None = None) -> float:
    """The busiest node's tokens over the even share where the expert-parallel group's experts
    lie on `nodes` nodes (E / nodes each), what a GPU's NIC receives under DeepEP's and
    HybridEP's internode dispatch (`dispatch.fused_dispatch`), which send a token once per node
    it routes to (DeepEP dd758caf csrc/kernels/legacy/layout.cu:87, :100: a token counts once
    in num_tokens_per_rdma_rank however many of the node's experts it picks).

    Forced balance (random logits, then the router's own top-k, group limits included: Megatron
    d98e8a64 router.py:861-871): a node's distinct tokens are binomial over the block's tokens
    at `share`, the chance one token reaches it (`dispatch.node_share`: its expected distinct
    nodes over the nodes), so the busiest of them carries 1 + z(nodes) x `distinct_spread` (the
    nodes' counts taken as independent: one token's reach of two nodes correlates at -0.065 for
    Qwen3-235B's 128 experts on 4 nodes, -0.080 for 256 on 8 without groups, which would add
    3-4% to the excess); without `share`, `random_routing_load` over the nodes (routed
    copies). DeepSeek-V3 at ep 64 on 8 nodes, 4 of 8 groups a token: share 3.63 / 8, spread
    1.10 / sqrt(T), against the copies' 0.99 / sqrt(T) (over all 256 experts, centred as
    `relative_spread`). Learned routing:
    `learned_routing_load`(E, nodes), e.g. DeepSeek-V3's 8 nodes of 32 experts
    1 + 1.43 x 0.274 / sqrt(32) = 1.069 against its 64 ranks' 1.320: routed copies, an
    approximation of the node's spread (no per-expert load data to derive the distinct
    tokens' from). torchtitan's round robin: the busiest node's exact tokens, or its copies
    without `share` (`titan_load`). Capped as `step_load`; 1 (capped) on one node."""
    budget = rank_budget(job, lay)
    units = min(nodes, lay.ep)  # expert TP wider than a node: an expert spans etp / g nodes
    if units <= 1:
        return _capped(job, 1.0, budget)
    if _round_robin(job):
        return _capped(job, _titan_load(job, lay, units, share is not None), budget)
    if job.moe_router_force_load_balancing:
        tokens, experts, topk, _ = _block(job, lay)
        if share is not None:
            load = 1.0 + expected_max_normal(units) * distinct_spread(tokens, share)
            return _capped(job, load, budget)
        return _capped(job, random_routing_load(tokens, experts, topk, units), budget)
    return _capped(job, learned_routing_load(job.arch.num_moe_experts or 1, units), budget)


TITAN_GROUP_ALIGN = 8
"""Rows torchtitan e347b1e5 aligns each expert's token group to before its grouped GEMMs
(torchtitan models moe utils.py:15 TOKEN_GROUP_ALIGN_SIZE_M, bf16: 16 bytes of 2-byte values)."""
TITAN_FLOAT8_GROUP_ALIGN = 16
"""The same alignment where the grouped float8 converter runs the experts (`[torchtitan]
float8_experts`): components/quantization/__init__.py:17 FP8_GROUP_ALIGNMENT_SIZE, set at
float8.py:202 (16 bytes of 1-byte values)."""


def titan_local_load(job: Job, lay: Layout) -> float:
    """torchtitan's expert rows over the rank's routed copies without expert parallelism, a bound
    on both its eras. Each rank reorders its own T x k copies (T: the micro-batch's tokens per
    context-parallel rank, whole under TP, where the experts are tensor-parallel), no dropping
    and no all-to-all. b5bcd76c's LocalTokenDispatcher keeps exactly T x k rows (models/common
    token_dispatcher.py:92-100, :129-139); e347b1e5 pads first (its models moe moe.py:166-175
    `indices_padding_wrapper` wherever the experts have no ep mesh): utils.py:42-59 `_permute`
    gathers round_up(T k + E a, a) rows, E experts of a (`TITAN_GROUP_ALIGN`, 16 for float8
    experts) rows of room each. That size is fixed by the shapes, not the routing, so the bound
    is exact at e347b1e5."""
    experts = job.arch.num_moe_experts or 1
    rows = job.arch.moe_router_topk * lay.micro_batch_size * job.seq_length / lay.cp
    align = TITAN_FLOAT8_GROUP_ALIGN if job.titan.float8_experts else TITAN_GROUP_ALIGN
    padded = math.ceil((rows + experts * align) / align) * align
    return padded / rows


def memory_load(job: Job, lay: Layout) -> float:
    """The same load for memory, a bound rather than an expectation (module docstring):
    MEMORY_TAIL_SIGMAS spreads above the even share under forced balance over more than one
    expert-parallel rank (torchtitan's round robin: its exact load, `titan_load`, no tail),
    torchtitan's own rows without EP (`titan_local_load`: every rank its own copies, padded),
    else the planning value MOE_LOAD_IMBALANCE (also with one rank under Megatron, where the
    calibrated memory rows take it)."""
    if job.framework == "torchtitan" and lay.ep <= 1:
        return _capped(job, titan_local_load(job, lay))
    if _round_robin(job) and lay.ep > 1:
        return _capped(job, titan_load(job, lay, lay.ep))
    if job.moe_router_force_load_balancing and lay.ep > 1:
        return _capped(job, 1.0 + MEMORY_TAIL_SIGMAS * relative_spread(*_block(job, lay)))
    return _capped(job, MOE_LOAD_IMBALANCE)


def memory_loads(job: Job, lay: Layout) -> tuple[float, float]:
    """(kept, working): the load of what the MoE layers keep for the backward, and of the tensors
    of the layer running (`Shard.moe_load`, `Shard.moe_work_load`). Dropless: `memory_load`
    for what the layers keep (summed over layers and micro-batches, their loads average out
    toward it), and for the layer running at least the busiest rank the step expects of one
    micro-batch (`step_load`: above MOE_LOAD_IMBALANCE at many ranks of few experts, 1.32 at 64
    ranks of 4; a memory bound below that expectation was inconsistent, QA). Under HybridEP's
    budget c (`rank_budget`) the dispatch output and every expert tensor after it have the
    budget's rows whatever the routing: both c. With Megatron's paged stash
    (--moe-paged-stash) the kept expert tensors are copied into the stash (`stash_load`) and
    the budget-sized ones freed; a step that overflows the stash is rerun dropless without it
    (`prepare_for_rerun`), so the kept load is also at least the dropless one, and the running
    layer's at least that."""
    dropless = memory_load(job, lay)
    budget = rank_budget(job, lay)
    if budget is None:  # the running layer: one micro-batch's busiest rank, as the step waits
        return dropless, max(dropless, step_load(job, lay))
    if not job.moe_paged_stash:
        return budget, budget
    kept = max(stash_load(job, budget), dropless)
    return kept, max(budget, kept)


def stash_load(job: Job, budget: float) -> float:
    """The paged stash's size over the even share under HybridEP's `budget`:
    moe_paged_stash_buffer_size_factor x it (paged_stash.py d98e8a64 `allocate_stash_buffers`:
    positive factors scale the average-based maxima, negative ones the actual maxima, at most
    the budget)."""
    f = job.moe_paged_stash_buffer_size_factor
    return f if f > 0 else budget * -f
