"""torchtitan's forced-balance routing counted exactly: the routed copies (token, expert pairs)
and the distinct tokens each expert-parallel rank, or node, receives under
debug.moe_force_load_balance, whose busiest over the even share `routing_load` takes for
torchtitan in place of Megatron's random routing.

The router (pytorch/torchtitan b5bcd76c torchtitan models common moe.py:216-233, which replaces
the learned top-k at :319-324; the same at e347b1e5 torchtitan models moe moe.py:234-249,
:335-340) numbers the T x k slots of the T tokens it scores 0 .. T k - 1, token-major
(torch.arange(T k).reshape(T, k)), and gives slot i expert i mod E. Each call starts again at
expert 0: its experts get floor(T k / E) copies each, the first T k mod E one more; a token's k
experts are k consecutive ones (mod E), distinct for k <= E. The ranks of an expert-parallel
group all start at expert 0, so their remainders land on the same low-numbered experts: the
busiest rank is the first, not a random one.

What the router numbers, and which ranks send to one group:

- b5bcd76c (the module target): with EP the router's input is sharded over DP, CP and TP
  (models common moe_sharding.py:89-112: the EP branch's in_dst is
  dense_sequence_parallel_placement, decoder_sharding.py:98-107, with or without SP), so each
  rank numbers its own T = mbs x seq / (cp x tp) tokens from slot 0.
- e347b1e5 (the TOML target): the MoE block flattens its (bs, slen / cp) input (moe.py:481-482),
  replicated over TP (models/llama4/infra/parallelize.py:521-529), so the router numbers
  T = mbs x seq / cp tokens; where EP takes the TP ranks (etp 1, :531-536)
  ReordererSequenceParallel gives TP rank j the tokens [j T / tp, (j + 1) T / tp)
  (distributed/expert_parallel.py:275-290), which continue the round robin where rank j - 1's
  stop. A group is ep consecutive ranks of the sparse mesh (pp, dp_replicate, efsdp, ep, etp)
  and TP the innermost dimension of the dense one (distributed/parallel_dims.py:149-158), so
  group g holds TP ranks (g ep + i) mod tp, i < ep. With etp = tp each TP rank routes and
  dispatches all T from slot 0 (ExpertTensorParallel, no reorderer: parallelize.py:531, :578-580).

A plan does not say which of the two runs it: counted, the larger of their busiest loads (the
module target refuses etp > 1 with EP, so there only e347b1e5's).
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from itertools import accumulate

from planner.inputs.layout import Layout
from planner.inputs.plan import Job

Sources = tuple[int, ...]
"""The first token index, in its router's numbering, of each rank sending to one group."""


def _slots_below(x: int, lo: int, hi: int, experts: int) -> int:
    """Slots 0 .. x - 1 whose expert (slot mod E) is one of lo .. hi - 1."""
    full, rest = divmod(x, experts)
    return full * (hi - lo) + min(max(rest - lo, 0), hi - lo)


def copies(first: int, tokens: int, topk: int, experts: int, lo: int, hi: int) -> int:
    """Routed copies that experts lo .. hi - 1 get from the tokens first .. first + tokens - 1
    of one router's round robin (token t's slots are t k .. t k + k - 1)."""
    top = _slots_below((first + tokens) * topk, lo, hi, experts)
    return top - _slots_below(first * topk, lo, hi, experts)


@lru_cache(maxsize=4096)
def _reach_prefix(topk: int, experts: int, lo: int, hi: int) -> tuple[int, ...]:
    """Over one period of the tokens' expert pattern (E / gcd(k, E) tokens: token t's first
    expert is t k mod E), how many of the first n tokens reach one of experts lo .. hi - 1."""
    period = experts // math.gcd(topk, experts)
    hits = (any(lo <= (t * topk + j) % experts < hi for j in range(topk)) for t in range(period))
    return tuple(accumulate((int(h) for h in hits), initial=0))


def reaching(first: int, tokens: int, topk: int, experts: int, lo: int, hi: int) -> int:
    """Distinct tokens of first .. first + tokens - 1 that have at least one of their k experts
    among lo .. hi - 1: what a unit holding those experts receives once per token (DeepEP's
    internode dispatch, `routing_load.node_load`)."""
    prefix = _reach_prefix(topk, experts, lo, hi)
    period = len(prefix) - 1

    def below(x: int) -> int:
        full, rest = divmod(x, period)
        return full * prefix[-1] + prefix[rest]

    return below(first + tokens) - below(first)


@lru_cache(maxsize=4096)
def busiest(
    sources: Sources, tokens: int, topk: int, experts: int, units: int, distinct: bool = False
) -> float:
    """The busiest of `units` receiving units (unit u holds experts u E // units .. (u + 1) E //
    units - 1, contiguous as EP ranks and nodes hold them) over their mean, where each source
    routes `tokens` tokens from its first token index: routed copies (`copies`), or distinct
    tokens (`reaching`) with `distinct`. 1 where nothing is routed."""
    count = reaching if distinct else copies
    seen = Counter(sources)

    def unit(u: int) -> int:
        lo, hi = u * experts // units, (u + 1) * experts // units
        return sum(n * count(first, tokens, topk, experts, lo, hi) for first, n in seen.items())

    per_unit = [unit(u) for u in range(units)]
    total = sum(per_unit)
    return max(per_unit) * units / total if total else 1.0


def groups(job: Job, lay: Layout) -> list[tuple[Sources, int]]:
    """(sources, tokens each routes) of each distinct expert-parallel group of torchtitan's two
    versions (module docstring): b5bcd76c's ep ranks each from 0 over mbs x seq / (cp x tp)
    tokens (where etp is 1); e347b1e5's over mbs x seq / cp, cut into TP chunks where EP takes
    TP (etp 1, tp > 1), one group per distinct set of chunks (tp / gcd(ep, tp) groups). A token
    count TP does not divide rounds up (b5bcd76c pads the sequence before routing,
    token_dispatcher.py:209-214; e347b1e5 refuses it, expert_parallel.py:277-281)."""
    ep, tp = lay.ep, lay.tp
    numbered = lay.micro_batch_size * job.seq_length // lay.cp  # e347b1e5's router's tokens
    chunk = math.ceil(numbered / tp)
    if lay.expert_tp != 1:  # ETP: every TP rank routes the whole micro-batch shard
        return [((0,) * ep, numbered)]
    out = [((0,) * ep, chunk)]  # b5bcd76c
    if tp > 1:
        for g in range(tp // math.gcd(ep, tp)):
            out.append((tuple(((g * ep + i) % tp) * chunk for i in range(ep)), chunk))
    return out


def titan_load(job: Job, lay: Layout, units: int, distinct: bool = False) -> float:
    """The busiest of `units` receiving units (the ep ranks, or the nodes they lie on) over the
    even share under torchtitan's forced balance, the larger over both versions and their groups
    (`groups`, `busiest`); 1 with one unit."""
    if units <= 1:
        return 1.0
    experts, topk = job.arch.num_moe_experts or 1, job.arch.moe_router_topk
    return max(busiest(s, n, topk, experts, units, distinct) for s, n in groups(job, lay))
