"""torchtitan's multi-token prediction (`[torchtitan] num_mtp_layers`): DeepSeek-V3's MTP depths
as pytorch/torchtitan b5bcd76c builds them, held and trained on a torchtitan plan's rank, refused
where torchtitan raises; suggest --framework torchtitan plans without them (torchtitan's default).

Oracles: torchtitan b5bcd76c source lines, cited per case, and hand arithmetic in the comments.
models/deepseek_v3/__init__.py:291-316 builds each MTP layer from the last decoder layer's config
(layers[-1], :599-604: MLA attention and the MoE) plus enorm, hnorm and mtp_norm (dim each) and
eh_proj (Linear 2 dim -> dim, no bias); mtp.py:106-161 runs them; mtp.py:267-275 applies the
shared lm_head to each depth's output and MTPLoss (:321-406) takes one cross entropy per depth."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan, reframe
from planner.model import memory, params
from planner.model.mtp_activations import mtp_extra_bytes, saved_loss_bytes
from planner.model.stage_activations import per_layer, shard
from planner.search import rules
from planner.search.rules import check_plan

H, T, V = 7168, 4096, 129_280  # DeepSeek-V3 671B: dim, one 4,096-token sequence, vocab_size


def _plan(mtp: int | None, **parallel: Any) -> Plan:
    data: dict[str, Any] = {
        "model": {"name": "deepseek-v3"},
        "cluster": {"gpu": "h200-sxm-141gb", "num_gpus": 512},
        "training": {
            "framework": "torchtitan",
            "seq_length": T,
            "global_batch_size": 512,
            "precision": "bf16",
        },
        "parallel": {"ep": 64, "zero_stage": 3, "recompute": "none", **parallel},
    }
    if mtp is not None:
        data["torchtitan"] = {"num_mtp_layers": mtp}
    return parse_plan(data)


def test_the_mtp_layers_parameters_by_hand() -> None:
    """One MTP depth of DeepSeek-V3 671B (dim 7,168; MLA q_lora_rank 1,536, kv_lora_rank 512,
    qk_nope 128, qk_rope 64, v 128, 128 heads; 256 routed experts and one shared, 2,048 wide)."""
    arch = _plan(1).job.arch
    assert arch.mtp_num_layers == 1 and not arch.mtp_use_repeated_layer
    norms = 3 * H + 2 * H  # enorm, hnorm, mtp_norm; the block's attention_norm and ffn_norm
    eh_proj = 2 * H * H  # 102,760,448
    mla = H * 1536 + 1536 + 1536 * 128 * (128 + 64)  # wq_a, q_norm, wq_b
    mla += H * (512 + 64) + 512 + 512 * 128 * (128 + 128)  # wkv_a, kv_norm, wkv_b
    mla += 128 * 128 * H  # wo: 187,107,328 in all
    router, shared = 256 * H, 3 * H * 2048
    experts = 256 * 3 * H * 2048  # 11,274,289,152
    want = (norms + eh_proj + mla + router + shared, experts)
    assert want == (335_778_816, 11_274_289_152)
    assert params.mtp_layer_params(arch) == want
    assert params.params_total(arch) == params.params_total(_plan(None).job.arch)  # 671B alone


def test_what_the_mtp_layer_adds_to_a_rank() -> None:
    """ep 64 over 512 GPUs, tp 1: FSDP2 shards the non-expert parameters over 512 ranks and the
    experts over ep 64 x efsdp 8 = 512; fp32 parameters, gradients (4 bytes) and Adam's two
    moments (8): 335,778,816 / 512 + 11,274,289,152 / 512 = 22,675,914 parameters a rank. The
    activations: at pp 1 one micro-batch in flight, the MTP depth's MoE block keeping what a
    decoder MoE layer keeps (the same config, no activation checkpointing here: recompute
    none), its norms' and eh_proj's inputs (12 bytes per hidden element: mtp_extra_bytes) and
    its loss's fp32 log-softmax (4 bytes per logit: 4 x 4,096 x 129,280 = 2,118,123,520), times
    the allocator allowance."""
    with_mtp, without = _plan(1), _plan(None)
    assert without.job.arch.mtp_num_layers == 0  # torchtitan's default builds none
    a = memory.estimate(with_mtp.job, with_mtp.require_layout()).stages[0]
    b = memory.estimate(without.job, without.require_layout()).stages[0]
    rank_params = 335_778_816 // 512 + 11_274_289_152 // 512
    assert rank_params == 22_675_914
    assert a.weights - b.weights == pytest.approx(4 * rank_params, rel=1e-12)
    assert a.grads - b.grads == pytest.approx(4 * rank_params, rel=1e-12)
    assert a.optimizer - b.optimizer == pytest.approx(8 * rank_params, rel=1e-12)
    arch, lay = with_mtp.job.arch, with_mtp.require_layout()
    sh = shard(with_mtp.job, lay)
    moe_layer = per_layer(arch, sh).kept[arch.kinds.index(arch.kinds[-1])]
    assert mtp_extra_bytes(arch, sh) == 12 * T * H
    assert saved_loss_bytes(V, sh) == 4 * T * V == 2_118_123_520
    want = (moe_layer + 12 * T * H + 4 * T * V) * memory.fragmentation(with_mtp.job)
    assert a.activations - b.activations == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_activation_checkpointing_leaves_the_mtp_layer_whole(recompute: str) -> None:
    """torchtitan wraps model.layers only (b5bcd76c distributed/activation_checkpoint.py:155-160:
    `model.get_submodule("layers")`), so under full or selective checkpointing the MTP depth's
    MoE block keeps what it keeps without recompute (`PerLayer.full`), where the decoder's
    layers keep their checkpointed bytes."""
    with_mtp, without = _plan(1, recompute=recompute), _plan(None, recompute=recompute)
    a = memory.estimate(with_mtp.job, with_mtp.require_layout()).stages[0]
    b = memory.estimate(without.job, without.require_layout()).stages[0]
    arch = with_mtp.job.arch
    sh = shard(with_mtp.job, with_mtp.require_layout())
    per = per_layer(arch, sh)
    moe = arch.kinds.index(arch.kinds[-1])
    assert per.full[moe] > per.kept[moe]  # checkpointing would have kept less
    want = (per.full[moe] + 12 * T * H + 4 * T * V) * memory.fragmentation(with_mtp.job)
    assert a.activations - b.activations == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(
    ("parallel", "titan", "match"),
    [
        ({"pp": 2}, {}, r"1 with pipeline parallel degree 2: torchtitan raises 'MTP does not "),
        ({"cp": 2}, {}, r"1 with context parallel degree 2: torchtitan raises 'MTP does not "),
        ({}, {"loss_chunks": 8}, r"1 with loss_chunks 8: torchtitan raises 'skip_lm_head is"),
    ],
)
def test_where_torchtitan_raises_on_mtp_exit_2_naming_the_field(
    parallel: dict[str, int], titan: dict[str, int], match: str
) -> None:
    """b5bcd76c models/deepseek_v3/mtp.py:196-206 ('MTP does not support pipeline / context
    parallelism yet.'), :268-272 (the chunked loss skips the LM head: 'skip_lm_head is not
    supported with MTP decoder ...')."""
    plan = _plan(1, **parallel)
    if titan:
        data_titan = {"num_mtp_layers": 1, **titan}
        plan = parse_plan(
            {
                "model": {"name": "deepseek-v3"},
                "cluster": {"gpu": "h200-sxm-141gb", "num_gpus": 512},
                "training": {"framework": "torchtitan", "seq_length": T, "global_batch_size": 512},
                "parallel": {"ep": 64, "zero_stage": 3},
                "torchtitan": data_titan,
            }
        )
    with pytest.raises(InputError, match="torchtitan.num_mtp_layers: " + match):
        check_plan(plan)
    check_plan(_plan(0, **parallel))  # without MTP the same layout runs


def test_only_deepseek_v3_takes_mtp_layers() -> None:
    """b5bcd76c llama3/__init__.py:369-374 has no num_mtp_layers parameter (TypeError)."""
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"framework": "torchtitan", "seq_length": 8192, "global_batch_size": 8},
            "parallel": {"zero_stage": 3},
            "torchtitan": {"num_mtp_layers": 1},
        }
    )
    with pytest.raises(InputError, match=r"llama3 model_registry takes no num_mtp_layers"):
        check_plan(plan)


