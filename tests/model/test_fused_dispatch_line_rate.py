"""The fused EP dispatch (DeepEP / HybridEP) priced at each tier's line rate.

`dispatch.fused_dispatch` takes the line rate times its measured fused-kernel efficiency
(FUSED_EP_NVLINK_EFFICIENCY 0.70, FUSED_EP_RDMA_EFFICIENCY 0.88), so it must undo the bus
efficiency `comms.achieved` applied to the link: the tier's own `bus_efficiency` where the
catalog gives one (AMD's xGMI 0.75, hardware_catalog/gpus/mi300x-192gb.toml), not NCCL's
scale-up 0.80 (`comms.SCALEUP_BUS_EFFICIENCY`). Hand arithmetic in the comments; the brute
oracle: the fused time does not depend on a tier's bus efficiency at all.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.hardware import ClusterSpec
from planner.model import comms
from planner.model.dispatch import Routing, fused_dispatch, line_rate, moe_dispatch

# 4096 tokens of h 4096, bf16 (2 bytes) both ways; top-1 of 64 experts: one GPU reached
R = Routing(tokens=4096, hidden=4096, topk=1, experts=64)


def _with_efficiency(c: ClusterSpec, tier: int, eff: float | None) -> ClusterSpec:
    tiers = list(c.tiers)
    tiers[tier] = tiers[tier].model_copy(update={"bus_efficiency": eff})
    return c.model_copy(update={"tiers": tiers})


def test_xgmi_fused_dispatch_by_hand() -> None:
    # MI300X ep 8 in one node: the full mesh's 7 links, 448 GB/s line rate (achieved 448 x 0.75
    # = 336). NVLink leg: 4096 x 4096 x 2 = 33,554,432 bytes x 7/8 of the copies off the GPU
    # at 448 x 0.70 = 313.6 GB/s = 93.6229 us + alpha 2 us, dispatch and combine:
    # 2 x 95.6229 = 191.2457 us (before: 336 / 0.80 x 0.70 = 294 GB/s, 2 x 101.8644 us)
    c = job("llama3.1-8b", "mi300x-192gb", 8, 4096, 8).cluster
    grp = comms.place(c, 1, 8)
    assert c.tiers[0].bus_efficiency == 0.75 and grp.outer is None
    assert line_rate(grp.inner, c.tiers[0], True) == pytest.approx(448e9)
    one = 33_554_432 * 7 / 8 / (448e9 * 0.70) + 2e-6
    assert fused_dispatch(c, grp, R, 2.0, 2.0) == pytest.approx(2 * one)
    assert 2 * one == pytest.approx(191.2457e-6, rel=1e-6)


@pytest.mark.parametrize("tier", [0, 1])
def test_fused_dispatch_ignores_the_tiers_bus_efficiency(tier: int) -> None:
    # ep 16 over two H100 nodes (NVLink and the NIC both used): any bus_efficiency on either
    # tier gives the default's time, since the fused kernels' own efficiencies replace it
    c = job("llama3.1-8b", "h100-sxm-80gb", 16, 4096, 16).cluster
    r = Routing(tokens=4096, hidden=4096, topk=8, experts=64)
    base = moe_dispatch(c, 1, 16, r, "flex", 1, 2.0, 2.0)
    for eff in (0.5, 0.75, 0.95):
        assert moe_dispatch(_with_efficiency(c, tier, eff), 1, 16, r, "flex", 1, 2.0, 2.0) == (
            pytest.approx(base)
        )
