"""The flex dispatcher's backends: HybridEP's buffers across NVLink domains, DeepEP's 8 NVLink
peers on a larger domain (GB200 NVL72), and the group sizes either refuses."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import buffers, dispatch
from planner.search import rules

FLEX = Layout(moe_token_dispatcher_type="flex")


def test_hybridep_counts_its_rdma_buffers_and_routing_map_across_nodes() -> None:
    # DeepSeek-V3 on 512 H800, ep 64 = 8 nodes of 8: T = 4096 tokens per rank, h = 7168
    # (14,336 bf16 bytes, 56 fp32 scales = 224 bytes), 4 experts per rank (DeepEP hybrid-ep
    # 94a9f8f6). Intra-node (buffer/intranode.cu): 4096 x 64 x (14,336 + 4 x 4 x 8 + 224)
    # = 262,144 x 14,688 = 3,850,371,072. RDMA (hybrid_ep.cu:92-99, num_of_nodes > 1;
    # buffer/internode_doca.cu:388-420): own tokens 4096 x (14,336 + 4 x 4 x 64 + 224)
    # = 63,832,064; the 7 other nodes' 4096 x 7 x 14,688 = 421,134,336; combine
    # (internode_doca.cu:559-576) 2 x 4096 x 7 x (14,336 + 128) = 829,423,616. Routing map
    # (hybrid_ep.cu:99, extension/allgather.cu:142-147): 256 x 4096 x 64 bools = 67,108,864
    j = job("deepseek-v3", "h800-sxm-80gb", 512, 4096, 4096)
    lay = FLEX.with_(pp=8, dp=64, ep=64, moe_flex_dispatcher_backend="hybridep")
    expected = 3_850_371_072 + 63_832_064 + 421_134_336 + 829_423_616 + 67_108_864
    assert buffers.dispatcher_bytes(j, lay) == expected  # 4989.5 MiB; 3672 MiB before


def test_deepep_keeps_eight_nvlink_peers_on_nvl72() -> None:
    # DeepEP's legacy kernels: 8 NVLink peers (deepseek-ai/DeepEP dd758caf
    # csrc/legacy/buffer.hpp:23, :120-121); Megatron's Buffer without allow_mnnvl (Megatron-LM
    # d98e8a64 fused_a2a.py:68) -> NVSHMEM_DISABLE_MNNVL (deep_ep/buffers/legacy.py:124-126).
    # ep 64 on GB200 NVL72 is then 8 sets of 8 over the NIC, as on 8 B200 nodes (same NVLink
    # 900 GB/s and 400 Gb/s NIC per GPU); HybridEP keeps the 64 on one NVLink domain
    times = {}
    for gpu in ("gb200-nvl72", "b200-sxm-180gb"):
        for backend in ("deepep", "hybridep"):
            j = job("deepseek-v3", gpu, 256, 4096, 4096)
            lay = FLEX.with_(pp=4, dp=64, ep=64, moe_flex_dispatcher_backend=backend)
            grp = dispatch.flex_group(j.cluster, 64, dispatch.nvl_peers(j, lay))
            times[gpu, backend] = dispatch.layer_dispatch(j, lay, 4096.0, 1.0, 1, (), 2)[0]
            if (gpu, backend) == ("gb200-nvl72", "deepep"):
                assert (grp.per_domain, grp.domains, grp.tier_name) == (8, 8, "infiniband")
    assert times["gb200-nvl72", "deepep"] == pytest.approx(times["b200-sxm-180gb", "deepep"])
    assert times["gb200-nvl72", "hybridep"] < times["gb200-nvl72", "deepep"] / 3
    # its buffers follow the same split: NVLink over 8 peers, RDMA over 64 / 8 = 8 ranks
    j = job("deepseek-v3", "gb200-nvl72", 256, 4096, 4096)
    lay = FLEX.with_(pp=4, dp=64, ep=64, moe_flex_dispatcher_backend="deepep")
    assert buffers.dispatcher_bytes(j, lay) == buffers._deepep_bytes(14_336, 64, 20)
    assert buffers._deepep_bytes(14_336, 64, 20) > buffers._deepep_bytes(14_336, 8, 20) * 2


@pytest.mark.parametrize(
    ("model", "n", "ep", "etp", "backend", "field"),
    [
        # DeepEP: legacy.py:259 `assert num_ranks in config_map` (2 .. 160, no 192 or 256)
        ("deepseek-v3", 256, 256, 1, "deepep", "parallel.ep"),
        ("kimi-k2", 384, 192, 1, "deepep", "parallel.ep"),
        ("qwen3-235b-a22b", 192, 4, 3, "deepep", "parallel.etp"),
        # HybridEP: hybrid_ep_buffer.py:74-76, 12 ranks over nodes of 8
        ("qwen3-235b-a22b", 192, 4, 3, "hybridep", "parallel.etp"),
        ("deepseek-v3", 256, 256, 1, "hybridep", None),  # 32 nodes of 8
        ("kimi-k2", 384, 192, 1, "hybridep", None),
        ("deepseek-v3", 256, 64, 1, "deepep", None),
    ],
)
def test_flex_group_sizes(
    model: str, n: int, ep: int, etp: int, backend: str, field: str | None
) -> None:
    j = job(model, "h100-sxm-80gb", n, 4096, 4096)
    lay = FLEX.with_(dp=n, ep=ep, etp=etp, moe_flex_dispatcher_backend=backend)
    got = [v for v in rules.violations(j, lay) if v.rule == "flex_group"]
    assert [v.field for v in got] == ([field] if field else [])
    if field:
        assert f"{ep} x {etp} = {ep * etp} ranks" in got[0].message
