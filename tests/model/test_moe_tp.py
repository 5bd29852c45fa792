"""Tensor parallelism inside an MoE layer: which collectives the MoE block runs, and the token
dispatcher's traffic when the experts are sharded over expert-TP ranks.

Oracles: Megatron-LM's code @d98e8a64 and torchtitan's @b5bcd76c, read for which collectives
run (no figures), and hand arithmetic in comments. Megatron's token dispatchers take the layer's
sequence-parallel input as it is ([S/TP, B, H], token_dispatcher.py) and gather over expert-TP
ranks only what they route; a shared expert is a ColumnParallelLinear / RowParallelLinear pair on
the TP group, the dense MLP's collectives. torchtitan replicates the MoE block's input over TP
only without expert parallelism (common moe_sharding.py `_moe_sharding_config`).
"""

from __future__ import annotations

from dataclasses import replace
from math import comb

import pytest
from jobs import h100_cluster, job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dispatch, layer_time, nccl_shares
from planner.model.layer_time import gpu_of


def _tp_traffic(j: Job, lay: Layout, moe: bool) -> float:
    return layer_time.layer_time(j, lay, gpu_of(j), moe).tp_traffic


def _mixtral(**kw: object) -> Job:
    return job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 8, **kw)


SP_ETP1 = Layout(tp=2, pp=1, dp=4, ep=4, etp=1, sequence_parallel=True)


def test_moe_block_without_shared_experts_runs_no_tp_collectives() -> None:
    # Mixtral has no shared expert: at tp 2, etp 1 only the attention block's all-gathers and
    # reduce-scatters run, each of the same t x h bytes as a dense MLP block's, so the MoE
    # layer's TP traffic is exactly half of a dense layer's of the same model
    j = _mixtral()
    assert _tp_traffic(j, SP_ETP1, True) == pytest.approx(_tp_traffic(j, SP_ETP1, False) / 2)


def test_shared_expert_runs_the_dense_mlp_collectives() -> None:
    # the same model with a shared expert: its TP-sharded MLP gathers the layer input and
    # reduce-scatters its output as a dense MLP does, so the two layers' traffic is equal
    plain = _mixtral()
    arch = plain.arch.model_copy(update={"moe_shared_expert_intermediate_size": 14336})
    j = replace(plain, arch=arch)
    assert _tp_traffic(j, SP_ETP1, True) == pytest.approx(_tp_traffic(j, SP_ETP1, False))


def test_torchtitan_gathers_the_moe_input_only_without_expert_parallelism() -> None:
    j = _mixtral(framework="torchtitan")
    tp_only = Layout(tp=2, pp=1, dp=4, sequence_parallel=True)
    assert _tp_traffic(j, tp_only, True) == pytest.approx(_tp_traffic(j, tp_only, False))
    with_ep = Layout(tp=2, pp=1, dp=4, ep=2, etp=1, sequence_parallel=True)
    assert _tp_traffic(j, with_ep, True) == pytest.approx(_tp_traffic(j, with_ep, False) / 2)
    # and its experts on the gathered input are no dispatcher traffic
    assert layer_time.layer_time(j, tp_only, gpu_of(j), True).ep == 0.0


ROUTING = dispatch.Routing(tokens=2048, hidden=4096, topk=2, experts=8)


@pytest.fixture
def no_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bandwidth terms only, at one rate: no latency, no NCCL call cost, and NCCL's measured
    shares by collective and group size (nccl_shares.NCCL_NVLINK_SHARE, tested in test_comms) at
    1, so that the ratios below are the bytes' alone."""
    monkeypatch.setattr(comms, "LATENCY_SCALE", 0.0)
    shares = nccl_shares.NCCL_NVLINK_SHARE
    ones = {fam: dict.fromkeys(row, (1.0, 1.0, 1.0)) for fam, row in shares.items()}
    monkeypatch.setattr(nccl_shares, "NCCL_NVLINK_SHARE", ones)
    calls = dict.fromkeys(nccl_shares.NCCL_CALL_S, 0.0)
    monkeypatch.setattr(nccl_shares, "NCCL_CALL_S", calls)


@pytest.mark.usefixtures("no_latency")
@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather"])
def test_expert_tp_gathers_in_the_dispatcher(dispatcher: str) -> None:
    # one 8-GPU node, etp 2 x ep 4 against etp 1 x ep 4, bandwidth terms only (same NVLink).
    # alltoall: per all-to-all a rank sends its S bytes of copies, 3/4 of them to other GPUs; the
    # AllGather-V over its etp pair then receives the partner's S bytes (the 2S gathered, half
    # from the other rank) and the reduce-scatter before the combine sends S: from 3/4 S / B to
    # (3/4 + 1) S / B per collective pair, x 7/3. allgather: tokens x 8 ranks x h gathered over
    # etp 2 x ep 4 (7/8 of it received) against tokens x 4 x h over ep 4 (3/4 of it): 7 / 3.
    cluster = h100_cluster(8)
    one = dispatch.moe_dispatch(cluster, 1, 4, ROUTING, dispatcher)
    two = dispatch.moe_dispatch(cluster, 2, 4, ROUTING, dispatcher)
    assert two / one == pytest.approx(7 / 3)


@pytest.mark.usefixtures("no_latency")
def test_alltoall_without_ep_keeps_the_expert_tp_gather() -> None:
    # ep 1, etp 2: no all-to-all, the gather alone: S / B per collective against 3/4 S / B
    cluster = h100_cluster(8)
    one = dispatch.moe_dispatch(cluster, 1, 4, ROUTING, "alltoall")
    alone = dispatch.moe_dispatch(cluster, 2, 1, ROUTING, "alltoall")
    assert alone / one == pytest.approx(4 / 3)


@pytest.mark.usefixtures("no_latency")
def test_fused_dispatch_sends_to_every_expert_tp_rank() -> None:
    # flex over etp 2 x ep 4 on one 8-GPU node: Megatron expands the routing map
    # [tokens, ep, 1, local] over tp (token_dispatcher.py d98e8a64 :1905-1918), so a chosen
    # expert's 2 etp ranks both get the token. The token's 2 of 8 experts reach
    # 4 (1 - C(6, 2) / C(8, 2)) = 1.857 of the 4 EP ranks (2 experts each), 2 GPUs each: 3.71
    # GPUs, 7/8 of them other GPUs; each gets the token once over NVLink at the fused kernels'
    # efficiency. A dispatch and a combine (bf16) in the forward and again in the backward.
    cluster = h100_cluster(8)
    reached = 2 * 4 * (1 - comb(6, 2) / comb(8, 2))
    nvl = (
        comms.place(cluster, 1, 8).inner.bandwidth
        / comms.SCALEUP_BUS_EFFICIENCY
        * dispatch.FUSED_EP_NVLINK_EFFICIENCY
    )
    one_way = 2048 * 4096 * 2 * reached * 7 / 8 / nvl
    two = dispatch.moe_dispatch(cluster, 2, 4, ROUTING, "flex")
    assert two == pytest.approx(4 * one_way)
    # more than at etp 1, where the token's 2 copies reach 4 (1 - C(6, 2) / C(8, 2)) = 1.86 GPUs
    assert two > dispatch.moe_dispatch(cluster, 1, 4, ROUTING, "flex")
