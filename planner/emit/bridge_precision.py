"""The mixed-precision preset a Megatron-Bridge override names (`PRESETS`), and what the preset
sets that the plan may not: Bridge writes its gradient-reduce dtype over the DDP config and its
FP8 parameter gathering over the plan's (training/mixed_precision.py at NVIDIA-NeMo/
Megatron-Bridge 067f987d: `update_config_with_precision_overrides`, applied in
ConfigContainer.runtime_config_update). An override cannot set a field of a preset named by
string (`mixed_precision.fp8_param_gather=...` after `mixed_precision=<preset>` fails), so where
they differ the file says so, with the peak the run then has, and where to set them: on the
MixedPrecisionConfig a recipe script builds, as Bridge's performance recipes do (`notes`). Also the
`optimizer` table (`optimizer_table`), whose precision (`optimizer_precision`) no preset sets."""

from __future__ import annotations

from dataclasses import replace

from planner.emit.bridge_ddp import distributed_optimizer
from planner.emit.common import SCHEDULE
from planner.inputs.errors import InputError
from planner.inputs.plan import Job, Plan
from planner.inputs.units import gib
from planner.model import cost, memory

PRESETS = {
    ("bf16", "bf16", None): "bf16_mixed",
    ("bf16", "fp8", "delayed"): "bf16_with_fp8_delayed_scaling_mixed",
    ("bf16", "fp8", "tensorwise"): "bf16_with_fp8_current_scaling_mixed",
    ("bf16", "fp8", "blockwise"): "bf16_with_fp8_subchannel_scaling_mixed",
    ("bf16", "fp8", "mxfp8"): "bf16_with_mxfp8_mixed",
    ("bf16", "fp4", None): "bf16_with_nvfp4_mixed",
    ("fp16", "fp16", None): "fp16_mixed",
    ("fp16", "fp8", "delayed"): "fp16_with_fp8_delayed_scaling_mixed",
    ("fp16", "fp8", "tensorwise"): "fp16_with_fp8_current_scaling_mixed",
    ("fp16", "fp8", "blockwise"): "fp16_with_fp8_subchannel_scaling_mixed",
    ("fp16", "fp8", "mxfp8"): "fp16_with_mxfp8_mixed",
}
"""(parameters' dtype, precision, fp8 recipe) -> Megatron-Bridge mixed-precision preset
(mixed_precision.py; it has no fp16 preset with NVFP4)."""

FP8_PARAM_GATHER = {
    "bf16_with_fp8_delayed_scaling_mixed": True,  # mixed_precision.py:231
    "bf16_with_fp8_current_scaling_mixed": True,  # :302
    "bf16_with_mxfp8_mixed": True,  # :264
    "bf16_with_fp8_subchannel_scaling_mixed": False,  # :384
    "fp16_with_fp8_delayed_scaling_mixed": True,  # :250
    "fp16_with_fp8_current_scaling_mixed": True,  # :368
    "fp16_with_mxfp8_mixed": True,  # :279
    "fp16_with_fp8_subchannel_scaling_mixed": False,  # :400
}
"""Each FP8 preset's fp8_param_gather (weights kept only in FP8 and all-gathered so)."""

BF16_LAYERS = {
    "bf16_with_fp8_current_scaling_mixed": (1, 1),  # mixed_precision.py:299-301
    "fp16_with_fp8_current_scaling_mixed": (1, 1),  # :365-367
}
"""Each preset's decoder layers kept in bf16, first and last: the tensorwise presets'
first_last_layers_bf16=True with num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16 1 and 1;
the others leave MixedPrecisionConfig's first_last_layers_bf16=False (mixed_precision.py:53), no
layer in bf16. The preset writes them over the model's (`update_config_with_precision_overrides`,
mixed_precision.py:148-156), so a model field in the override cannot change them: a note does."""


TORCH_DTYPES = {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}
"""The torch dtype a recipe sets for a plan's dtype name."""


def grad_reduce_in_fp32(name: str) -> bool:
    """A preset's grad_reduce_in_fp32, written over ddp.grad_reduce_in_fp32: the bf16 presets
    keep MixedPrecisionConfig's default True (mixed_precision.py:47), the fp16 ones build on
    fp16_mixed, which sets False (:212)."""
    return not name.startswith("fp16")


