"""The flex dispatcher's SM count (`Layout.moe_flex_dispatcher_num_sms`, Megatron
--moe-flex-dispatcher-num-sms and its two deprecated per-backend flags): read from command lines
and NeMo keys, written back, emitted by launch, refused where DeepEP or the GPU cannot run it,
and what it costs: the SMs the expert all-to-all holds while it hides under compute
(`comms.ep_sm_share`) and DeepEP's buffers, sized per pair of SMs (`buffers.dispatcher_bytes`).

Oracles: Megatron-LM d98e8a64 (transformer_config.py: the deprecated moe_deepep_num_sms /
moe_hybridep_num_sms route to moe_flex_dispatcher_num_sms, which wins, and conflicting values
raise; token_dispatcher.py: unset, DeepEP runs on 20), DeepEP's Buffer.set_num_sms (an even
count), hand arithmetic of the SM shares, and the estimate's own pieces recombined by hand.
"""

from __future__ import annotations

import pytest
import yaml

from planner.emit import megatron
from planner.emit.launch import render
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan, reframe
from planner.model import buffers, comms, cost
from planner.search.bound import lower_bound
from planner.search.rules import violations

# a 16-layer MoE of 1,024 hidden with 16 experts of 2,048 (top 2) on two H100 nodes: ep 16 over
# both, the HybridEP dispatcher hidden under the other micro-batch's compute (the EP overlap)
LINE = (
    "--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 "
    "--vocab-size 32000 --bf16 --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 2048 "
    "--expert-model-parallel-size 16 --moe-token-dispatcher-type flex "
    "--moe-flex-dispatcher-backend hybridep --moe-grouped-gemm --swiglu "
    "--transformer-impl transformer_engine --overlap-moe-expert-parallel-comm "
    "--delay-wgrad-compute"
)


def _plan(extra: str = "", line: str = LINE):  # type: ignore[no-untyped-def]
    return parse_plan(megatron_args.to_plan(f"{line} {extra}", "h100-sxm-80gb", 16))


def test_the_share_by_hand() -> None:
    plan = _plan("--moe-flex-dispatcher-num-sms 32")
    job, lay = plan.job, plan.require_layout()
    # H100: 132 SMs. 32 of them held; Megatron's default 20 unset; a GEMM margin of 16 SMs
    # already free all step leaves 16 more to take
    assert comms.ep_sm_share(job.cluster, lay) == pytest.approx(32 / 132)
    unset = lay.with_(moe_flex_dispatcher_num_sms=None)
    assert comms.ep_sm_share(job.cluster, unset) == pytest.approx(20 / 132)
    assert comms.ep_sm_share(job.cluster, lay, 16) == pytest.approx(16 / 132)
    # NCCL's all-to-all does not read the count: the collectives' 20
    nccl = lay.with_(moe_token_dispatcher_type="alltoall")
    assert comms.ep_sm_share(job.cluster, nccl) == comms.sm_share(job.cluster)


def test_the_step_pays_the_extra_sms_on_the_hidden_all_to_all() -> None:
    plan = _plan("--moe-flex-dispatcher-num-sms 32")
    job, lay = plan.job, plan.require_layout()
    more = cost.estimate(job, lay)
    base = cost.estimate(job, lay.with_(moe_flex_dispatcher_num_sms=None))
    hidden = base.breakdown.ep_comm_hidden
    assert hidden > 0 and more.breakdown.ep_comm_hidden == pytest.approx(hidden)
    # pp 1, no bubble: the step grows by the 12 SMs beyond the default's share of what hides
    assert more.step_time_s - base.step_time_s == pytest.approx((32 - 20) / 132 * hidden)
    # fewer SMs than the default cost less; the search's lower bound stays under either
    fewer = cost.estimate(job, lay.with_(moe_flex_dispatcher_num_sms=8))
    assert fewer.step_time_s == pytest.approx(base.step_time_s - 12 / 132 * hidden)
    # the search's lower bound takes the same share: under each estimate, at 8 SMs too
    for sms, p in ((32, more), (None, base), (8, fewer)):
        assert lower_bound(job, lay.with_(moe_flex_dispatcher_num_sms=sms)) <= p.step_time_s
    # without the EP overlap nothing hides: the count changes nothing
    bare = lay.with_(ep_comm_overlap=False)
    assert cost.estimate(job, bare).step_time_s == pytest.approx(
        cost.estimate(job, bare.with_(moe_flex_dispatcher_num_sms=None)).step_time_s
    )


