"""Collective-communication time on the link tiers a process group actually spans.

Placement (`planner.model.placement`: rank r on domain r // `ClusterSpec.domain_used`). Megatron
orders ranks tp-cp-ep-dp-pp (TP fastest, ecosystem.md 1.2), so a group of n ranks `stride` apart
lies on `stride x n` consecutive ranks; every group of the kind is placed and the slowest sets the
time (lockstep). A group over k innermost domains (NVLink nodes or racks) is two-level: g members
on the fullest, g' on the emptiest (g = g' = n / k where groups line up with domains). In a
full-mesh innermost tier (AMD's xGMI: a link per GPU pair, no switch) a group's members reach
each other over their own links only: g - 1 of the span - 1 (`mesh_link`).

Cost model (NVIDIA nccl-tests doc/PERFORMANCE.md; ecosystem.md section 4), S the payload in bytes,
B the achieved bus bandwidth per GPU, α the per-message latency:

    all-reduce       2(n-1)/n * S/B          reduce-scatter, all-gather   (n-1)/n * S/B
    all-to-all       (n-1)/n * S/B           point-to-point               S/B
(S is the whole array; for all-to-all, the bytes one rank sends including its own share.)

Two-level groups are modelled hierarchically (stas00/ml-engineering network/README.md, quoted in
ecosystem.md section 4): reduce-scatter inside the node over the inner link, all-reduce of the
S/g shard across the k nodes over each GPU's own NIC, all-gather inside the node:
    2(g-1)/g * S/B_in + 2(k-1)/k * (S/g')/B_out
(reduce-scatter and all-gather take half of each term). An all-to-all sends (n-g')/n of its bytes
(aligned: (k-1)/k) over the NIC and (g-1)/n over NVLink at the same time; the slower counts.

Latency (NCCL's own cost model, NVIDIA/nccl src/graph/tuning.cc @01afd20a `ncclTopoTuneModel`):
reduce-scatter and all-gather run only as rings ("if (coll != ncclCollAllReduce && a !=
NCCL_ALGO_RING) continue"), n-1 steps of which k-1 cross domains (`nInterSteps = nNodes - 1`):
(n-k) α_in + (k-1) α_out. Only the all-reduce also has trees: 2 ((g-1) α_in + log2 k α_out) (its
Tree latency formula), which NCCL picks for latency-bound sizes, so a two-level all-reduce pays the
tree's. A flat ring all-reduce inside one domain pays 2(n-1) α. Every latency charge is multiplied
by LATENCY_SCALE. α is the tier's per-message latency (catalog `latency_us`).

Achieved bus bandwidth = line rate x an efficiency (constants below, from measured busbw); inside
an NVLink domain NCCL's rings and all-reduces reach nccl-tests' measured share of it by group size
and pay a fixed cost per call (`planner.model.nccl_shares`; `Group.share`, `Group.call`).

Overlap is not free: a collective hidden under compute runs on COMM_KERNEL_SMS of the GPU's SMs
(`sm_share`), so the compute under it takes that share of the collective's time longer; the
callers add it to the exposed time (TP in `planner.model.layer_time`, EP in
`planner.model.stage_time`, DP in `planner.model.cost`).

Built on these collectives: data-parallel sync `planner.model.dp_sync`, a layer's tensor-parallel
collectives `planner.model.layer_tp.tensor_parallel_layer`, context parallelism's exchanges
`planner.model.cp_time`, the MoE token dispatchers `planner.model.dispatch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.inputs.hardware import ClusterSpec, LinkTier
from planner.model import nccl_shares, placement, sm_count
from planner.model.job_memo import ModelMemo
from planner.model.nccl_shares import ALL_REDUCE, RING

if TYPE_CHECKING:
    from planner.inputs.layout import Layout

SCALEUP_BUS_EFFICIENCY = 0.80
"""Achieved NCCL bus bandwidth / line rate inside the scale-up domain (NVLink; a tier's own
`bus_efficiency` replaces it, scaled as this is calibrated: AMD's xGMI, 0.75). Measured: H100
NVLink4 ~370 of 450 GB/s for ring collectives (0.82; NVIDIA/nccl-tests#212, nccl#1455), A100
NVLink3 ~235 of 300 GB/s (0.78; stas00/ml-engineering). ecosystem.md section 4."""

SCALEOUT_BUS_EFFICIENCY = 0.92
"""Achieved bus bandwidth / NIC line rate across nodes (InfiniBand / RoCE): NDR 400 Gb/s gives
46-48 of 50 GB/s per NIC (0.92-0.96; nccl-tests#290, #267), HDR ~24 of 25 GB/s (nccl#412)."""


SHIPPED_BUS_EFFICIENCY = (SCALEUP_BUS_EFFICIENCY, SCALEOUT_BUS_EFFICIENCY)
"""The two above as shipped (a calibration sets them at call time: `bus_efficiency` scales a
tier's own measured efficiency by the calibrated one over this)."""

LATENCY_SCALE = 1.0
"""Multiplier on every collective and point-to-point latency charge (dimensionless). 1.0 = the
catalog's per-tier latencies; a calibration may refit it. Read at call time."""


COMM_KERNEL_SMS = 20
"""Streaming multiprocessors a communication kernel holds while it runs under compute: what the
compute it hides under loses. Stated counts: DeepSeek-V3 (arXiv:2412.19437 Sec. 3.2.2) dedicates 20
of the H800's 132 SMs to its dispatch / combine kernels, and 20 is Megatron-LM's DeepEP default
(token_dispatcher.py @d98e8a64: `moe_flex_dispatcher_num_sms` None -> 20); Transformer Engine's
userbuffers TP overlap reserves 16-24 for its pipelined reduce-scatters on H100 (NeMo
nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py: proj_fprop num_sm 24, fc2_fprop
16, bulk wgrad overlaps 4-24); NCCL runs one thread block per channel, 16-32 channels on NVLink.
One count for all of them (`sm_share`), but for the userbuffers overlaps themselves, which hold
their SMs as their configuration sets (`planner.model.tp_overlap`)."""


def sm_share(cluster: ClusterSpec, margin: int = 0) -> float:
    """Share of the GPU's SMs a communication kernel takes from the compute it hides under
    (COMM_KERNEL_SMS / its SMs): a collective of T seconds hidden under compute stretches that
    compute by T x this share. Where the GEMMs already leave `margin` SMs free all step
    (Transformer Engine's NVTE_EXT_MARGIN_SM, `Job.gemm_sm_margin`, whose cost
    `planner.model.layer_time` charges to every GEMM), the kernel runs on those first and takes
    only the SMs beyond them: charging both would count the same SMs twice. (The margin binds
    Transformer Engine's GEMMs only; what hides under attention or elementwise kernels is taken
    at the same share, the GEMMs being most of a layer's time.)"""
    return _held(cluster, COMM_KERNEL_SMS, margin)


def ep_sm_share(cluster: ClusterSpec, layout: Layout, margin: int = 0) -> float:
    """`sm_share` of the expert all-to-all: the flex dispatcher's DeepEP / HybridEP kernels hold
    the SMs Megatron gives them (`Layout.moe_flex_dispatcher_num_sms`, Megatron
    --moe-flex-dispatcher-num-sms; Megatron-Bridge's performance scripts give HybridEP 32, its
    H100 recipes 16, gpt-oss's 128), unset the DeepEP default COMM_KERNEL_SMS
    (token_dispatcher.py @d98e8a64: None -> 20; HybridEP takes DeepEP's default too,
    transformer_config.py); NCCL's all-to-all COMM_KERNEL_SMS. What they move per second is
    taken as published whatever the count (`planner.model.dispatch`: no benchmark gives the fused
    kernels' bandwidth by SM count)."""
    sms = layout.moe_flex_dispatcher_num_sms
    if layout.moe_token_dispatcher_type != "flex" or sms is None:
        return sm_share(cluster, margin)
    return _held(cluster, sms, margin)


def _held(cluster: ClusterSpec, sms: int, margin: int) -> float:
    """Share of the GPU's SMs a kernel on `sms` of them takes beyond the GEMMs' `margin`."""
    return min(1.0, max(sms - margin, 0) / sm_count.gpu_sms(cluster))


@dataclass(frozen=True)
class Link:
    """An achieved link: bus bandwidth in bytes/s per GPU and per-message latency in seconds."""

    bandwidth: float
    latency: float


def bus_efficiency(tier: LinkTier, innermost: bool) -> float:
    """The scale-up or scale-out bus efficiency; where the catalog measured the tier's own
    (AMD's xGMI, 0.75), that one times the constant over its shipped value, so that a
    profile's `scaleup_bandwidth` moves it too (0.4 halves it: 0.75 x 0.4 / 0.8 = 0.375) and
    the shipped constants leave it as measured (the ratio is 1.0 exactly)."""
    if innermost:
        value, shipped = SCALEUP_BUS_EFFICIENCY, SHIPPED_BUS_EFFICIENCY[0]
    else:
        value, shipped = SCALEOUT_BUS_EFFICIENCY, SHIPPED_BUS_EFFICIENCY[1]
    return value if tier.bus_efficiency is None else tier.bus_efficiency * (value / shipped)


def achieved(tier: LinkTier, innermost: bool) -> Link:
    """A tier's line rate times its bus efficiency (`bus_efficiency`)."""
    return Link(tier.bandwidth_bytes_per_s * bus_efficiency(tier, innermost), tier.latency_s)


@dataclass(frozen=True)
class Group:
    """A process group as placed on the cluster: n ranks, g per innermost domain, k domains."""

    size: int
    per_domain: int
    domains: int
    inner: Link
    outer: Link | None
    """The link between domains (None when the whole group sits in one innermost domain)."""
    tier_name: str
    nvlink: str | None = None
    """The NVLink family (`nccl_shares.family`) whose measured NCCL shares and call cost apply
    to the group's collectives; None where they do not (no NVLink domain: AMD's mesh, PCIe)."""
    fewest: int | None = None
    """Members on the emptiest domain, where shares differ (None: `per_domain`)."""
    others: tuple[Group, ...] = ()
    """The kind's other groups that may be slower (`placement.splits`; `_slowest`)."""

    def share(self, op: str) -> float:
        """NCCL's measured share of the inner link's bandwidth for collective class `op` among
        `per_domain` ranks (`nccl_shares.share`); 1 off NVLink."""
        return 1.0 if self.nvlink is None else nccl_shares.share(self.nvlink, op, self.per_domain)

    def call(self, op: str) -> float:
        """NCCL's fixed cost of one call of collective class `op` (`nccl_shares.NCCL_CALL_S`);
        0 off NVLink."""
        return 0.0 if self.nvlink is None else nccl_shares.NCCL_CALL_S[op]


def constants() -> tuple[object, ...]:
    """This module's constants, read at call time: memo keys of values computed with them hold
    them, so a calibration or a test that sets one never reads a value computed under another.
    NCCL's tables (`nccl_shares.NCCL_NVLINK_SHARE`, `NCCL_CALL_S`) enter flattened, once per
    table object (`_tables`): one that sets them replaces them, as it does a scalar."""
    return (
        SCALEUP_BUS_EFFICIENCY,
        SCALEOUT_BUS_EFFICIENCY,
        LATENCY_SCALE,
        COMM_KERNEL_SMS,
        *_tables(nccl_shares.NCCL_NVLINK_SHARE, nccl_shares.NCCL_CALL_S),
    )


_FLAT: tuple[object, object, tuple[object, ...]] = (None, None, ())
"""The NCCL tables `_tables` last flattened, and their values: (shares, calls, flat)."""


def _tables(
    shares: Mapping[str, Mapping[str, object]], calls: Mapping[str, object]
) -> tuple[object, ...]:
    """The values of NCCL's share and call tables as one tuple, flattened again only when either
    table is another object than the last one's (every estimate's memo keys read them: the
    search asks for hundreds of thousands)."""
    global _FLAT
    if _FLAT[0] is not shares or _FLAT[1] is not calls:
        rows = tuple(row for fam in shares.values() for row in fam.values())
        _FLAT = (shares, calls, (*rows, *calls.values()))
    return _FLAT[2]


_PLACED: ModelMemo[tuple[object, ...], Group] = ModelMemo()
"""`place` per cluster, stride, size and `constants` (all it reads)."""


def place(cluster: ClusterSpec, stride: int, size: int) -> Group:
    """Where a group of `size` ranks, `stride` ranks apart, lands (Megatron rank order); inside
    a full-mesh domain its members reach each other over their own links only (`mesh_link`).
    Remembered (`_PLACED`): every layer time and step places its groups again."""
    key = (stride, size, *constants())
    return _PLACED.get(cluster, key, lambda: _place(cluster, stride, size))


def _place(cluster: ClusterSpec, stride: int, size: int) -> Group:
    """`place`, computed: the worst split of the kind's groups, the others that may be slower
    kept (`placement.splits` over `ClusterSpec.placement_spans`: rank r on domain r // used)."""
    tiers = cluster.tiers
    nvlink = nccl_shares.family(cluster)
    if size <= 1:
        tier = cluster.tier_for_span(stride * size)
        return Group(1, 1, 1, mesh_link(tiers[0], 1), None, tier.name, nvlink)
    found = placement.splits(cluster.placement_spans, stride, size, cluster.num_gpus)
    groups = [_group(cluster, size, s, nvlink) for s in found]
    return replace(groups[0], others=tuple(groups[1:])) if len(groups) > 1 else groups[0]


def _group(cluster: ClusterSpec, n: int, split: placement.Split, nvlink: str | None) -> Group:
    """A group of `n` ranks split as `split`. On a full mesh the emptiest domain's members have
    the fewest links (`mesh_link`): the inner link is theirs."""
    inner, tier = cluster.tiers[0], cluster.tiers[split.tier]
    if split.domains == 1:
        return Group(n, n, 1, mesh_link(inner, n), None, tier.name, nvlink)
    g, few = split.most, split.fewest
    link = mesh_link(inner, few if inner.mesh else g)
    out = achieved(tier, False)
    return Group(n, g, split.domains, link, out, tier.name, nvlink, None if few == g else few)


def _slowest(f: Callable[..., float], size_bytes: float, grp: Group, *args: bool) -> float:
    """The slowest group's time of collective `f` (`Group.others`)."""
    return max(f(size_bytes, g, *args) for g in (replace(grp, others=()), *grp.others))


def mesh_link(tier: LinkTier, members: int) -> Link:
    """The innermost tier as `members` GPUs of one of its domains see it. Behind a switch each
    GPU's whole bandwidth reaches any peer. In a full mesh (`LinkTier.mesh`: AMD's xGMI, one
    link per pair of GPUs) the tier's bandwidth is a GPU's span - 1 links together, and a group
    uses the links to its own members only: members - 1 of them (one for a point-to-point
    pair), each bandwidth / (span - 1). The collective libraries spread a collective over all of
    them (RCCL builds its rings and all-to-alls over the direct links), and groups of different
    GPUs share no link, so the groups of a layout do not slow each other. MI300X (448 GB/s over
    7 links): a TP group of 2 sees 64 GB/s, of 4 192 GB/s, of 8 448 GB/s."""
    link = achieved(tier, True)
    if not tier.mesh or tier.span_gpus is None or tier.span_gpus < 2:
        return link
    peers = min(max(members - 1, 1), tier.span_gpus - 1)
    return Link(link.bandwidth * peers / (tier.span_gpus - 1), link.latency)


def _steps(n: int) -> int:
    return max(n - 1, 0)


def _tree_steps(k: int) -> int:
    return math.ceil(math.log2(k)) if k > 1 else 0


def tree_latency(grp: Group) -> float:
    """Latency of one phase (reduce or broadcast) of NCCL's tree all-reduce: (g-1) α_in inside
    the domain, ceil(log2 k) α_out across domains (tuning.cc, Tree)."""
    lat = _steps(grp.per_domain) * grp.inner.latency
    if grp.outer is not None:
        lat += _tree_steps(grp.domains) * grp.outer.latency
    return lat * LATENCY_SCALE


def ring_latency(grp: Group) -> float:
    """Latency of one ring reduce-scatter or all-gather over the group: n-1 steps, k-1 of them
    across domains, (n-k) α_in + (k-1) α_out (tuning.cc, Ring: nsteps = nRanks-1, nInterSteps =
    nNodes-1). Grows with every rank of the group, not with log2 of its domains."""
    lat = (grp.size - grp.domains) * grp.inner.latency
    if grp.outer is not None:
        lat += (grp.domains - 1) * grp.outer.latency
    return lat * LATENCY_SCALE


def ring_all_reduce(size_bytes: float, n: int, link: Link) -> float:
    """Flat ring all-reduce: 2(n-1)/n * S/B + 2(n-1) alpha."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    lat = 2 * (n - 1) * link.latency * LATENCY_SCALE
    return 2 * (n - 1) / n * size_bytes / link.bandwidth + lat


def all_reduce(size_bytes: float, grp: Group, nccl: bool = True) -> float:
    """All-reduce of S bytes over a (possibly two-level) group: a flat ring inside one domain;
    across domains the hierarchical bandwidth terms with the tree's latency. `nccl` (NCCL's
    call, not a library of its own: `Group.share`, `Group.call`): inside an NVLink domain at
    NCCL's measured share of the link and with its call cost."""
    if grp.size <= 1 or size_bytes <= 0:
        return 0.0
    if grp.others:
        return _slowest(all_reduce, size_bytes, grp, nccl)
    call = grp.call(ALL_REDUCE) if nccl else 0.0
    if grp.outer is None:
        share = grp.share(ALL_REDUCE) if nccl else 1.0
        link = Link(grp.inner.bandwidth * share, grp.inner.latency)
        return ring_all_reduce(size_bytes, grp.size, link) + call
    return 2 * (_half_bandwidth(size_bytes, grp, nccl) + tree_latency(grp)) + call


def _half_bandwidth(size_bytes: float, grp: Group, nccl: bool) -> float:
    """Bandwidth seconds of one reduce-scatter (or all-gather) of an S-byte array, its
    in-domain part at NCCL's ring share where `nccl`."""
    g, k = grp.per_domain, grp.domains
    t = (g - 1) / g * size_bytes / (grp.inner.bandwidth * (grp.share(RING) if nccl else 1.0))
    if grp.outer is not None:
        t += (k - 1) / k * (size_bytes / (grp.fewest or g)) / grp.outer.bandwidth
    return t


def reduce_scatter(size_bytes: float, grp: Group, nccl: bool = True) -> float:
    """Reduce-scatter of an S-byte array (each rank ends with S/n): (n-1)/n * S/B plus the
    ring's latency (NCCL runs it as a ring only) and, `nccl`, NCCL's call cost and share.
    `nccl` False: a library of its own moves it (Transformer Engine's userbuffers, PyTorch's
    symmetric memory), at the link's point-to-point rate."""
    if grp.size <= 1 or size_bytes <= 0:
        return 0.0
    if grp.others:
        return _slowest(reduce_scatter, size_bytes, grp, nccl)
    call = grp.call(RING) if nccl else 0.0
    return _half_bandwidth(size_bytes, grp, nccl) + ring_latency(grp) + call


def all_gather(size_bytes: float, grp: Group, nccl: bool = True) -> float:
    """All-gather into an S-byte array (each rank contributes S/n): (n-1)/n * S/B."""
    return reduce_scatter(size_bytes, grp, nccl)


def collective_floor(grp: Group, op: str = RING) -> tuple[float, float]:
    """(seconds per byte of the array, seconds per call) such that one NCCL reduce-scatter or
    all-gather over the group (`op` ALL_REDUCE: all-reduce) of S > 0 bytes takes at least
    per call + S x per byte: the group's own terms (`_slowest` takes the largest of its and
    `Group.others`'), the bandwidth term linear in S, the latencies and NCCL's call cost
    fixed. (0, 0) for a group of one rank."""
    g = replace(grp, others=())
    if g.size <= 1:
        return 0.0, 0.0
    if op != ALL_REDUCE:
        return _half_bandwidth(1.0, g, True), ring_latency(g) + g.call(RING)
    if g.outer is not None:
        return 2 * _half_bandwidth(1.0, g, True), 2 * tree_latency(g) + g.call(ALL_REDUCE)
    n, link = g.size, Link(g.inner.bandwidth * g.share(ALL_REDUCE), g.inner.latency)
    lat = 2 * (n - 1) * link.latency * LATENCY_SCALE + g.call(ALL_REDUCE)
    return 2 * (n - 1) / n / link.bandwidth, lat  # `ring_all_reduce`'s terms


def all_to_all(size_bytes: float, grp: Group) -> float:
    """All-to-all where each rank sends S bytes spread evenly over the group (incl. itself), at
    the link's rate (`nccl_shares.NCCL_NVLINK_SHARE` says why no measured share)."""
    n = grp.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    if grp.others:
        return _slowest(all_to_all, size_bytes, grp)
    if grp.outer is None:
        lat = _steps(n) * grp.inner.latency * LATENCY_SCALE
        return (n - 1) / n * size_bytes / grp.inner.bandwidth + lat
    g, k = grp.per_domain, grp.domains
    intra = (g - 1) / n * size_bytes / grp.inner.bandwidth
    off = (k - 1) / k if grp.fewest is None else (n - grp.fewest) / n  # the emptiest's rank's
    inter = off * size_bytes / grp.outer.bandwidth
    return max(intra, inter) + _steps(k) * grp.outer.latency * LATENCY_SCALE


def p2p(size_bytes: float, link: Link) -> float:
    """One point-to-point message: S/B + alpha."""
    if size_bytes <= 0:
        return 0.0
    return size_bytes / link.bandwidth + link.latency * LATENCY_SCALE


def p2p_link(cluster: ClusterSpec, stride: int, size: int) -> Link:
    """The link between neighbours of a group (e.g. adjacent pipeline stages): the slowest hop
    (inside a full mesh the pair's own link)."""
    grp = place(cluster, stride, size)
    return grp.outer or mesh_link(cluster.tiers[0], 2)