def optimizer_table(plan: Plan) -> dict[str, object]:
    """The `optimizer` table (Megatron-Core's OptimizerConfig): the optimizer, its precision, and
    the schedule's learning rates."""
    job = plan.job
    muon = job.optimizer == "muon"
    schedule = {flag: value for flag, _, value in SCHEDULE}
    return {
        "use_distributed_optimizer": distributed_optimizer(plan),
        **optimizer_precision(plan),
        "overlap_param_gather_with_optimizer_step": False,  # Megatron's default
        # the gradient statistics the plan's step pays (cost.GRAD_STATS_S); the parameter norm is
        # the logger's (a note)
        **({"log_num_zeros_in_grad": True} if job.log_grad_stats else {}),
        "lr": float(schedule["--lr"]),
        "min_lr": float(schedule["--min-lr"]),
        **(_muon(plan) if muon else {}),
    }


def _muon(plan: Plan) -> dict[str, object]:
    """OptimizerConfig's Muon fields: "dist_muon" runs Megatron-Core's layer-wise distributed
    optimizer (Megatron-Bridge 067f987d training/optim.py:109: "dist" in the name), plain "muon"
    every rank's whole update. Bridge runs it on the legacy whole-parameter path only
    (`Job.muon_whole_params`): its DDP wrap passes no use_layer_wise_distributed_optimizer
    (models/model_provider.py:698-706 calls Megatron-LM's `_ddp_wrap`, whose default is False at
    the pinned 2a75ac12, training/models/dist_utils.py:270), so the layer-wise parameter layout
    is never computed (:326-336) and, with ddp.use_distributed_optimizer False as its Kimi K2
    recipe sets it (recipes/kimi/h100/kimi_k2.py:74, :200), every parameter sits in one unpadded
    buffer, dealt out whole (Megatron-LM d98e8a64 core/optimizer/__init__.py:827-835). A plan
    priced on the layer-wise layout (sharded over more than one data-parallel rank) is refused."""
    job, lay = plan.job, plan.require_layout()
    sharded = lay.zero_stage >= 1 and max(lay.dense_dp, lay.expert_dp) > 1
    if sharded and not job.muon_whole_params:
        raise InputError(
            f"{plan.path}: training.muon_whole_params: Megatron-Bridge's dist_muon runs the "
            "layer-wise optimizer's legacy whole-parameter path (its DDP wrap computes no "
            "layer-wise parameter layout), not the padded layout this plan is priced on; set "
            "muon_whole_params = true, or launch with --target megatron-args"
        )
    return {
        "optimizer": "dist_muon" if lay.zero_stage >= 1 else "muon",
        "muon_num_ns_steps": job.muon_ns_steps,
        "muon_tp_mode": job.muon_tp_mode,
        "muon_split_qkv": job.muon_split_qkv,
        "muon_nesterov": job.muon_nesterov,
        "muon_fp32_matmul_prec": job.muon_matmul_precision,
    }


def _dtype(half: bool, name: str = "torch.bfloat16") -> str:
    """A torch dtype as Bridge reads it back onto a field holding one (training/utils/
    omegaconf_utils.py `_apply_overrides`: activation_map.py str_to_dtype): `name` for a 16-bit
    field, else fp32."""
    return name if half else "torch.float32"


def _moments(plan: Plan) -> dict[str, str]:
    """exp_avg_dtype and exp_avg_sq_dtype (`Job.moment_dtypes`), as torch dtypes Bridge reads
    back. An FP8 moment is refused: TE FusedAdam takes it only as torch.uint8 (Megatron-LM
    d98e8a64 arguments.py:1078), a name Bridge's str_to_dtype lacks (067f987d
    activation_map.py:95-110 reads 'fp8' as torch.float8_e4m3fn)."""
    out = {}
    for field, dtype in zip(
        ("exp_avg_dtype", "exp_avg_sq_dtype"), plan.job.moment_dtypes, strict=True
    ):
        if dtype not in TORCH_DTYPES:
            raise InputError(
                f"{plan.path}: training.{field}: {dtype}: Megatron-Bridge cannot set it (its dtype "
                "names have no torch.uint8, Transformer Engine FusedAdam's FP8 state); launch "
                "with --target megatron-args"
            )
        out[field] = TORCH_DTYPES[dtype]
    return out


