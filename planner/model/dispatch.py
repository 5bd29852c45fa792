"""MoE token dispatch: what the token dispatcher of one MoE layer moves between EP ranks, and how
long it takes on the links their group spans (the collectives and placement of
`planner.model.comms`).

Dispatchers (`moe_dispatch`, Megatron --moe-token-dispatcher-type): NCCL's all-to-all
(MoEAlltoAllTokenDispatcher) carries every (token, expert) copy, priced by `comms.all_to_all`
(nccl-tests doc/PERFORMANCE.md busbw); the fused DeepEP / HybridEP kernels (flex) send a token
once per node it reaches over the NIC and once per GPU over NVLink (DeepSeek-V3 arXiv:2412.19437
Sec. 3.2.2; node-limited routing caps the nodes at the groups a token may use), at the
efficiencies their published benchmarks reach (DeepEP docs/legacy.md and README, HybridEP
docs/README_Hybrid-EP.md: FUSED_EP_NVLINK_EFFICIENCY, FUSED_EP_RDMA_EFFICIENCY); the all-gather
dispatcher (MoEAllGatherTokenDispatcher) gathers every token. The nodes and GPUs a token reaches
follow the random uniform router of those benchmarks (`distinct_reached`). FP8 dispatch bytes:
DeepEP's `per_token_cast_to_fp8` (DeepSeek-V3 Sec. 3.3.2; Megatron-LM fused_a2a.py @d98e8a64).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.inputs.hardware import ClusterSpec, LinkTier
from planner.model import comms, fp32, router_dtype, routing_load
from planner.model.comms import (
    Group,
    all_gather,
    all_to_all,
    place,
    reduce_scatter,
)
from planner.model.shard import BF16

if TYPE_CHECKING:
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job

FUSED_EP_NVLINK_EFFICIENCY = 0.70
"""Achieved / line rate of NVLink under the fused dispatch and combine kernels (DeepEP, HybridEP),
counting only bytes that leave the GPU. Published: DeepEP V1 intranode EP 8 on H800, 153 / 158
GB/s "bottleneck" bandwidth (docs/legacy.md), which counts the 1/8 of tokens a rank keeps, i.e.
134-138 GB/s over the wire of 200 (0.67-0.69); DeepEP V2 EP 8 on SM100, 726 / 740 GB/s (README)
-> 635-648 of 900 (0.71-0.72); HybridEP B200 kernel-only 735 / 674 GB/s (docs/README_Hybrid-EP.md)
-> 0.65-0.71. Below NCCL's ring efficiency (comms.SCALEUP_BUS_EFFICIENCY): an all-to-all of many
small per-peer chunks."""

FUSED_EP_RDMA_EFFICIENCY = 0.88
"""Achieved / NIC line rate of the fused kernels' inter-node traffic. Published (H800 / H100,
CX7 400 Gb/s, 50 GB/s): DeepEP V1 internode EP 32 / 64, 58 / 51 GB/s "RDMA bottleneck" bandwidth
with top-4 node groups (docs/legacy.md), which counts a token once per node it reaches including
its own (test_internode.py `num_rdma_token_sent`): x 3/4 and x 7/8 of it leave the node, 43.5 and
44.6 GB/s (0.87, 0.89); DeepEP V2 EP 8 x 4, 61 GB/s incl. local -> 45.8 (0.92); HybridEP H100
EP 64 kernel-only 48-51 GB/s algorithm bandwidth (0.96-1.0 before the local share is taken out,
0.84-0.89 after)."""

DEEPEP_NVL_PEERS = 8
"""NVLink peers of DeepEP's legacy (normal-mode) kernels (`flex_group`)."""

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""Bytes per element of an FP8 dispatch: e4m3 values plus one fp32 scale per 128 (DeepEP's
`per_token_cast_to_fp8`, DeepSeek-V3 Sec. 3.3.2). Megatron-LM's DeepEP and HybridEP paths dispatch
bf16 (HybridEP asserts `not fp8_dispatch`, fused_a2a.py @d98e8a64); only its ncclep backend
quantises (moe_dispatch_fwd_dtype = mxfp8), which plans cannot name yet."""


@lru_cache(maxsize=4096)
def distinct_reached(bins: int, items: int, picks: int) -> float:
    """Expected distinct bins hit when `picks` of `items` (spread evenly over `bins`) are drawn
    without replacement: bins x (1 - C(items - items/bins, picks) / C(items, picks)). The random
    uniform router of DeepEP's and HybridEP's published benchmarks. Remembered (it reads its
    arguments alone; every fused dispatch asks for it twice)."""
    if bins <= 1 or picks <= 0:
        return float(min(bins, max(picks, 0)))
    per = items / bins
    miss = 1.0
    for i in range(min(picks, items)):
        if items - per - i <= 0:
            return float(bins)
        miss *= (items - per - i) / (items - i)
    return bins * (1.0 - miss)


@dataclass(frozen=True)
class Routing:
    """What the MoE router sends from one EP rank per micro-batch."""

    tokens: float
    """Tokens the rank routes (its sequence-parallel shard)."""
    hidden: int
    topk: int
    experts: int
    groups: int | None = None
    """Group-limited routing: expert groups (Megatron --moe-router-num-groups; None = none)."""
    group_topk: int | None = None
    """Groups one token's experts may come from (--moe-router-group-topk)."""
    load: float = 1.0
    """The busiest rank's tokens over the even share (`routing_load.step_load`)."""
    node_load: float | None = None
    """The busiest node's tokens over the even share (`routing_load.node_load`): what a GPU's
    NIC receives under the fused dispatchers, its node's share (None: `load`)."""