def test_deepep_buffers_grow_with_its_channels() -> None:
    plan = _plan("--moe-flex-dispatcher-backend deepep --moe-flex-dispatcher-num-sms 32")
    job, lay = plan.job, plan.require_layout()
    # every term of DeepEP's size hints is per channel (two SMs): 16 channels against 10
    default = buffers.dispatcher_bytes(job, lay.with_(moe_flex_dispatcher_num_sms=None))
    # up to the 128-byte rounding of each hint (DeepEP dd758caf csrc/legacy/config.hpp:71, :97)
    assert buffers.dispatcher_bytes(job, lay) == pytest.approx(default * 16 / 10, abs=2 * 128 * 2)
    # HybridEP's buffers are per token, whatever its SMs
    hybrid = lay.with_(moe_flex_dispatcher_backend="hybridep")
    assert buffers.dispatcher_bytes(job, hybrid) == buffers.dispatcher_bytes(
        job, hybrid.with_(moe_flex_dispatcher_num_sms=None)
    )


def test_megatron_routes_the_three_flags() -> None:
    def sms(extra: str) -> int | None:
        return _plan(extra).require_layout().moe_flex_dispatcher_num_sms

    assert sms("") is None
    assert sms("--moe-flex-dispatcher-num-sms 24") == 24
    assert sms("--moe-hybridep-num-sms 32") == 32
    assert sms("--moe-deepep-num-sms 16") == 16
    # the unified flag wins over a deprecated one; the two deprecated ones must agree
    assert sms("--moe-hybridep-num-sms 32 --moe-flex-dispatcher-num-sms 24") == 24
    assert sms("--moe-hybridep-num-sms 32 --moe-deepep-num-sms 32") == 32
    with pytest.raises(InputError, match="conflicting SM counts"):
        sms("--moe-hybridep-num-sms 32 --moe-deepep-num-sms 16")
    with pytest.raises(InputError, match=r"--moe-hybridep-num-sms: expected 1 or more SMs"):
        sms("--moe-hybridep-num-sms 0")
    reading = megatron_args.read(f"{LINE} --moe-flex-dispatcher-num-sms 24", "h100-sxm-80gb", 16)
    assert "--moe-flex-dispatcher-num-sms" not in reading.ignored


def test_written_back_and_emitted() -> None:
    plan = _plan("--moe-flex-dispatcher-num-sms 32")
    job, lay = plan.job, plan.require_layout()
    assert "hybridep-32sm" in lay.describe()
    text = plan_writer.render(job, lay, {"name": "moe"}, [])
    assert "moe_flex_dispatcher_num_sms = 32" in text
    args = [a for g in megatron.arguments(plan).parallel for a in g]
    assert args[args.index("--moe-flex-dispatcher-num-sms") + 1] == "32"
    bridge = yaml.safe_load(render(plan, "megatron-bridge")[1])["model"]
    assert bridge["moe_flex_dispatcher_num_sms"] == 32
    # unset: nothing written, nothing emitted (Megatron's default)
    bare = _plan()
    assert "num_sms" not in plan_writer.render(bare.job, bare.require_layout(), {"name": "m"}, [])
    assert "--moe-flex-dispatcher-num-sms" not in [
        a for g in megatron.arguments(bare).parallel for a in g
    ]


def test_refused_where_it_cannot_run() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    field = "parallel.moe_flex_dispatcher_num_sms"

    def fields(**change: object) -> list[str]:
        return [v.field for v in violations(job, lay.with_(**change))]

    assert field not in fields(moe_flex_dispatcher_num_sms=32)
    assert field in fields(moe_flex_dispatcher_num_sms=133)  # H100 has 132
    # DeepEP asserts an even count; HybridEP takes any
    assert field in fields(moe_flex_dispatcher_backend="deepep", moe_flex_dispatcher_num_sms=21)
    assert field not in fields(moe_flex_dispatcher_backend="deepep", moe_flex_dispatcher_num_sms=22)
    assert field not in fields(moe_flex_dispatcher_num_sms=21)
    titan = reframe(job, "torchtitan")
    # (torchtitan's first refusal is reported: FSDP2 overlaps its traffic, as said here)
    deepep = lay.with_(
        moe_flex_dispatcher_backend="deepep",
        ep_comm_overlap=False,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
    )
    assert field not in [v.field for v in violations(titan, deepep)]
    assert field in [
        v.field for v in violations(titan, deepep.with_(moe_flex_dispatcher_num_sms=24))
    ]