def optimizer_precision(plan: Plan) -> dict[str, object]:
    """OptimizerConfig's precision fields (Megatron-Core optimizer_config.py, 2a75ac12): the
    precision-aware optimizer and its four dtypes, always, since recipes set them (Bridge 067f987d:
    bf16 moments in recipes/deepseek/h100/deepseek_v3.py and perf_recipes/qwen/*/qwen3_moe.py,
    fp16 main parameters in recipes/nemotronh/h100/nemotron_3_super.py) and Megatron-Core asserts
    all four fp32 without the precision-aware optimizer; and the CPU-offloaded optimizer, which
    asks for it."""
    job = plan.job
    aware = job.precision_aware_optimizer
    out: dict[str, object] = {
        "use_precision_aware_optimizer": aware,
        "main_params_dtype": _dtype(aware and job.main_params_dtype == "fp16", "torch.float16"),
        "main_grads_dtype": _dtype(aware and job.main_grad_dtype == "bf16"),
        **_moments(plan),
    }
    if job.optimizer_offload_fraction > 0:
        out |= {
            "optimizer_cpu_offload": True,
            "optimizer_offload_fraction": job.optimizer_offload_fraction,
            "overlap_cpu_optimizer_d2h_h2d": job.optimizer_offload_overlap,
        }
    return out


def preset(plan: Plan) -> str:
    """The plan's preset (`PRESETS`); refused where there is none (fp32 among them), and where it
    gathers FP8
    parameters without the distributed optimizer (ZeRO 0): every FP8 preset but blockwise sets
    fp8_param_gather=True (`FP8_PARAM_GATHER`), synced to fp8_param (mixed_precision.py:81-87)
    and written over the model's and DDP's whatever the plan says, and Megatron-LM asserts the
    distributed optimizer or FSDP under it (arguments.py:1061-1063, 2a75ac12), as --target
    megatron-args refuses the plan (planner.emit.megatron_optimizer.needs_distributed_optimizer).
    An override cannot clear a field of a preset named by string (module docstring)."""
    job = plan.job
    field = "precision" if job.precision == job.params_dtype else "params_dtype"
    if job.params_dtype == "fp32":
        raise InputError(
            f'{plan.path}: training.{field}: "fp32": Megatron-Bridge has no fp32 '
            "mixed-precision preset (mixed_precision.py registers bf16_* and fp16_* ones only); "
            "launch it with --target megatron-args, which leaves out --bf16 and --fp16"
        )
    if job.params_dtype == "fp16" and job.precision == "fp4":
        raise InputError(
            f'{plan.path}: training.params_dtype: "fp16" with precision "fp4": Megatron-Bridge '
            "has no fp16 preset with NVFP4 (mixed_precision.py: bf16_with_nvfp4_mixed only); "
            "launch it with --target megatron-args"
        )
    key = (job.params_dtype, job.precision, job.fp8_recipe if job.precision == "fp8" else None)
    if key not in PRESETS:
        raise InputError(
            f"{plan.path}: training.fp8_recipe: Megatron-Bridge has no mixed-precision preset "
            f"for {job.fp8_recipe!r} (it has delayed, tensorwise, blockwise, mxfp8)"
        )
    name = PRESETS[key]
    if FP8_PARAM_GATHER.get(name) and plan.require_layout().zero_stage == 0:
        raise InputError(
            f"{plan.path}: parallel.zero_stage: Megatron-Bridge's {name} preset gathers FP8 "
            "parameters (fp8_param_gather=True, whatever training.fp8_param_gather says), which "
            "needs the distributed optimizer or FSDP (zero_stage >= 1, got 0; Megatron-LM "
            "asserts it, and --target megatron-args refuses it too); raise zero_stage, or launch "
            "a recipe script whose MixedPrecisionConfig sets fp8_param_gather=False"
        )
    return name