def fused_dispatch_fanout(grp: Group, r: Routing, etp: int = 1) -> tuple[float, float]:
    """(nodes, GPUs) one token reaches under a fused dispatcher, which sends it once per
    destination node over the NIC and forwards it once per destination GPU over NVLink (DeepEP's
    and HybridEP's hierarchical kernels, DeepSeek-V3 Sec. 3.2.2). With group-limited routing the
    experts are those of group_topk groups; EP ranks hold contiguous experts, as groups are
    contiguous (Megatron's router), so each group lies on ceil(units / groups) of the group's
    nodes and of its EP ranks, and a token may reach group_topk x that of either (`_allowed`):
    node-limited routing (DeepSeek-V3's 8 groups on 8 nodes, 4 per token), and inside one node
    the GPUs of its groups (DeepSeek-V3's proxy in Megatron's MoE layer test: 8 groups on 8 GPUs,
    4 GPUs of 8 at most). Over the allowed nodes (EP ranks) and their experts the top-k experts
    are spread evenly (`distinct_reached`).

    With expert TP (`grp` the etp x ep ranks) a chosen expert's etp ranks all get the token:
    Megatron's flex dispatcher expands the routing map [tokens, ep, 1, local] over tp to ranks
    ep_idx x etp + tp_idx (token_dispatcher.py d98e8a64 :1905-1918), adjacent ranks of one node
    where etp <= its GPUs, so the nodes a token reaches are those of its top-k experts alone and
    each EP rank reached is etp GPUs (where etp exceeds a node, each expert spans etp / g
    nodes)."""
    k, g, n = grp.domains, grp.per_domain, grp.size  # n = k x g where groups line up
    ep = max(n // etp, 1)
    span = max(etp // g, 1)  # nodes one expert's etp ranks cover
    units = max(k // span, 1)  # disjoint node sets, each holding whole experts
    nodes_allowed = _allowed(units, r)
    nodes = span * distinct_reached(nodes_allowed, round(r.experts * nodes_allowed / units), r.topk)
    ranks_allowed = min(nodes_allowed * max(g // etp, 1), _allowed(ep, r))
    ranks = distinct_reached(ranks_allowed, round(r.experts * ranks_allowed / ep), r.topk)
    return nodes, etp * ranks


def fused_dispatch(
    cluster: ClusterSpec,
    grp: Group,
    r: Routing,
    dispatch_bytes: float,
    value_bytes: float,
    etp: int = 1,
) -> float:
    """Seconds of one flex dispatch and combine of one group (`moe_dispatch`; etp: the expert-TP
    ranks of each EP rank in it, `fused_dispatch_fanout`). Where the group splits unevenly
    (`Group.fewest`) the NVLink forwards are the fullest domain's (g - 1 of g) and the NIC share
    the emptiest domain's rank's: (n - g')/n of its experts lie off its domain ((k - 1)/k where
    groups line up). The NVLink leg carries the busiest GPU's tokens (`Routing.load`); the NIC
    leg its node's share (`Routing.node_load`): DeepEP's internode kernels send a token over the
    NIC to the GPU of the same local index on each target node, which forwards it over NVLink
    (DeepSeek-V3 Sec. 3.2.2), so each of a node's NICs receives 1/g of what all its GPUs get."""
    nodes, gpus = fused_dispatch_fanout(grp, r, etp)
    n, k, g = grp.size, grp.domains, grp.per_domain
    remote = nodes * ((k - 1) / k if grp.fewest is None else (n - grp.fewest) / n)
    nvl_copies = gpus * (g - 1) / g
    nvl = line_rate(grp.inner, cluster.tiers[0], True) * FUSED_EP_NVLINK_EFFICIENCY
    lat = grp.inner.latency
    rdma = 0.0
    if grp.outer is not None:
        tier = next(t for t in cluster.tiers if t.name == grp.tier_name)
        rdma = line_rate(grp.outer, tier, False) * FUSED_EP_RDMA_EFFICIENCY
        lat = grp.outer.latency

    node_load = r.load if r.node_load is None else r.node_load

    def one(nbytes: float) -> float:
        elems = r.tokens * r.hidden * nbytes
        t_nvl = elems * r.load * nvl_copies / nvl
        t_rdma = elems * node_load * remote / rdma if rdma else 0.0
        return max(t_nvl, t_rdma) + lat * comms.LATENCY_SCALE

    return one(dispatch_bytes) + one(value_bytes)


def line_rate(link: comms.Link, tier: LinkTier, innermost: bool) -> float:
    """An achieved `link` of `tier` back at the line rate: its bandwidth over the bus efficiency
    `comms.achieved` applied (`comms.bus_efficiency`: the tier's own, else the scale-up or
    scale-out one: AMD's xGMI 0.75, NVLink 0.80)."""
    return link.bandwidth / comms.bus_efficiency(tier, innermost)


def node_share(r: Routing, units: int) -> float:
    """The chance one token reaches a given one of `units` nodes holding contiguous experts: its
    expected distinct nodes (`distinct_reached` over the `_allowed` ones, as
    `fused_dispatch_fanout`) over the nodes, alike for every node by symmetry."""
    if units <= 1:
        return 1.0
    allowed = _allowed(units, r)
    return distinct_reached(allowed, round(r.experts * allowed / units), r.topk) / units


def _allowed(units: int, r: Routing) -> int:
    """The nodes or GPUs (`units` of them in the EP group, holding contiguous experts) whose
    experts one token may use: group_topk groups of `groups`, each on ceil(units / groups) of
    them, so min(units, group_topk x that); every unit without group-limited routing."""
    if r.groups and r.group_topk and r.group_topk < r.groups:
        return min(units, r.group_topk * math.ceil(units / r.groups))
    return units


def moe_dispatch(
    cluster: ClusterSpec,
    etp: int,
    ep: int,
    r: Routing,
    dispatcher: str = "alltoall",
    n_fwd: int = 1,
    dispatch_bytes: float = BF16,
    value_bytes: float = BF16,
    combine_bytes: float | None = None,
    nvl_peers: int | None = None,
) -> float:
    """Seconds per MoE layer and micro-batch of the token dispatcher (`nvl_peers`: the flex
    backend's NVLink peers, `flex_group`): a dispatch and a combine in
    each forward pass (n_fwd: 2 when the layer's forward is recomputed) and their gradients in the
    backward (a combine-like send of the input gradients, a dispatch-like one of the output
    gradients). EP ranks are etp apart (MoE parallel folding). `dispatch_bytes` per element of the
    forward dispatch and of the backward's output-gradient dispatch (bf16; FP8_DISPATCH_BYTES
    where the training code quantises them); `value_bytes` per element of the combines and the
    all-gather dispatcher's tokens: the hidden states' dtype, bf16, fp32 in fp32 training
    (`fp32.value_bytes`: Megatron's all-to-alls and gathers allocate their outputs in the
    input's dtype, d98e8a64 tensor_parallel/mappings.py:145, 185, 441-447); `combine_bytes` per
    element of the reduce-scatter before the combine (the allgather dispatcher's combine, the
    alltoall one's expert-TP reduce-scatter) and of its gradient's all-gather: Megatron casts the
    expert output to the router probabilities' dtype there (`router_dtype.combine_bytes`; None:
    `value_bytes`, and the alltoall's backward gather `dispatch_bytes`, as before).

    alltoall (NCCL, Megatron's MoEAlltoAllTokenDispatcher): every (token, expert) copy travels on
    its own, so each rank sends S = tokens x topk x h x bytes x load per all-to-all
    (`all_to_all`: (k-1)/k of it over the NIC, the rest over NVLink, nccl-tests' busbw);
    group-limited routing does not change how many copies leave the node.
    flex (DeepEP / HybridEP): a token crosses the NIC once per remote node it reaches and NVLink
    once per other GPU of that node (`fused_dispatch_fanout`), the two at once, each at its
    measured fused-kernel efficiency (FUSED_EP_RDMA_EFFICIENCY, FUSED_EP_NVLINK_EFFICIENCY);
    own-node copies skip the NIC ((k-1)/k of the nodes reached are remote: routing follows scores,
    not place). One latency of the slowest link per call.
    allgather (MoEAllGatherTokenDispatcher): all tokens of the expert-TP x EP group are
    all-gathered before the experts and reduce-scattered after (tokens x etp x ep x h bf16),
    independent of top-k.

    Experts sharded over etp > 1 ranks (Megatron-LM token_dispatcher.py @d98e8a64): the
    all-to-all dispatcher runs its all-to-all over the EP ranks, then all-gathers the copies it
    received over the etp ranks (AllGather-V: each ends with etp x its copies) and
    reduce-scatters the expert outputs before the combine; flex dispatches over the etp x ep
    ranks, every expert-TP rank of a chosen expert getting the token: the etp copies share the
    expert's node, so they add NVLink forwards, not NIC sends (`fused_dispatch_fanout`).
    """
    h, load = r.hidden, r.load
    passes = n_fwd + 1  # forward passes and the backward
    if dispatcher == "allgather":
        grp = place(cluster, 1, etp * ep)
        gathered = r.tokens * grp.size * h
        wide = gathered * (value_bytes if combine_bytes is None else combine_bytes)
        # each forward: gather the tokens, reduce-scatter the output; the backward the reverse
        fwd = all_gather(gathered * value_bytes, grp) + reduce_scatter(wide, grp)
        return n_fwd * fwd + reduce_scatter(gathered * value_bytes, grp) + all_gather(wide, grp)
    if dispatcher == "flex":  # over the etp x ep ranks (`fused_dispatch_fanout`)
        grp = flex_group(cluster, etp * ep, nvl_peers)
        if grp.size <= 1:
            return 0.0
        one_grp = replace(grp, others=())  # the kind's groups run in lockstep: the slowest counts
        each = (
            fused_dispatch(cluster, g, r, dispatch_bytes, value_bytes, etp)
            for g in (one_grp, *grp.others)
        )
        return passes * max(each)
    gather = 0.0  # the all-to-all dispatcher's expert-TP gather
    if etp > 1:
        tp_grp = place(cluster, 1, etp)
        copies = r.tokens * r.topk * h * load * etp
        rs = copies * (value_bytes if combine_bytes is None else combine_bytes)
        ag = copies * (dispatch_bytes if combine_bytes is None else combine_bytes)
        gather = n_fwd * (
            all_gather(copies * dispatch_bytes, tp_grp) + reduce_scatter(rs, tp_grp)
        ) + (all_gather(ag, tp_grp) + reduce_scatter(copies * value_bytes, tp_grp))
    grp = place(cluster, etp, ep)
    if grp.size <= 1:
        return gather
    copies = r.tokens * r.topk * h * load
    a2a = all_to_all(copies * dispatch_bytes, grp) + all_to_all(copies * value_bytes, grp)
    return passes * a2a + gather


def nvl_peers(job: Job, lay: Layout) -> int | None:
    """The NVLink peers of the job's flex backend: DEEPEP_NVL_PEERS for Megatron's DeepEP (its
    legacy Buffer), None (the whole domain) for HybridEP and torchtitan's DeepEP V2
    ElasticBuffer (pytorch/torchtitan b5bcd76c torchtitan/distributed/deepep/deepep.py:371)."""
    if lay.moe_flex_dispatcher_backend == "deepep" and job.framework == "megatron":
        return DEEPEP_NVL_PEERS
    return None


def flex_group(cluster: ClusterSpec, size: int, peers: int | None) -> Group:
    """The flex dispatcher's group of `size` adjacent ranks as its backend sees it, NVLink
    reaching at most `peers` of them (None: the whole NVLink domain, `place`). HybridEP uses
    the whole domain (multi-node NVLink included). Megatron's DeepEP (`nvl_peers`): its legacy
    kernels fix the NVLink peers at 8 (deepseek-ai/DeepEP dd758caf csrc/legacy/buffer.hpp:23,
    :120-121) and Megatron builds the Buffer without allow_mnnvl (Megatron-LM d98e8a64
    fused_a2a.py:68), so DeepEP sets NVSHMEM_DISABLE_MNNVL (deep_ep/buffers/legacy.py:124-126):
    on a domain larger than 8 (GB200 NVL72) each 8 ranks share NVLink and reach the rest over
    the NIC, the first tier beyond NVLink (or the group's own outer tier where it has one)."""
    grp = place(cluster, 1, size)
    if peers is None or size <= peers or len(cluster.tiers) < 2:
        return grp
    groups = [replace(grp, others=()), *grp.others]
    if all(g.per_domain <= peers for g in groups):
        return grp
    out = [_deepep_split(cluster, g, peers) for g in groups]
    return replace(out[0], others=tuple(out[1:]))


def _deepep_split(cluster: ClusterSpec, grp: Group, peers: int) -> Group:
    """`grp` (one placement, no others) cut into DeepEP's NVLink sets of `peers` ranks."""
    if grp.per_domain <= peers:
        return grp
    tier = cluster.tiers[1]
    if grp.outer is not None:
        tier = next(t for t in cluster.tiers if t.name == grp.tier_name)
    domains = math.ceil(grp.size / peers)
    fewest = grp.size - (domains - 1) * peers
    return Group(
        grp.size,
        peers,
        domains,
        comms.mesh_link(cluster.tiers[0], peers),
        comms.achieved(tier, False),
        tier.name,
        grp.nvlink,
        None if fewest == peers else fewest,
    )


def expert_all_to_all(
    cluster: ClusterSpec, etp: int, ep: int, dispatch_bytes: float, n_fwd: int
) -> float:
    """Seconds per MoE layer and micro-batch of NCCL all-to-alls of `dispatch_bytes` each:
    dispatch and combine in each forward pass and in the backward (EP ranks are etp apart: MoE
    parallel folding). `moe_dispatch` with the alltoall dispatcher and bf16 is this."""
    return (2 * n_fwd + 2) * all_to_all(dispatch_bytes, place(cluster, etp, ep))


def shared_overlap(a2a: float, passes: int, shared: Sequence[float], grads: int) -> float:
    """Seconds of a MoE layer's token dispatcher (`a2a`: `moe_dispatch`'s, over `passes`
    forward passes and the backward) that its shared experts' GEMMs run under with Megatron's
    --moe-shared-expert-overlap (`shared`: each shared-expert GEMM's forward seconds, fc1 then
    fc2; `grads` backward GEMMs per forward one). Megatron d98e8a64 (token_dispatcher.py, the
    alltoall and flex dispatchers; shared_experts.py) launches the shared experts on their own
    stream: fc1 beside the dispatch and fc2 beside the combine, and autograd runs each backward
    on its forward's stream, so the combine's gradient meets fc2's backward and the dispatch's
    fc1's. Each all-to-all hides under the GEMM beside it up to that GEMM's length (the two of a
    pass taken as equal halves); what shows beyond either side is exposed. The hidden part still
    costs the SMs the collective holds (`stage_time.ep_exposed`)."""
    if not shared or a2a <= 0.0:
        return 0.0
    one = a2a / passes / len(shared)  # one dispatch or combine of one pass
    forward = sum(min(one, s) for s in shared)
    backward = sum(min(one, grads * s) for s in shared)
    return (passes - 1) * forward + backward


def layer_dispatch(
    job: Job, lay: Layout, t: float, load: float, n_fwd: int, shared: Sequence[float], grads: int
) -> tuple[float, float]:
    """(seconds, seconds its shared experts hide) per micro-batch of one MoE layer's token
    dispatcher (`moe_dispatch`, `shared_overlap` with `Layout.moe_shared_expert_overlap`) for
    `t` tokens per TP group at the step's routing `load`; the fused dispatchers' NIC leg at the
    busiest node's (`routing_load.node_load`, at most `load`)."""
    arch = job.arch
    kind = lay.moe_token_dispatcher_type
    routing = Routing(
        tokens=t / (lay.tp if lay.sequence_parallel else 1),
        hidden=arch.expert_hidden,  # a latent MoE dispatches its latent tokens
        topk=arch.moe_router_topk,
        experts=arch.num_moe_experts or 1,
        groups=job.moe_router_num_groups,
        group_topk=job.moe_router_group_topk,
        load=load,
    )
    peers = nvl_peers(job, lay)
    if kind == "flex":  # the fused dispatchers' NIC leg: the busiest node's share
        nodes = flex_group(job.cluster, lay.expert_tp * lay.ep, peers).domains
        share = node_share(routing, min(nodes, lay.ep))
        node_load = min(load, routing_load.node_load(job, lay, nodes, share))
        routing = replace(routing, node_load=node_load)
    word = fp32.value_bytes(job)  # bf16 hidden states; fp32 in fp32 training
    wide = router_dtype.combine_bytes(job)  # --moe-router-dtype's reduce-scatter
    a2a = moe_dispatch(
        job.cluster, lay.expert_tp, lay.ep, routing, kind, n_fwd, word, word, wide, peers
    )
    hidden = shared_overlap(a2a, n_fwd + 1, shared, grads) if lay.moe_shared_expert_overlap else 0.0
    return a2a, hidden
