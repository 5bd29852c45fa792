"""The experts' fused grouped MLP (training.moe_fused_grouped_mlp; Megatron
--use-transformer-engine-op-fuser): the HBM traffic it saves, where its kernel runs, the plan's
checks and the layout rules.

Oracles: Transformer Engine d0067d0d ops/fused/grouped_mlp.py (the fused kernels are registered
only with NVTE_CUTEDSL_FUSED_GROUPED_MLP on compute capability 10, and `fuse_grouped_mlp_ops`
fuses only under the MXFP8 or NVFP4 recipe, a GLU with glu_interleave_size 32); Megatron-LM
d98e8a64 megatron.core.transformer.moe.experts `_is_fused_impl_supported` (no expert TP, no
expert_fc1 / moe_act offload, a SiLU / quick-GELU GLU or squared ReLU) and TransformerConfig
("fused_group_mlp requires use_transformer_engine_op_fuser"); hand byte counts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job
from plan_text import PARALLEL, load_error, plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import layer_time, moe_time
from planner.model.routing_load import step_load
from planner.search.rules import violations

GB300 = "gb300-nvl72"


def _dsv3(gpu: str = GB300, fused: bool = True, **kw: object) -> Job:
    training = {"precision": "fp8", "fp8_recipe": "mxfp8", **kw}
    return job("deepseek-v3", gpu, 256, 4096, 256, moe_fused_grouped_mlp=fused, **training)


LAY = Layout(tp=1, pp=4, dp=64, ep=32, etp=1)


def test_saved_bytes_by_hand() -> None:
    # per routed row and expert-FFN column F, beyond what fused and unfused both write, with g the
    # fc1 output's width in F (2 for a GLU): forward, the activation reads gF and writes F and the
    # quantiser reads that F (g + 2); backward, fc2's dgrad writes F, the activation's backward
    # reads it and fc1's output (gF) and writes gF, the quantiser reads the gF (F + F + gF + gF
    # + gF), of which the fused epilogue still reads fc1's output (gF): 2 + 2g.
    assert moe_time.fused_mlp_saved_elements(True) == (2 + 2) + (2 + 2 * 2) == 10
    assert moe_time.fused_mlp_saved_elements(False) == (1 + 2) + (2 + 2 * 1) == 7


def test_the_layer_saves_those_bytes_a_third_in_the_forward() -> None:
    # DeepSeek-V3 on GB300 in MXFP8: 4096 tokens, top-8 at the routing load, F = 2048: 10 x 2
    # bytes per row and column at the achieved HBM bandwidth, split as the layer's elementwise
    # work is (a third forward, two thirds backward)
    fused, plain = _dsv3(), _dsv3(fused=False)
    gpu = layer_time.gpu_of(fused)
    load = step_load(fused, LAY)
    saved = 10 * 2 * 4096 * 8 * load * 2048 / gpu.hbm
    a = layer_time.layer_time(fused, LAY, gpu, True)
    b = layer_time.layer_time(plain, LAY, gpu, True)
    assert b.fwd - a.fwd == pytest.approx(saved / 3)
    assert b.bwd - a.bwd == pytest.approx(2 * saved / 3)
    assert saved > 0
    # dense layers are untouched
    dense = layer_time.layer_time(fused, LAY, gpu, False)
    assert dense == layer_time.layer_time(plain, LAY, gpu, False)


@pytest.mark.parametrize(
    ("gpu", "extra"),
    [
        ("h100-sxm-80gb", {"fp8_recipe": "blockwise"}),  # Hopper: no fused kernel
        (GB300, {"fp8_recipe": "tensorwise"}),  # per-tensor scales: not block-scaled
        (GB300, {"precision": "bf16"}),  # nothing quantised
    ],
)
def test_no_kernel_no_saving(gpu: str, extra: dict[str, object]) -> None:
    fused, plain = _dsv3(gpu, **extra), _dsv3(gpu, fused=False, **extra)
    assert not fused.grouped_mlp_fused
    g = layer_time.gpu_of(fused)
    assert layer_time.layer_time(fused, LAY, g, True) == layer_time.layer_time(plain, LAY, g, True)


def test_nvfp4_and_mxfp8_on_blackwell_run_it() -> None:
    assert _dsv3().grouped_mlp_fused
    assert _dsv3("b200-sxm-180gb", precision="fp4").grouped_mlp_fused
    # its bf16 twin (first / last layers in bf16) does not
    assert not replace(_dsv3(), precision="bf16").grouped_mlp_fused


GELU_MOE = (
    '[model]\nname = "gelu-moe"\nnum_layers = 4\nhidden_size = 1024\nffn_hidden_size = 4096\n'
    "num_attention_heads = 8\nvocab_size = 32000\nnum_moe_experts = 8\nmoe_router_topk = 2\n"
    'activation = "gelu"\n'
)


def test_plan_checks(tmp_path: Path) -> None:
    gpu = f'[cluster]\ngpu = "{GB300}"\nnum_gpus = 8\n'
    base = "[training]\nseq_length = 4096\nglobal_batch_size = 64\nmoe_fused_grouped_mlp = true\n"
    # (a dense model is read as without it: tests/search/test_rules_accepted.py)
    for model, extra, got in (
        ('[model]\nname = "mixtral-8x7b"\n', 'framework = "torchtitan"\n', "Megatron-Core's"),
        (GELU_MOE, "", 'ungated expert MLP only with squared_relu (model activation "gelu")'),
    ):
        err = load_error(write(tmp_path, plan_text(model, gpu, base + extra, PARALLEL)))
        assert "training.moe_fused_grouped_mlp" in err and got in err, err


def test_layout_rules() -> None:
    fused, plain = _dsv3(), _dsv3(fused=False)
    rules = {v.rule for v in violations(fused, LAY.with_(etp=2, ep=16))}
    assert "fused_mlp_etp" in rules
    offload = Layout(tp=1, pp=4, dp=64, ep=32, etp=1, offload_modules=("moe_act",))
    assert "fused_mlp_offload" in {v.rule for v in violations(fused, offload)}
    whole = Layout(tp=1, pp=4, dp=64, ep=32, etp=1, offload_modules=("fused_group_mlp",))
    assert "fused_mlp_offload" not in {v.rule for v in violations(fused, whole)}
    assert "fused_mlp_offload" in {v.rule for v in violations(plain, whole)}
    assert not {v.rule for v in violations(fused, LAY)} & {"fused_mlp_etp", "fused_mlp_offload"}
