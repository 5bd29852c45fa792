"""The `[training]` fields of the optimizer (`planner.inputs.plan_sections.TrainingSection`
takes them from `OptimizerFields`): Adam's state and master dtypes, the precision-aware and the
CPU-offloaded optimizer, the distributed optimizer's instances, Muon's knobs, and how the weight
gradients reach the main gradients (gradient-accumulation fusion)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs.fields import Flag, NonNegativeFloat, PositiveInt
from planner.inputs.plan_counts import MAX_NS_STEPS, Degree
from planner.inputs.plan_types import MomentDtype, MuonPrecision, MuonTpMode


class OptimizerFields(BaseModel):
    """The optimizer's `[training]` fields (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    optimizer_state_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="Adam moments: fp32, or bf16 (Megatron --use-precision-aware-optimizer "
        "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)",
    )
    exp_avg_dtype: MomentDtype | None = Field(
        default=None,
        description="Megatron --exp-avg-dtype (the precision-aware optimizer): Adam's first "
        "moment in fp32, fp16, bf16 or fp8 (1 byte), where it differs from "
        "optimizer_state_dtype; unset: optimizer_state_dtype",
    )
    exp_avg_sq_dtype: MomentDtype | None = Field(
        default=None,
        description="Megatron --exp-avg-sq-dtype: Adam's second moment alike (unset: "
        "optimizer_state_dtype)",
    )
    optimizer_offload_fraction: NonNegativeFloat = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Megatron --optimizer-cpu-offload (--optimizer-offload-fraction, default 1): "
        "this share of the updated parameters keeps its fp32 master and Adam moments in host "
        "memory and is updated by the CPU (0 = off; planner.model.optimizer_offload)",
    )
    optimizer_offload_overlap: Flag = Field(
        default=True,
        description="with optimizer_offload_fraction: Megatron --overlap-cpu-optimizer-d2h-h2d, "
        "the gradient copies out, the CPU update and the copies back pipelined over parameters",
    )
    main_params_dtype: Literal["fp32", "fp16"] = Field(
        default="fp32",
        description="Megatron --main-params-dtype (with the precision-aware optimizer, which fp16 "
        "implies): the master weights Transformer Engine's FusedAdam keeps, 2 bytes in fp16 and "
        "unscaled to fp32 at each step (planner.model.adam_step; Megatron-FSDP's zero_stage 2 "
        "and 3 keep their own fp32 ones)",
    )
    use_precision_aware_optimizer: Flag = Field(
        default=False,
        description="Megatron --use-precision-aware-optimizer where nothing else asks for it "
        "(fp32 moments on the GPU): the fp32 master of bf16 weights is kept as its 16-bit "
        "remainder and 16-bit gradients are read in place (no fp32 copy at the step)",
    )
    fsdp_grad_comm_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        default=None,
        description="Megatron --megatron-fsdp-grad-comm-dtype (zero_stage 2 / 3): Megatron-FSDP "
        "allocates its unsharded gradient buckets, and reduce-scatters them, in this dtype; unset: "
        "main_grad_dtype",
    )
    optimizer_instances: Degree = Field(
        default=1,
        description="Megatron --num-distributed-optimizer-instances: the optimizer states are "
        "sharded over the data-parallel group / this many instances",
    )
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] = Field(
        default="no_shard",
        description="Megatron --outer-dp-sharding-strategy, with Megatron-FSDP (zero_stage 3) over "
        "optimizer_instances > 1: no_shard replicates each instance's states (HSDP); optim shards "
        "the optimizer states over the instances too (params and gradients stay per instance)",
    )
    optimizer: Literal["adam", "muon"] = Field(
        default="adam",
        description="Megatron --optimizer: adam, or muon (Muon's fp32 master and one momentum "
        "per decoder-layer matrix; the embeddings, output layer and norms stay on Adam)",
    )
    muon_whole_params: Flag = Field(
        default=False,
        description="muon with the distributed optimizer and --no-use-layer-wise-param-layout: "
        "Megatron's layer-wise optimizer hands out whole parameters, so one rank keeps the "
        "largest (the word embedding) whole",
    )
    muon_ns_steps: PositiveInt = Field(
        default=5,
        le=MAX_NS_STEPS,
        description="Megatron --muon-num-ns-steps: Newton-Schulz iterations per matrix and step",
    )
    muon_tp_mode: MuonTpMode = Field(
        default="duplicated",
        description="Megatron --muon-tp-mode: duplicated (each TP rank gathers and "
        "orthogonalises the whole matrix), blockwise (each shard on its own) or distributed",
    )
    muon_split_qkv: Flag = Field(
        default=True,
        description="Megatron --muon-split-qkv (false: --muon-no-split-qkv): Q, K and V "
        "orthogonalised apart",
    )
    muon_matmul_precision: MuonPrecision = Field(
        default="medium",
        description="Megatron --muon-fp32-matmul-prec / Megatron-Bridge "
        "optimizer.muon_fp32_matmul_prec: medium (bf16 GEMMs), high (TF32) or highest (fp32)",
    )
    gradient_accumulation_fusion: Flag = Field(
        default=True,
        description="Megatron: Transformer Engine's linear layers accumulate each weight "
        "gradient into the main gradient inside the wgrad GEMM (false: Megatron "
        "--no-gradient-accumulation-fusion, Megatron-Bridge model.gradient_accumulation_fusion "
        "false: each weight gradient is written to its own tensor and DDP's hook adds it to the "
        "main gradient, one memory-bound pass per micro-batch, planner.model.wgrad_accumulation)",
    )
    muon_nesterov: Flag = Field(
        default=False,
        description="Megatron --muon-nesterov (OptimizerConfig.muon_nesterov): Nesterov momentum, "
        "one more fp32 copy of each matrix's momentum shard while it is orthogonalised",
    )
