"""fp32 training end to end: a Megatron-LM line with neither --bf16 nor --fp16 read as precision
"fp32", the plan's checks, the launch targets, the catalog's TF32 peak and the `check` gate.

Oracles (NVIDIA/Megatron-LM d98e8a64 unless said otherwise):
- arguments.py:1194: params_dtype stays torch.float without --fp16 / --bf16 (fp32 training);
  accumulate_allreduce_grads_in_fp32 is decided under --bf16 only (:1205-1217), and the
  buffers take the parameters' dtype (param_and_grad_buffer.py:924): fp32 gradients whatever
  --grad-reduce-in-bf16 says; Megatron-FSDP's auto gradients too (`_resolve_group_grad_dtype`).
- language_module.py:130-140: --attention-backend flash / fused set NVTE_UNFUSED_ATTN=0, and
  Transformer Engine has neither kernel for fp32 inputs (TransformerEngine a0b36d0c
  attention/dot_product_attention/utils.py get_attention_backend, "Filter: Data type"); its
  unfused attention has no context parallelism (same function): no backend, Megatron fails.
- Megatron-Bridge 067f987d training/mixed_precision.py: no fp32 preset (bf16_* / fp16_* only).
- stas00/ml-engineering compute/accelerator/README.md @744d01e1: TF32 494.5 TFLOP/s on H100
  SXM; no TF32 figure for MI355X ("?"), whose fp32 GEMMs are then timed at its fp32 157.3.
- The check gate, by hand: Llama 3.1 8B at tp 2, dp 4, ZeRO 1, 8192 tokens fits in bf16; in fp32
  its weights alone double (2 -> 4 bytes over 4.0e9 parameters a GPU) and the unfused
  attention keeps 16 heads x 8192^2 scores x 4 bytes = 4.3 GB a layer: out of memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from jobs import TINY_LINE, read_job
from megatron_plans import flags, make_plan, round_trip
from paths import REPO

from planner.emit import bridge_precision
from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

FP32_LINE = TINY_LINE.replace(" --bf16", "")


def _read(extra: str = "") -> megatron_args.Reading:
    return megatron_args.read(FP32_LINE + extra, "h100-sxm-80gb", 8, "t")


def test_a_line_without_bf16_or_fp16_trains_in_fp32() -> None:
    reading = _read()
    assert reading.doc["training"]["precision"] == "fp32"
    assert not reading.not_modelled
    assert any("fp32 training" in n for n in reading.notes)
    job = parse_plan(reading.doc).job
    assert (job.precision, job.main_grad_dtype, job.flash_attention) == ("fp32", "fp32", True)
    # --fp16 and --bf16 set the parameters' dtype (arguments.py:1194-1205), and FP8 beside
    # neither keeps fp32 parameters around its quantised GEMMs
    assert parse_plan(_read(" --fp16").doc).job.precision == "fp16"
    assert read_job().precision == "bf16"  # --bf16
    fp8 = _read(" --fp8-format hybrid --fp8-recipe tensorwise")
    assert fp8.doc["training"]["precision"] == "fp8" and not fp8.not_modelled
    assert parse_plan(fp8.doc).job.params_dtype == "fp32"


@pytest.mark.parametrize(
    "extra",
    [
        " --grad-reduce-in-bf16",
        " --use-distributed-optimizer --use-precision-aware-optimizer --main-grads-dtype bf16",
        " --use-megatron-fsdp --ckpt-format fsdp_dtensor"
        " --data-parallel-sharding-strategy optim_grads_params",
    ],
)
def test_fp32_gradients_whatever_the_16_bit_flags_say(extra: str) -> None:
    assert "main_grad_dtype" not in _read(extra).doc["training"]  # the plan's default, fp32


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (" --attention-backend flash", "take bf16 / fp16 only"),
        (" --attention-backend fused", "take bf16 / fp16 only"),
        (" --context-parallel-size 2", "no context parallelism"),
    ],
)
def test_attention_that_cannot_run_in_fp32_is_refused(extra: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        _read(extra)
    megatron_args.read(TINY_LINE + extra, "h100-sxm-80gb", 8, "t")  # bf16: read


def test_the_launch_writes_neither_bf16_nor_fp16() -> None:
    plan = make_plan("llama3.1-8b", 8, {"tp": 2, "zero_stage": 1}, precision="fp32")
    got = flags(plan)
    assert "--bf16" not in got and "--fp16" not in got
    assert "--attention-backend" not in got  # TE's auto picks the unfused attention for fp32
    assert "--bf16" in flags(make_plan("llama3.1-8b", 8, {"tp": 2, "zero_stage": 1}))
    back = round_trip(plan)
    assert back.job.precision == "fp32" and back.job.main_grad_dtype == "fp32"
    with pytest.raises(InputError, match="no fp32 mixed-precision preset"):
        bridge_precision.preset(plan)


@pytest.mark.parametrize(
    ("training", "needle"),
    [
        ({"framework": "torchtitan"}, "modelled for Megatron-LM"),
        ({"main_grad_dtype": "bf16"}, "take the fp32 parameters' dtype"),
        ({"attention_kernel": "flash2"}, "FlashAttention takes bf16 / fp16 only"),
        ({"optimizer": "muon"}, "Muon"),
        ({"fp8_attention": True}, 'needs precision "fp8" or "fp4"'),
        ({"bf16_layers_at_start": 1}, "the whole model is fp32 already"),
    ],
)
def test_what_fp32_does_not_run_with_is_refused(training: dict[str, object], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        make_plan("llama3.1-8b", 8, {"tp": 2}, precision="fp32", **training)


def test_a_hybrid_model_in_fp32_is_not_modelled() -> None:
    with pytest.raises(InputError, match="Mamba / gated-delta-net layers: not modelled"):
        make_plan("nemotronh-56b", 8, {"tp": 8}, precision="fp32")


def test_the_fp32_gemm_peak_is_tf32_where_the_gpu_has_it() -> None:
    assert catalog.get_gpu("h100-sxm-80gb").peak_flops("fp32") == pytest.approx(494.5e12)
    assert catalog.get_gpu("a100-sxm-80gb").peak_flops("fp32") == pytest.approx(156e12)
    assert catalog.get_gpu("mi355x-288gb").peak_flops("fp32") == pytest.approx(157.3e12)


def test_check_says_out_of_memory_where_only_bf16_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO / "examples" / "llama3.1-8b-h100.toml").read_text()
    assert 'precision = "bf16"' in text
    assert run(["check", str(REPO / "examples" / "llama3.1-8b-h100.toml")], capsys)[0] == 0
    fp32 = tmp_path / "plan.toml"
    fp32.write_text(text.replace('precision = "bf16"', 'precision = "fp32"'))
    code, out, _ = run(["check", str(fp32)], capsys)
    assert code == 1 and "does not fit" in out
