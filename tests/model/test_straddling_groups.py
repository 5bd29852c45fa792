"""Groups that straddle an NVLink domain: every group of a kind placed, the slowest priced.

Oracles: Megatron's rank order (Megatron-LM d98e8a64 megatron/training/initialize.py:395
'tp-cp-ep-dp-pp'; expert groups etp, ep, edp: megatron/core/parallel_state.py:1656-1664), so the
groups of (stride, size) are base + off + i x stride in blocks of stride x size; a brute force
over every group's ranks (rank r on domain r // span); hand arithmetic in comments for GB200
NVL72 (hardware_catalog/gpus/gb200-nvl72.toml: span 72, NVLink 900 GB/s, InfiniBand 50 GB/s a
GPU, 2 / 5 us) and H100 (span 8, 450 / 50 GB/s).
"""

from __future__ import annotations

import random

import pytest
from jobs import h100_cluster

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.model import comms, placement

IB = 50e9 * 0.92  # InfiniBand NDR per GPU x SCALEOUT_BUS_EFFICIENCY


def _cluster(
    gpu: str, num_gpus: int, span: int | None = None, used: int | None = None
) -> ClusterSpec:
    """`num_gpus` of catalog `gpu` (innermost span `span`, `used` GPUs of each domain: None,
    the catalog's default)."""
    g = catalog.get_gpu(gpu)
    tiers = g.tiers
    if span is not None:
        tiers = (tiers[0].model_copy(update={"span_gpus": span}), *tiers[1:])
    return ClusterSpec(
        gpu=g,
        num_gpus=num_gpus,
        gpus_per_node=g.gpus_per_node,
        memory_gib=g.memory_gib,
        tiers=tiers,
        gpus_per_domain_used=used,
    )


