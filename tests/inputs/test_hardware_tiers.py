"""Tests for planner.inputs.hardware's link tiers (LinkTier, check_tiers, ClusterSpec): nested spans
only, a full mesh only innermost, the tier a span uses, units, and a node smaller than the NVLink
board.

Oracles: the tier rules restated in each test, and hand arithmetic in comments.
"""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec, GpuSpec, LinkTier, check_tiers

# --- check_tiers ----------------------------------------------------------------------------


def _tier(name: str, span: int | None, bw: float = 100.0) -> LinkTier:
    return LinkTier(name=name, span_gpus=span, bandwidth_gb_per_s_per_gpu=bw)


def test_check_tiers_accepts_nested_spans() -> None:
    check_tiers((_tier("a", 8), _tier("b", 64), _tier("c", None)), num_gpus=4096)
    check_tiers((_tier("a", 8), _tier("b", 64)), num_gpus=64)


def test_check_tiers_rejects_no_tiers() -> None:
    with pytest.raises(ValueError, match="at least one"):
        check_tiers(())


def test_check_tiers_rejects_shrinking_span() -> None:
    with pytest.raises(ValueError, match=r"'b' span_gpus \(4\) must be a larger multiple"):
        check_tiers((_tier("a", 8), _tier("b", 4), _tier("c", None)))


def test_check_tiers_rejects_equal_span() -> None:
    with pytest.raises(ValueError, match="larger multiple"):
        check_tiers((_tier("a", 8), _tier("b", 8), _tier("c", None)))


def test_check_tiers_rejects_span_that_does_not_divide() -> None:
    # 12 % 8 = 4: a 12-GPU tier cannot be built of whole 8-GPU domains.
    with pytest.raises(ValueError, match=r"'b' span_gpus \(12\).*'a' span_gpus \(8\)"):
        check_tiers((_tier("a", 8), _tier("b", 12), _tier("c", None)))


def test_check_tiers_rejects_unbounded_inner_tier() -> None:
    with pytest.raises(ValueError, match="'a' has no span_gpus"):
        check_tiers((_tier("a", None), _tier("b", None)))


def test_check_tiers_rejects_outermost_smaller_than_cluster() -> None:
    with pytest.raises(ValueError, match=r"spans 64 GPUs but num_gpus is 128"):
        check_tiers((_tier("a", 8), _tier("b", 64)), num_gpus=128)


def test_check_tiers_takes_a_full_mesh_only_innermost() -> None:
    mesh = _tier("xgmi", 8).model_copy(update={"mesh": True})
    check_tiers((mesh, _tier("b", None)))
    with pytest.raises(ValueError, match="'b' has mesh = true: only the innermost"):
        check_tiers((_tier("a", 8), _tier("b", 64).model_copy(update={"mesh": True})))
    with pytest.raises(ValueError, match="'a' has mesh = true"):  # one GPU has no peer
        check_tiers((_tier("a", 1).model_copy(update={"mesh": True}), _tier("b", None)))
    # the AMD parts' xGMI is a mesh; NVLink behind NVSwitch is not
    assert catalog.get_gpu("mi300x-192gb").tiers[0].mesh
    assert not catalog.get_gpu("h100-sxm-80gb").tiers[0].mesh


# --- ClusterSpec ----------------------------------------------------------------------------


def _cluster(gpu: GpuSpec, num_gpus: int, tiers: tuple[LinkTier, ...] | None = None) -> ClusterSpec:
    return ClusterSpec(
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=gpu.gpus_per_node,
        memory_gib=gpu.memory_gib,
        tiers=gpu.tiers if tiers is None else tiers,
    )


def test_cluster_rejects_outermost_span_smaller_than_num_gpus(gpus: dict[str, GpuSpec]) -> None:
    h100 = gpus["h100-sxm-80gb"]
    tiers = (_tier("nvlink", 8, 450), _tier("rail", 64, 50))
    assert _cluster(h100, 64, tiers).num_gpus == 64
    with pytest.raises(ValueError, match="spans 64 GPUs but num_gpus is 128"):
        _cluster(h100, 128, tiers)


def test_tier_for_span_picks_innermost_covering_tier(gpus: dict[str, GpuSpec]) -> None:
    cluster = _cluster(gpus["h100-sxm-80gb"], 16)
    assert cluster.tier_for_span(1).name == "nvlink"
    assert cluster.tier_for_span(8).name == "nvlink"
    assert cluster.tier_for_span(9).name == "infiniband"
    assert cluster.tier_for_span(16).name == "infiniband"
    # 79.64 GiB x 2^30 bytes
    assert cluster.capacity_bytes == 79.64 * 2**30


def test_tier_for_span_on_nvl72(gpus: dict[str, GpuSpec]) -> None:
    cluster = _cluster(gpus["gb200-nvl72"], 144)
    assert cluster.tier_for_span(72).name == "nvlink"
    assert cluster.tier_for_span(73).name == "infiniband"


def test_tier_for_span_with_three_tiers(gpus: dict[str, GpuSpec]) -> None:
    tiers = (_tier("nvlink", 8, 450), _tier("leaf", 256, 50), _tier("spine", None, 25))
    cluster = _cluster(gpus["h100-sxm-80gb"], 1024, tiers)
    assert [cluster.tier_for_span(n).name for n in (8, 16, 256, 512)] == [
        "nvlink",
        "leaf",
        "leaf",
        "spine",
    ]


def test_link_tier_units() -> None:
    tier = LinkTier(name="ib", bandwidth_gb_per_s_per_gpu=50, latency_us=5)
    assert tier.bandwidth_bytes_per_s == 50e9  # decimal GB/s
    assert tier.latency_s == pytest.approx(5e-6)


def _noded(gpu: str, per_node: int) -> ClusterSpec:
    from planner.inputs.plan import parse_plan

    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": gpu, "num_gpus": 64, "gpus_per_node": per_node},
        "training": {"seq_length": 4096, "global_batch_size": 64},
    }
    return parse_plan(doc).job.cluster


def test_a_smaller_node_ends_the_boards_nvlink() -> None:
    """HGX H100's NVLink is the board of 8 (catalog span 8 = its node): on nodes of 4 it spans
    4, and a TP group of 8 crosses the next tier; GB200's NVLink spans the NVL72 rack across
    trays of 4, so nodes of 2 keep it; AMD's xGMI full mesh keeps its links per peer; a larger
    node than the board's keeps the board's span."""
    assert _noded("h100-sxm-80gb", 4).tiers[0].span_gpus == 4
    assert _noded("h100-sxm-80gb", 4).tier_for_span(8).name != "nvlink"
    assert _noded("h100-sxm-80gb", 8).tiers[0].span_gpus == 8
    assert _noded("h100-sxm-80gb", 16).tiers[0].span_gpus == 8
    assert _noded("gb200-nvl72", 2).tiers[0].span_gpus == 72
    assert _noded("mi355x-288gb", 4).tiers[0].span_gpus == 8
