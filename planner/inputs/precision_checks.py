"""The plan's precision settings checked as Megatron-Core checks them (exit 2 with the file, the
field and the value): bf16 first / last layers, FP8 attention, the MXFP8 output layer, and what
fp32 training runs with (`planner.model.fp32`)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.plan_sections import TrainingSection
from planner.inputs.plan_types import QUANTISED, ParamsDtype, params_dtype_of


def check_precision(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """Raise InputError where a precision setting cannot apply to the rest of `[training]`."""
    _params_dtype(training, where)
    _bf16_layers(training, arch, where)
    _fp8_attention(training, where)
    _local_attention(training, where)
    _fp8_output_proj(training, where)
    _dsa_bf16(training, arch, where)
    _fp32(training, arch, where)


def quantised_params_dtype(training: TrainingSection) -> ParamsDtype:
    """`Job.quantised_params_dtype`: the plan's params_dtype under FP8 / NVFP4 (bf16 if left
    out), bf16 under the other precisions (whose parameters are in the precision itself)."""
    quantised = training.precision in QUANTISED
    return (training.params_dtype or "bf16") if quantised else "bf16"


def params_dtype(training: TrainingSection) -> ParamsDtype:
    """The parameters' dtype the plan trains with (`Job.params_dtype`)."""
    return params_dtype_of(training.precision, training.params_dtype)


def titan_params(params: ParamsDtype) -> str | None:
    """Why torchtitan does not train with `params` parameters as planner models it (None for
    bf16): b5bcd76c config/configs.py:94's mixed_precision_param takes "bfloat16" or "float32",
    no float16, and planner models fp32 training (`planner.model.fp32`) for Megatron-LM only.
    A plan file's check (`_params_dtype`) and suggest --framework's (`plan.reframe`) both ask."""
    if params == "fp16":
        return (
            'torchtitan trains with bf16 parameters (mixed_precision_param "bfloat16" or '
            '"float32", no float16); use "bf16"'
        )
    if params == "fp32":
        return (
            "fp32 training is modelled for Megatron-LM (no --bf16 / --fp16); torchtitan trains "
            'with bf16 parameters here (mixed_precision_param = "bfloat16"): use "bf16"'
        )
    return None


def _params_dtype(training: TrainingSection, where: str) -> None:
    """params_dtype names the parameters' dtype under FP8 / NVFP4; under bf16, fp16 and fp32 the
    precision is the parameters' dtype, so another one contradicts it; and torchtitan trains
    with bf16 parameters only (`titan_params`)."""
    given = training.params_dtype
    if given is not None and training.precision not in QUANTISED and given != training.precision:
        raise InputError(
            f'{where}: training.params_dtype: "{given}" with precision "{training.precision}": '
            "the parameters of a bf16, fp16 or fp32 run are in that dtype; params_dtype is for "
            'precision "fp8" or "fp4" (or leave it out)'
        )
    params = params_dtype(training)
    why = titan_params(params) if training.framework != "megatron" else None
    if why is not None:
        field = "params_dtype" if training.precision in QUANTISED else "precision"
        raise InputError(f'{where}: training.{field}: "{params}": {why}')


