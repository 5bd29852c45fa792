"""Rules on what runs only with bf16 activations (`Job.params_dtype`: the dtype of the values a
collective moves, 4 bytes with fp32 parameters, `planner.model.fp32`): the two communication paths
whose buffers or kernels carry bf16 values only.

- TP communication overlap (--tp-comm-overlap): Megatron-LM d98e8a64 initialize.py:240-246
  (`_initialize_tp_communicators`) calls Transformer Engine's `initialize_ub` with a shape, the
  TP size, quantisation modes and configs, and no dtype; its `dtype` defaults to torch.bfloat16
  (TransformerEngine d0067d0d transformer_engine/pytorch/module/base.py:156), and every buffer not
  FP8 is allocated in it (:472-476). The linear layers' all-gather overlap copies their input into
  that buffer (`fill_userbuffers_buffer_for_all_gather`, base.py:652, reached from
  layernorm_linear.py:302 and linear.py:414), and the copy checks the element sizes:
  "Tried to copy data into a Userbuffers buffer but dtypes are not compatible"
  (pytorch/csrc/extensions/comm_gemm_overlap.cpp:331-335 and :442-446): a 4-byte fp32 input
  against the 2-byte bf16 buffer raises, and a 2-byte fp16 one passes and is handed back typed
  bf16 (`CommOverlap::get_buffer`), so the GEMM reads fp16 bits as bf16: a wrong result, refused
  too. Megatron turns the all-gather overlap on with the flag
  (model_parallel_config.py:281 tp_comm_overlap_ag True; extensions/transformer_engine.py:1192).
- TP communication overlap under NVFP4 (precision fp4): the all-gather overlap hands the linear
  layer's input quantizer to `fill_userbuffers_buffer_for_all_gather` (TransformerEngine
  d0067d0d pytorch/module/linear.py:413-419, layernorm_linear.py:302), which fills the buffer
  for no quantizer, FP8 (delayed or current scaling) and MXFP8 only and otherwise raises
  "Unsupported quantizer for Userbuffers" (module/base.py:644-754); an NVFP4Quantizer is none
  of them. Only TE's cuBLASMp backend returns before that (base.py:630-633), and Megatron's
  `initialize_ub` calls pass no `with_cublasmp` (d98e8a64 initialize.py:240-270; base.py:159
  defaults it False).
- The flex token dispatcher: its DeepEP backend hands the experts' output to DeepEP's
  `Buffer.combine` as it is (Megatron-LM d98e8a64 moe/token_dispatcher.py:1379,
  fused_a2a.py:176 beside it, and its dispatch's backward, :152), whose normal kernels take bf16
  only: the intranode combine launches through SWITCH_TYPES, CUDA_R_16BF alone, else
  "Unsupported type" (deepseek-ai/DeepEP dd758caf csrc/kernels/legacy/launch.cuh:104-111,
  intranode.cu:1110), the internode one asserts `type == CUDA_R_16BF` (internode.cu:2373),
  which refuses fp16 as well; its
  documentation says so too (deep_ep/buffers/legacy.py:423, "x: `[num_tokens, hidden]` with
  `torch.bfloat16`"; the same code at 92fe2de, before EPv2: csrc/kernels/launch.cuh:105-112,
  internode.cu:2368). Its dispatch copies any dtype (it moves hidden x element-size bytes,
  csrc/legacy/buffer.hpp:458), so the forward's dispatch runs and its combine does not. The
  HybridEP backend carries 16-bit or FP8 tokens only (DeepEP hybrid-ep 94a9f8f
  csrc/hybrid_ep/utils.cuh:19, APP_TOKEN_DATA_TYPE { UINT16, UINT8 }; Megatron's buffer is built
  with use_fp8 False, fused_a2a.py:340-346, so UINT16) and asserts 2-byte elements in its
  combine (csrc/hybrid_ep/hybrid_ep.cu:223, 348); its combine sums the experts' outputs, and
  whether it reads UINT16 as bf16 or fp16 the source does not say plainly, so fp16 is refused
  there too (the safe side: the flex dispatcher is Megatron's bf16 path).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def bf16_values(job: Job) -> bool:
    """Whether the job's activations (what TP overlap's userbuffers and the flex dispatcher's
    combine carry) are bf16: its parameters are (`Job.params_dtype`; not fp16, not fp32). What
    the search asks before it offers --tp-comm-overlap or the flex dispatcher."""
    return job.params_dtype == "bf16"


def tp_overlap_bf16(job: Job, lay: Layout) -> Violation | None:
    """TP communication overlap with fp16 or fp32 activations (module docstring: Transformer
    Engine's userbuffers are bf16; a 4-byte input is refused, a 2-byte fp16 one read as bf16)."""
    if not lay.tp_comm_overlap or bf16_values(job):
        return None
    fails = (
        'copying an fp32 input into them fails ("dtypes are not compatible")'
        if job.params_dtype == "fp32"
        else "and an fp16 input is handed back to the GEMM typed bf16 (wrong values)"
    )
    return Violation(
        "tp_overlap_bf16",
        "parallel.tp_comm_overlap",
        f"tp_comm_overlap with {job.params_dtype} activations (precision {job.precision}): "
        f"Megatron's initialize_ub passes no dtype, so Transformer Engine's userbuffers are bf16, "
        f"{fails}; set tp_comm_overlap = false",
    )


def tp_overlap_runs(job: Job) -> bool:
    """Whether Megatron's --tp-comm-overlap runs with the job's activations and GEMM precision:
    bf16 activations (`bf16_values`) and not NVFP4 (module docstring). What the search should
    ask before it offers the overlap."""
    return bf16_values(job) and job.precision != "fp4"


def tp_overlap_nvfp4(job: Job, lay: Layout) -> Violation | None:
    """TP communication overlap under NVFP4 (module docstring: Transformer Engine's userbuffers
    all-gather takes no NVFP4 quantizer)."""
    if not lay.tp_comm_overlap or job.precision != "fp4" or job.framework == "torchtitan":
        return None
    return Violation(
        "tp_overlap_nvfp4",
        "parallel.tp_comm_overlap",
        "tp_comm_overlap with precision fp4: Transformer Engine's userbuffers all-gather fills "
        "its buffer for FP8 and MXFP8 inputs only and raises 'Unsupported quantizer for "
        "Userbuffers' on NVFP4's (TE d0067d0d pytorch/module/base.py:754); set "
        "tp_comm_overlap = false",
    )


def flex_bf16(job: Job, lay: Layout) -> Violation | None:
    """The flex dispatcher with fp16 or fp32 activations (module docstring: DeepEP's combine takes
    bf16 only, HybridEP 16-bit or FP8 tokens only)."""
    if not job.arch.is_moe or lay.moe_token_dispatcher_type != "flex" or bf16_values(job):
        return None
    backend = lay.moe_flex_dispatcher_backend
    why = (
        'DeepEP\'s combine runs bf16 tokens only (its kernels: "Unsupported type")'
        if backend == "deepep"
        else "HybridEP carries 16-bit or FP8 tokens only, and planner counts it bf16 only"
    )
    return Violation(
        "flex_bf16",
        "parallel.moe_token_dispatcher_type",
        f"the flex dispatcher ({backend}) with {job.params_dtype} activations (precision "
        f"{job.precision}): {why}; use moe_token_dispatcher_type alltoall",
    )


RULES = (tp_overlap_bf16, tp_overlap_nvfp4, flex_bf16)
"""This module's rules, for `planner.search.rules.RULES`."""