def _brute(span: int, stride: int, size: int, world: int) -> set[tuple[int, int, int]]:
    """(domains, fullest, emptiest) of every group of the kind, each rank on domain r // span."""
    block = stride * size
    out = set()
    for base in range(0, max(world // block, 1) * block, block):
        for off in range(stride):
            counts: dict[int, int] = {}
            for i in range(size):
                dom = (base + off + i * stride) // span
                counts[dom] = counts.get(dom, 0) + 1
            out.add((len(counts), max(counts.values()), min(counts.values())))
    return out


def _as_group(c: ClusterSpec, size: int, split: tuple[int, int, int]) -> comms.Group:
    """One brute-force group, built with comms' own link rules."""
    k, most, fewest = split
    inner = comms.mesh_link(c.tiers[0], most if k > 1 else size)
    if k == 1:
        return comms.Group(size, size, 1, inner, None, "nvlink", comms.nccl_shares.family(c))
    outer = comms.achieved(c.tiers[-1], False)
    few = None if fewest == most else fewest
    return comms.Group(size, most, k, inner, outer, "ib", comms.nccl_shares.family(c), few)


def test_every_group_brute_force_against_place() -> None:
    # random kinds on a two-tier cluster of span `span`: the kind's time of every collective is
    # the slowest group's, each group priced with the same formulas
    rng = random.Random(7)
    for _ in range(300):
        span = rng.choice([4, 6, 8, 12, 16, 24, 36, 72])
        stride = rng.choice([1, 2, 3, 4, 8, 16, 32])
        size = rng.randint(2, 40)
        world = stride * size * rng.randint(1, 12) + rng.choice([0, 0, rng.randint(1, 50)])
        c = _cluster("h100-sxm-80gb", world, span)
        brute = _brute(span, stride, size, world)
        got = placement.splits((span, None), stride, size, world)
        assert got == placement.every_split((span, None), stride, size, world)  # the fast path
        assert {(s.domains, s.most, s.fewest) for s in got} <= brute
        for b in brute:  # every group is no worse than a split kept
            assert any(s.domains >= b[0] and s.most >= b[1] and s.fewest <= b[2] for s in got)
        grp = comms.place(c, stride, size)
        for nbytes in (1e3, 1e6, 1e9):
            for f in (comms.all_reduce, comms.reduce_scatter, comms.all_to_all):
                slowest = max(f(nbytes, _as_group(c, size, b)) for b in brute)
                assert f(nbytes, grp) == pytest.approx(slowest, rel=1e-12), (span, stride, size)


def test_nvl72_ep32_sends_three_quarters_of_its_bytes_over_infiniband() -> None:
    # ep 32 at stride 1 on 1,152 GB200: the group of ranks 64-95 has 64-71 in rack 0 (8) and
    # 72-95 in rack 1 (24). A rank in rack 0 sends 24/32 = 0.75 of S over its own NIC:
    # 0.75 x 1 GB / 46 GB/s = 16.30 ms, against (24-1)/32 x 1 GB / 720 GB/s = 1.0 ms on NVLink;
    # one step across racks, 5 us. (Before: the whole group on NVLink, 31/32 / 720 GB/s.)
    c = _cluster("gb200-nvl72", 1152, used=72)
    grp = comms.place(c, 1, 32)
    assert (grp.domains, grp.per_domain, grp.fewest) == (2, 24, 8)
    assert grp.tier_name == "infiniband"
    assert comms.all_to_all(1e9, grp) == pytest.approx(0.75e9 / IB + 5e-6)


def test_nvl72_etp4_ep32_spans_three_racks() -> None:
    # etp 4, ep 32: blocks of 128 ranks, each group one rank in 4 of its block. Block 384-511
    # holds 384-431 of rack 5 (48 ranks: 12 members), 432-503 of rack 6 (18), 504-511 of rack 7
    # (2): a rank of the 2 sends 30/32 of S over InfiniBand, two steps across racks (block
    # 128-255 splits 4 + 18 + 10, 256-383 8 + 18 + 6: less).
    c = _cluster("gb200-nvl72", 1152, used=72)
    grp = comms.place(c, 4, 32)
    assert grp.domains == 3 and grp.fewest == 2
    assert comms.all_to_all(1e9, grp) == pytest.approx(30 / 32 * 1e9 / IB + 2 * 5e-6)


def test_tp16_on_nvl72_pays_infiniband_where_a_group_straddles() -> None:
    # tp 16: ranks 64-79 split 8 + 8 over racks 0 and 1 (72 = 4.5 x 16); the flat groups of
    # 0-63 stay on NVLink. The straddling one's all-reduce: 2 x 7/8 S / (720 GB/s x NCCL ring
    # share) + 2 x 1/2 x (S/8) / 46 GB/s + tree latency, more than the flat groups' at 1 GB.
    c = _cluster("gb200-nvl72", 1152, used=72)
    grp = comms.place(c, 1, 16)
    assert grp.outer is not None and (grp.domains, grp.per_domain) == (2, 8)
    assert comms.all_reduce(1e9, grp) > 2 * 0.5 * (1e9 / 8) / IB
    # a job of one rack has no straddling group
    assert comms.place(_cluster("gb200-nvl72", 72), 1, 16).outer is None


def test_ep12_on_8_gpu_nodes_splits_8_and_4() -> None:
    # ranks 0-11: 8 on node 0, 4 on node 1 (before: 6 + 6). A rank of the 4 sends 8/12 of S over
    # InfiniBand: 2/3 x 1 GB / 46 GB/s; NVLink (8-1)/12 x 1 GB / 360 GB/s = 1.6 ms is less.
    grp = comms.place(h100_cluster(96), 1, 12)
    assert (grp.domains, grp.per_domain, grp.fewest) == (2, 8, 4)
    assert comms.all_to_all(1e9, grp) == pytest.approx(2 / 3 * 1e9 / IB + 5e-6)


@pytest.mark.parametrize("stride", [1, 2, 4, 8, 16, 64])
@pytest.mark.parametrize("size", [2, 4, 8, 16, 32])
def test_aligned_groups_are_placed_as_before(stride: int, size: int) -> None:
    # 8-GPU nodes, power-of-two kinds: every group splits alike, g = min(n, 8 / stride) per
    # node (at least 1) over n / g nodes; the tier the stride x n span needs (the formula
    # before the brute force)
    c = h100_cluster(1024)
    grp = comms.place(c, stride, size)
    g = max(1, min(size, 8 // stride))
    if stride * size <= 8:
        assert (grp.domains, grp.per_domain, grp.outer) == (1, size, None)
    else:
        assert (grp.domains, grp.per_domain) == (size // g, g)
        assert grp.outer == comms.achieved(c.tiers[1], False)
    assert grp.fewest is None and grp.others == ()


def test_the_aligned_fast_path_matches_every_group_placed() -> None:
    # brute force (`every_split`, every group of one period) against `splits`' closed form,
    # three tiers included
    rng = random.Random(3)
    spans_of: list[tuple[int | None, ...]] = [(8, None), (72, None), (8, 64, None), (72, 144, None)]
    for _ in range(1500):
        spans = rng.choice(spans_of)
        stride = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 64, 72, 144])
        size = rng.choice([1, 2, 3, 4, 6, 8, 9, 16, 18, 32, 64])
        world = rng.choice([512, 1152, 2304, 4096])
        if stride * size <= world:
            got = placement.splits(spans, stride, size, world)
            assert got == placement.every_split(spans, stride, size, world), (spans, stride, size)