def _dsa_bf16(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """DeepSeek sparse attention trains with bf16 activations only: its indexer rotates q and k
    (dsa_indexer_rotate_activation, on by default: Megatron-LM d98e8a64 transformer_config.py:348,
    dsa.py:1311-1313), and rotate_activation asserts bf16 input (dsa.py:264-266). An fp16 or fp32
    run's activations (and an FP8 / NVFP4 run's with fp16 or fp32 parameters) take the parameters'
    dtype, so the first DSA layer's forward raises."""
    params = params_dtype(training)
    if not arch.has_dsa or params == "bf16":
        return
    field = "precision" if training.precision not in QUANTISED else "params_dtype"
    raise InputError(
        f'{where}: training.{field}: "{getattr(training, field)}" with DeepSeek sparse attention: '
        f"its indexer's rotate_activation asserts bf16 input (Megatron-LM dsa.py:264-266), and "
        f'{params} parameters give {params} activations; use "bf16"'
    )


def _fp32(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """fp32 training as planner models it (`planner.model.fp32`): Megatron-LM's transformer
    layers (dense, MoE, MLA) and nothing planner counts only in 16 bits; its gradient buffers
    take the fp32 parameters' dtype (Megatron-LM d98e8a64 param_and_grad_buffer.py:924 with
    grad_reduce_in_fp32 off: validate_args turns it on under --bf16 only, arguments.py:1205-1217);
    and no FlashAttention-2 kernel: Transformer Engine's flash and fused backends take bf16 /
    fp16 only (attention/dot_product_attention/utils.py `get_attention_backend`, "Filter: Data
    type"), so pinning it (--attention-backend flash) finds no backend."""
    if params_dtype(training) != "fp32":
        return
    if training.precision == "fp32":
        field = f'{where}: training.precision: "fp32"'
    else:
        field = f'{where}: training.params_dtype: "fp32"'
    unmodelled = [
        (
            any(k.mixer not in (None, "attention") for k in arch.kinds),
            "Mamba / gated-delta-net layers",
        ),
        (training.t5_encoder is not None, "a T5 encoder"),
        (training.vision_encoder is not None, "a vision encoder"),
        (training.optimizer == "muon", "Muon (its fp32 master is counted)"),
    ]
    for present, what in unmodelled:
        if present:
            raise InputError(
                f"{field} with {what}: not modelled with fp32 parameters (planner counts it "
                'in bf16); use "bf16"'
            )
    if training.main_grad_dtype == "bf16":
        raise InputError(
            f'{where}: training.main_grad_dtype: "bf16" with fp32 parameters: Megatron\'s '
            "gradient buffers take the fp32 parameters' dtype (--grad-reduce-in-bf16 acts under "
            '--bf16 only); set main_grad_dtype = "fp32"'
        )
    if training.attention_kernel == "flash2":
        raise InputError(
            f'{where}: training.attention_kernel: "flash2" with fp32 parameters: '
            "FlashAttention takes bf16 / fp16 only, and fp32 runs Transformer Engine's unfused "
            'attention; leave attention_kernel = "fused"'
        )
    if training.fp8_attention:
        raise InputError(
            f"{where}: training.fp8_attention: true with fp32 parameters: the attention's inputs "
            "are fp32, for which Transformer Engine has no fused (and so no FP8) attention "
            'backend (get_attention_backend, "Filter: Data type"); set fp8_attention = false'
        )


def _bf16_layers(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """bf16 layers only where the rest is FP8 / NVFP4, never all of them, and not under delayed
    scaling (Megatron-Core TransformerConfig d98e8a64: "Delayed scaling does not support first /
    last layer in BF16"); the per-stage bound is a layout rule (`planner.search.rules`)."""
    start, end = training.bf16_layers_at_start, training.bf16_layers_at_end
    if not start and not end:
        return
    name = "bf16_layers_at_start" if start else "bf16_layers_at_end"
    if training.precision not in QUANTISED:
        raise InputError(
            f'{where}: training.{name}: layers kept in bf16 need precision "fp8" or "fp4" '
            f"(the whole model is {training.precision} already)"
        )
    if training.framework != "megatron":
        raise InputError(
            f"{where}: training.{name}: bf16 first / last layers are Megatron-LM's "
            "(--first-last-layers-bf16); torchtitan's float8 filters modules by name"
        )
    if start + end >= arch.num_layers:
        raise InputError(
            f"{where}: training.{name}: {start} + {end} bf16 layers leave none of the "
            f"{arch.num_layers} in {training.precision}"
        )
    if training.precision == "fp8" and (training.fp8_recipe or "delayed") == "delayed":
        raise InputError(
            f"{where}: training.{name}: Megatron's delayed FP8 scaling does not support bf16 "
            'first / last layers; set fp8_recipe = "tensorwise" (or another) or drop them'
        )


def _fp8_attention(training: TrainingSection, where: str) -> None:
    """FP8 attention only inside an FP8 / NVFP4 autocast whose recipe carries it: Megatron-Core
    (d98e8a64) passes fp8_dpa to Transformer Engine's delayed (TEDelayedScaling), tensorwise,
    mxfp8 and nvfp4 recipes, not to blockwise; and only for the fused attention kernel."""
    if not training.fp8_attention:
        return
    field = f"{where}: training.fp8_attention"
    if training.precision not in QUANTISED:
        raise InputError(
            f'{field}: FP8 attention needs precision "fp8" or "fp4" (got "{training.precision}")'
        )
    if training.framework != "megatron":
        raise InputError(
            f"{field}: FP8 attention is Transformer Engine's (Megatron); torchtitan's float8 "
            "converts only linear layers"
        )
    if training.precision == "fp8" and training.fp8_recipe == "blockwise":
        raise InputError(
            f'{field}: Megatron does not pass FP8 attention to the "blockwise" recipe (only '
            "delayed, tensorwise, mxfp8 and NVFP4 take it); set fp8_attention = false"
        )
    if training.flash_attention is False:
        raise InputError(
            f"{field}: FP8 attention is the fused attention kernel's; it needs "
            "flash_attention = true"
        )


def _local_attention(training: TrainingSection, where: str) -> None:
    """Megatron-Core's own attention (--transformer-impl local) has no flash path: it always
    materialises the s x s scores (d98e8a64 dot_product_attention.py:100-109), so a plan that
    names it must say flash_attention = false (the Megatron-args reader sets both)."""
    if training.unfused_attention != "te" and training.flash_attention is not False:
        raise InputError(
            f"{where}: training.unfused_attention: {training.unfused_attention!r} is Megatron's "
            "local attention, which keeps the s x s scores: it needs flash_attention = false"
        )


def _fp8_output_proj(training: TrainingSection, where: str) -> None:
    """Megatron-Core's TransformerConfig (d98e8a64) raises unless fp8 and fp8_recipe mxfp8."""
    if not training.fp8_output_proj:
        return
    field = f"{where}: training.fp8_output_proj"
    if training.framework != "megatron":
        raise InputError(
            f"{field}: the MXFP8 output layer is Megatron's (--fp8-output-proj); torchtitan's "
            "float8 converts the decoder's linear layers only"
        )
    recipe = training.fp8_recipe or "delayed"
    if training.precision != "fp8" or recipe != "mxfp8":
        got = f'precision "{training.precision}"'
        if training.precision == "fp8":
            got += f', fp8_recipe "{recipe}"'
        raise InputError(
            f'{field}: Megatron runs the output layer in MXFP8 only with precision "fp8" and '
            f'fp8_recipe "mxfp8" (got {got}); set fp8_output_proj = false'
        )