def test_suggest_framework_torchtitan_trains_without_mtp_unless_asked() -> None:
    """torchtitan's model_registry builds no MTP layers unless given num_mtp_layers (b5bcd76c
    models/deepseek_v3/__init__.py:616-628), so a Megatron job's DeepSeek-V3 (one MTP depth) is
    planned under --framework torchtitan without it (`reframe`), and the pp 1 / cp 1 rule does
    not bind; a plan that asks for a depth is held to pp 1 (mtp.py:196-206)."""
    megatron = parse_plan(
        {
            "model": {"name": "deepseek-v3"},
            "cluster": {"gpu": "h200-sxm-141gb", "num_gpus": 512},
            "training": {"seq_length": T, "global_batch_size": 512},
            "parallel": {"ep": 64, "pp": 8},
        }
    )
    assert megatron.job.arch.mtp_num_layers == 1
    job = reframe(megatron.job, "torchtitan")
    assert job.titan.num_mtp_layers == 0 and job.arch.mtp_num_layers == 0
    one = _plan(1).require_layout()
    two = one.with_(pp=2, dp=256)
    assert "tt_mtp" not in [v.rule for v in rules.violations(job, two)]
    asked = _plan(1).job
    assert "tt_mtp" not in [v.rule for v in rules.violations(asked, one)]
    assert "tt_mtp" in [v.rule for v in rules.violations(asked, two)]


@pytest.mark.parametrize(
    ("titan", "match"),
    [
        ({"num_mtp_layers": 10**18}, r"torchtitan.num_mtp_layers: .*less than or equal to 10000"),
        ({"num_mtp_layers": 1, "mtp_scale": "0.3"}, r"torchtitan.mtp_scale: .*valid number"),
        ({"num_mtp_layers": 1, "mtp_scale": True}, r"torchtitan.mtp_scale: .*valid number"),
        ({"num_mtp_layers": 1, "mtp_scale": float("inf")}, r"torchtitan.mtp_scale: .*finite"),
    ],
)
def test_bad_mtp_fields_exit_2_naming_them(titan: dict[str, Any], match: str) -> None:
    """QA: 1e18 depths ran out of memory building the stage string (a traceback-class error),
    and mtp_scale took a string, a boolean or inf, which the module target then wrote as
    `mtp_scale=inf`, a name Python does not define."""
    data: dict[str, Any] = {
        "model": {"name": "deepseek-v3"},
        "cluster": {"gpu": "h200-sxm-141gb", "num_gpus": 512},
        "training": {"framework": "torchtitan", "seq_length": T, "global_batch_size": 512},
        "parallel": {"ep": 64, "zero_stage": 3},
        "torchtitan": titan,
    }
    with pytest.raises(InputError, match=match):
        parse_plan(data)
