"""What fp16 and fp32 activations cannot run (planner/search/rules/precision.py): Transformer
Engine's TP communication overlap and the flex token dispatcher (DeepEP, HybridEP).

Oracles, each a source line at its commit:
- Megatron-LM d98e8a64 training/initialize.py:240-246 calls `initialize_ub` with no dtype;
  TransformerEngine d0067d0d pytorch/module/base.py:156 defaults it to torch.bfloat16, :472-476
  allocates the non-FP8 buffers in it, and comm_gemm_overlap.cpp:331-335 refuses to copy an input
  of another element size ("dtypes are not compatible"): fp32 (4 bytes) into bf16 (2); an fp16
  input passes and comes back typed bf16 (CommOverlap::get_buffer);
- Megatron-LM d98e8a64 moe/token_dispatcher.py:1379 and fused_a2a.py:176 (the same folder)
  hand the experts' output to DeepEP's combine as it is; deepseek-ai/DeepEP dd758caf
  csrc/kernels/legacy/launch.cuh:104-111 launches bf16 only ("Unsupported type"),
  internode.cu:2373 asserts CUDA_R_16BF (so fp16 too); DeepEP hybrid-ep 94a9f8f
  csrc/hybrid_ep/utils.cuh:19 carries UINT16 or UINT8 tokens only and hybrid_ep.cu:223 asserts
  2-byte elements in its combine."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import FlexBackend, Layout
from planner.search import rules
from planner.search.rules.precision import bf16_values, flex_bf16, tp_overlap_bf16

TP_OVERLAP = Layout(tp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True)


def _flex(backend: FlexBackend) -> Layout:
    return Layout(
        tp=1,
        ep=8,
        dp=8,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend=backend,
    )


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fp16_and_fp32_activations_refuse_tp_overlap(precision: str) -> None:
    other = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, precision=precision)
    bf16 = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    assert not bf16_values(other) and bf16_values(bf16)
    v = tp_overlap_bf16(other, TP_OVERLAP)
    assert v is not None and v.field == "parallel.tp_comm_overlap"
    assert "tp_comm_overlap = false" in v.message and precision in v.message
    assert tp_overlap_bf16(other, TP_OVERLAP.with_(tp_comm_overlap=False)) is None
    assert tp_overlap_bf16(bf16, TP_OVERLAP) is None
    # FP8 GEMMs on bf16 activations: the userbuffers are FP8 / bf16, as the inputs; on fp32
    # parameters the activations are fp32 (planner.model.fp32) and refused as above
    fp8 = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, precision="fp8")
    assert tp_overlap_bf16(fp8, TP_OVERLAP) is None
    fp8_fp32 = replace(fp8, quantised_params_dtype="fp32")
    assert tp_overlap_bf16(fp8_fp32, TP_OVERLAP) is not None


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fp16_and_fp32_activations_refuse_the_flex_dispatcher(
    backend: FlexBackend, precision: str
) -> None:
    other = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 64, precision=precision)
    bf16 = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 64)
    v = flex_bf16(other, _flex(backend))
    assert v is not None and v.field == "parallel.moe_token_dispatcher_type"
    assert backend in v.message and "alltoall" in v.message
    assert flex_bf16(bf16, _flex(backend)) is None
    assert flex_bf16(other, _flex(backend).with_(moe_token_dispatcher_type="alltoall")) is None


def test_the_rules_are_registered() -> None:
    assert tp_overlap_bf16 in rules.RULES and flex_bf16 in rules.RULES