def notes(plan: Plan) -> list[str]:
    """Where the preset's settings differ from the plan's: each with the run's peak under the
    preset against the plan's, and how to get the plan's run."""
    job, lay = plan.job, plan.require_layout()
    name = preset(plan)
    out = []
    gather = FP8_PARAM_GATHER.get(name)
    planned = job.fp8_param_gather and lay.zero_stage >= 1
    if gather is not None and lay.zero_stage >= 1 and gather != planned:
        run = replace(job, fp8_param_gather=gather)
        keeps = "only in FP8" if gather else "in bf16 beside their FP8 copies"
        fix = f"fp8_param_gather={planned}"
        if "mxfp8" in name:  # its reuse of the gradient buffer (:265) too:
            # Megatron-Core's DDP config asserts fp8_param_gather under it
            # (distributed_data_parallel_config.py:259-260, 2a75ac12)
            fix += " and reuse_grad_buf_for_mxfp8_param_ag=False"
        out.append(
            f"{name} sets fp8_param_gather={gather} (weights {keeps}), the plan "
            f"{planned}: {_peaks(plan, run)}; set {fix} on the recipe's MixedPrecisionConfig"
        )
    preset_fp32 = grad_reduce_in_fp32(name)
    # Megatron-FSDP reads its own gradient dtype (ddp.megatron_fsdp_main_grads_dtype, a note of
    # bridge_notes), not the preset's grad_reduce_in_fp32
    if (job.main_grad_dtype == "fp32") != preset_fp32 and lay.zero_stage < 2:
        run = replace(job, main_grad_dtype="fp32" if preset_fp32 else "bf16")
        half = job.params_dtype  # 16-bit gradients take the parameters' dtype
        reduced, planned_in = ("fp32", half) if preset_fp32 else (half, "fp32")
        out.append(
            f"{name} reduces gradients in {reduced} (grad_reduce_in_fp32={preset_fp32}, written "
            f"over ddp), the plan in {planned_in}: {_peaks(plan, run)}; set "
            f"grad_reduce_in_fp32={not preset_fp32} on the recipe's MixedPrecisionConfig"
            + (" (Megatron-Bridge's performance recipes do)" if preset_fp32 else "")
        )
    if job.precision == "fp4" and not (job.fp4_param_gather and lay.zero_stage):
        out.append(
            "fp4_param_gather: set fp4_param_gather=False on the recipe's MixedPrecisionConfig "
            "(the plan keeps bf16 weights beside their NVFP4 copies; the preset gathers NVFP4 "
            "parameters)"
        )
    if (note := _bf16_layers(plan, name)) is not None:
        out.append(note)
    if job.fp8_attention:
        out.append(
            "fp8_attention: set fp8_dot_product_attention=True on the recipe's "
            "MixedPrecisionConfig (the plan runs the fused attention in FP8)"
        )
    return out


def _bf16_layers(plan: Plan, name: str) -> str | None:
    """Where the preset's bf16 first / last layers (`BF16_LAYERS`) differ from the plan's: the
    run's step and peak under the preset's, and the fields that give the plan's."""
    job = plan.job
    start, end = job.bf16_layers_at_start, job.bf16_layers_at_end
    given = BF16_LAYERS.get(name, (0, 0))
    if (start, end) == given:
        return None
    run = replace(job, bf16_layers_at_start=given[0], bf16_layers_at_end=given[1])
    if any(given):
        keeps = (
            f"keeps the first {given[0]} and last {given[1]} decoder layers in bf16 "
            "(first_last_layers_bf16=True)"
        )
    else:
        keeps = "keeps no layer in bf16 (first_last_layers_bf16=False)"
    planned, fix = "none", "set first_last_layers_bf16=False"
    if start or end:
        planned = f"the first {start} and last {end}"
        fix = (
            f"set first_last_layers_bf16=True, num_layers_at_start_in_bf16={start}, "
            f"num_layers_at_end_in_bf16={end}"
        )
    return (
        f"bf16 layers: {name} {keeps}, the plan {planned}: "
        f"{_steps(plan, run)}, {_peaks(plan, run)}; {fix} on the recipe's MixedPrecisionConfig"
    )


def _steps(plan: Plan, run_job: Job) -> str:
    """'the run's step X s, the plan's Y s' (the run: the plan's layout under `run_job`)."""
    lay = plan.require_layout()
    planned = cost.estimate(plan.job, lay).step_time_s
    under = cost.estimate(run_job, lay).step_time_s
    return f"the run's step {under:.3f} s, the plan's {planned:.3f} s"


def _peaks(plan: Plan, run_job: Job) -> str:
    """'the run's peak X GiB, the plan's Y GiB' (the run: the plan's layout under `run_job`)."""
    lay = plan.require_layout()
    planned = memory.estimate(plan.job, lay).peak
    under = memory.estimate(run_job, lay).peak
    return f"the run's peak {gib(under):.1f} GiB, the plan's {gib(planned):.1f} GiB"
