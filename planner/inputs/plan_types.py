"""The literal types of the plan file's choices (`planner.inputs.plan_sections`' fields, and the
`Job` and model fields that carry them): each a Literal with the values the training code takes,
documented where it is defined."""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["bf16", "fp16", "fp8", "fp4", "fp32"]
"""The decoder's linear layers: bf16; fp16 (Megatron --fp16: fp16 parameters, activations and
GEMMs with dynamic loss scaling; the same bytes and tensor-core rate as bf16, but no fp32 master
remainder, `planner.model.adam_step`); FP8 (by `Fp8Recipe`); fp4 = NVFP4 (Transformer Engine's
NVFP4BlockScaling: E2M1 values with an E4M3 scale per 16, random Hadamard transforms on the weight
gradient's operands, 16 x 16 weight blocks; Megatron --fp4-format e2m1 --fp4-recipe nvfp4); fp32 =
Megatron-LM with neither --bf16 nor --fp16 (`planner.model.fp32`: fp32 parameters, gradients and
activations, TF32 GEMMs, unfused attention). Under FP8 / NVFP4 the parameters and the unquantised
values are in `ParamsDtype`."""
QUANTISED: tuple[Precision, ...] = ("fp8", "fp4")
"""The precisions whose linear layers Transformer Engine quantises (FP8, NVFP4): not bf16, fp16 or
fp32."""
ParamsDtype = Literal["bf16", "fp16", "fp32"]
"""The parameters' dtype (Megatron's params_dtype: --bf16, --fp16 or neither), which is also the
dtype of the activations, the collectives and every tensor a quantised recipe leaves unquantised:
the precision itself for bf16, fp16 and fp32, the plan's `training.params_dtype` under FP8 / NVFP4
(bf16 unless given; fp32: `--fp8-format` without --bf16 / --fp16, `planner.model.fp32`)."""
Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8", "rowwise", "rowwise_with_gw_hp"]
"""Megatron --fp8-recipe (delayed, tensorwise, blockwise, mxfp8) and torchao's float8 recipes under
torchtitan (tensorwise, rowwise, rowwise_with_gw_hp)."""
CrossEntropy = Literal["fused", "pytorch", "gathered"]
MomentDtype = Literal["fp32", "fp16", "bf16", "fp8"]
"""One Adam moment's dtype under Megatron's precision-aware optimizer (--exp-avg-dtype,
--exp-avg-sq-dtype: arguments.py:3675-3684 d98e8a64; fp8 is TE FusedAdam's torch.uint8 state,
arguments.py:1078)."""
MOMENT_BYTES: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}
"""Bytes per element of each moment dtype. TE FusedAdam (d0067d0d optimizers/fused_adam.py
`_initialize_state`: torch.empty_like(param, dtype)) keeps an fp16 or FP8 state with one fp32
scale per parameter tensor (`_scales`, a [1] tensor each): not counted."""
MuonTpMode = Literal["duplicated", "blockwise", "distributed"]
"""Megatron --muon-tp-mode: how Muon orthogonalises a tensor-parallel weight (whole on every TP
rank, each shard on its own, or the whole with its Gram matrix all-reduced)."""
MuonPrecision = Literal["medium", "high", "highest"]
"""Muon's fp32 matmul precision (torch.set_float32_matmul_precision): medium runs the
Newton-Schulz GEMMs in bf16, high in TF32, highest in fp32."""
SelectivePolicy = Literal["core_attn", "per_op"]
AttentionKernel = Literal["fused", "flash2"]
"""The flash-attention kernel the training code runs (`planner.model.attention`): "fused",
Transformer Engine's cuDNN fused attention or FlashAttention-3 on Hopper, what Megatron-LM runs
and torchtitan since pytorch/torchtitan 6a3a9da9 (Oct 2025: cuDNN first among its SDPA
backends); "flash2", FlashAttention-2, PyTorch SDPA's flash backend, which a plain
F.scaled_dot_product_attention picks on Hopper under PyTorch >= 2.5 (cuDNN made opt-in,
pytorch/pytorch#138522): torchtitan before that commit."""
DsaKernelBackend = Literal["none", "tilelang", "cudnn"]
"""Megatron --dsa-kernel-backend (d98e8a64): how DeepSeek sparse attention runs
(`planner.model.dsa`): "none" (Megatron's default) the unfused PyTorch path, dense over fp32
s x s scores per head; "tilelang" the TileLang sparse kernels (a plan's default); "cudnn"
FlashMLA's forward and cuDNN's sparse backward."""
CudaGraphModule = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
"""Megatron --cuda-graph-modules (CudaGraphModule, d98e8a64): the per-layer regions captured."""
CUDA_GRAPH_MODULES: tuple[str, ...] = get_args(CudaGraphModule)
CudaGraphImpl = Literal["local", "transformer_engine", "full_iteration"]
"""Megatron --cuda-graph-impl (d98e8a64, but "none"): per-layer graphs of Megatron-Core's own
(local) or Transformer Engine's, or the whole training iteration as one graph."""


def params_dtype_of(precision: Precision, quantised: ParamsDtype | None) -> ParamsDtype:
    """The parameters' dtype of a run in `precision`: the precision itself, or under FP8 / NVFP4
    the dtype given for them (`quantised`; bf16 where none is)."""
    match precision:
        case "fp8" | "fp4":
            return quantised or "bf16"
        case unquantised:
            return unquantised


UnfusedAttention = Literal["te", "local", "local_fp32"]
"""Which attention runs without flash attention (`planner.model.scores`): Transformer Engine's
UnfusedDotProductAttention (te), or Megatron-Core's own DotProductAttention (--transformer-impl
local, --attention-backend local), whose torch softmax runs in the scores' 16 bits (local) or
in fp32 (local_fp32: --attention-softmax-in-fp32, or --apply-query-key-layer-scaling, which sets
it)."""
