"""`[training] frozen_model`: the model's own parameters are frozen and what trains lies outside it
(Megatron-LM's MIMO LLaVA, examples/mimo: model_providers/llava_vlm.py freezes the language model
and the vision encoder; only the projector trains).

Oracles: hand arithmetic from the shapes in the comments (no gradient buffer or optimizer state
for a frozen parameter; Transformer Engine's linear layers keep their input only for the weight
gradient, linear.py @d0067d0d `backward_needs_input = is_grad_enabled and weight.requires_grad`;
no weight-gradient GEMM), and Megatron-LM's functional test
mimo/mimo_vlm_pretrain_convergence_tp1_pp1_cp2_dp8 (its golden values: 13.57 GiB allocated after
each step on 8 H100, the bf16 weights of a frozen 7B language model with nothing else of its)."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job
from paths import REPO
from plan_text import plan_text, write

from planner.emit import launch
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan, parse_plan
from planner.model import activations, cost, gemm_shapes, memory
from planner.model.gemm import gemm_time
from planner.model.layer_time import gpu_of, layer_time
from planner.model.shard import Shard
from planner.search.rules import check_plan

sys.path.insert(0, str(REPO))

from benchmarks import functional_tests as ft

GIB = 2**30
LINE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 2 --global-batch-size 16 --bf16 "
    "--tokenizer-type NullTokenizer --vocab-size 32000 --dataset-provider llava_vlm "
)


def _read(extra: str) -> dict[str, object]:
    doc = megatron_args.read(LINE + extra, "h100-sxm-80gb", 8).doc
    training = doc["training"]
    assert isinstance(training, dict)
    return training


def test_mimo_llava_lines_read_frozen_at_their_total_sequence() -> None:
    got = _read("--model-provider llava_vlm --total-seq-length 2048")
    assert got["frozen_model"] is True and got["seq_length"] == 2048
    # examples/mimo/train.py's default --total-seq-length is 512
    got = _read("--model-provider video_llava_vlm")
    assert got["frozen_model"] is True and got["seq_length"] == 512
    # bad input names the flag and the value
    for bad in ("0", "1e9"):
        with pytest.raises(InputError, match=f"--total-seq-length: .*'{bad}'"):
            _read(f"--model-provider llava_vlm --total-seq-length {bad}")
    # the mock provider trains every parameter, on --seq-length
    got = _read("--model-provider mock --total-seq-length 2048")
    assert "frozen_model" not in got and got["seq_length"] == 4096


def test_linear_layers_keep_no_input_when_frozen() -> None:
    # Llama 2 7B layer, T = 4096 tokens, bf16, tp 1, flash attention: the linear layers' inputs
    # are the QKV input (the norm output, 2Th), fc1's input (2Th) and fc2's input (2TF); the
    # output projection's input is flash attention's saved output (kept for the kernel's own
    # backward). Frozen, the layer keeps 2T (2h + F) bytes less: h 4096, F 11008
    arch = job("llama2-7b", "h100-sxm-80gb", 8, 4096, 8).arch
    t = 4096
    live = Shard(tokens=t, seq_per_cp_rank=t)
    frozen = Shard(tokens=t, seq_per_cp_rank=t, frozen=True)
    less = activations.layer_bytes(arch, False, live) - activations.layer_bytes(arch, False, frozen)
    assert less == 2 * t * (2 * 4096 + 11008)


def test_no_gradients_optimizer_wgrad_or_gradient_sync_when_frozen() -> None:
    live = job("llama2-7b", "h100-sxm-80gb", 8, 4096, 64)
    frozen = replace(live, frozen_model=True)
    lay = Layout(dp=8, zero_stage=1)
    a, b = memory.estimate(live, lay).stages[0], memory.estimate(frozen, lay).stages[0]
    assert a.grads > 0 and a.optimizer > 0
    assert (b.grads, b.optimizer) == (0.0, 0.0)
    assert b.weights == a.weights  # the bf16 weights stay
    # the layer's backward loses its weight-gradient GEMMs: one forward's worth of the linear
    # GEMMs (gemm_shapes.linear_gemms at T = 4096, tp 1)
    gpu = gpu_of(live)
    gemms = sum(
        gemm_time(m, k, n, gpu.peak_linear, gpu.ridge, gpu.e_linear, c)
        for m, k, n, c in gemm_shapes.linear_gemms(live.arch, 4096.0, 1, 1, 1, False, 1.0)
    )
    x, y = layer_time(live, lay, gpu, False), layer_time(frozen, lay, gpu, False)
    assert x.fwd == y.fwd
    assert x.bwd - y.bwd == pytest.approx(gemms, rel=1e-9)
    # nothing to reduce over the 8 replicas, nothing to step
    p, q = cost.estimate(live, lay).breakdown, cost.estimate(frozen, lay).breakdown
    assert p.dp_comm_exposed + p.dp_comm_hidden > 0 and p.optimizer > 0
    assert (q.dp_comm_exposed, q.dp_comm_hidden, q.optimizer) == (0.0, 0.0, 0.0)


def test_plan_round_trip_keeps_the_job(tmp_path: Path) -> None:
    training = (
        "[training]\nseq_length = 2048\nglobal_batch_size = 64\nfrozen_model = true\n"
        "attention_dropout = false\nlog_grad_stats = true\noptimizer_instances = 2\n"
    )
    plan = check_plan(load_plan(write(tmp_path, plan_text(training=training))))
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "llama3.1-8b"}, ["t"])
    again = check_plan(load_plan(write(tmp_path, text, "again.toml")))
    assert again.job == plan.job
    # no launch target can freeze the model: refused, naming the field, not a full training
    with pytest.raises(InputError, match=r"training\.frozen_model"):
        launch.render(plan, "megatron-args")


def test_the_mimo_functional_test_fits_with_its_measured_persistent_memory() -> None:
    # mimo_vlm_pretrain_convergence_tp1_pp1_cp2_dp8 ran on 8 H100 (golden values): planner must
    # say it fits; after each step 13.57 GiB stay allocated (mem-allocated-bytes), the frozen
    # 7B model's bf16 weights (6.74B x 2 bytes = 12.25 GiB) with the vision encoder and the
    # projector, which planner does not count: within 10% under. Trained whole it would hold
    # fp32 gradients and Adam states too (18 bytes a parameter, > 100 GiB)
    name = "mimo/mimo_vlm_pretrain_convergence_tp1_pp1_cp2_dp8"
    case = next(c for c in ft.load_cases() if c["name"] == name)
    words = ft.command_line(case)
    doc = megatron_args.read(shlex.join(words), "h100-sxm-80gb", 8, name, ft.vocab_given(words))
    plan = check_plan(parse_plan(doc.doc, Path(name)))
    report = memory.estimate(plan.job, plan.require_layout())
    assert report.fits
    stage = report.stages[0]
    golden = json.loads((ft.DATA / "golden_values.json").read_text())["files"]
    rec = next(
        r for r in golden if r["case"] == name and r["file"] == "golden_values_dev_dgx_h100.json"
    )
    measured = max(rec["metrics"]["mem-allocated-bytes"]["values"]) / GIB
    assert measured == pytest.approx(13.57, abs=0.01)
    persistent = (stage.weights + stage.grads + stage.optimizer) / GIB
    assert -0.10 <= persistent / measured - 1 <= 0.0
