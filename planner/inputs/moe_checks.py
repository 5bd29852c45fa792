"""The plan's `training.moe_fused_grouped_mlp` checked as Megatron-Core checks it (exit 2 with the
file, the field and the value): Megatron-LM's MoE experts (TEGroupedMLP) build Transformer
Engine's fused grouped MLP only for a gated SiLU / quick-GELU unit or a (weighted) squared ReLU
(megatron.core.transformer.moe.experts `_is_fused_impl_supported`, d98e8a64, asserted where
--use-transformer-engine-op-fuser is set). What depends on the layout (expert tensor parallelism,
offloaded expert modules) is a layout rule (`planner.search.rules.fused_mlp`)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.plan_sections import TrainingSection

GLU_ACTIVATIONS = ("swiglu", "silu", "quick_geglu")
"""Gated activations the fused grouped MLP takes: SwiGLU (SiLU) and the quick-GELU GLU (Megatron
--quick-geglu, gpt-oss's; experts.py `_is_fused_impl_supported`: F.silu or quick_gelu, not the
erf / tanh GELU of "geglu")."""
UNARY_ACTIVATIONS = ("squared_relu",)
"""Ungated activations it takes: squared ReLU (Megatron's fused weighted squared ReLU)."""


def _fusable(arch: ModelArch) -> tuple[str, ...]:
    """The activations Megatron fuses for this model's kind of expert MLP (gated or not)."""
    return GLU_ACTIVATIONS if arch.gated_linear_unit else UNARY_ACTIVATIONS


def fusable_activation(arch: ModelArch) -> bool:
    """The experts' activation is one Megatron builds the fused grouped MLP for."""
    return arch.activation in _fusable(arch)


def check_fused_grouped_mlp(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """Raise InputError where the fused grouped MLP cannot be built for this model or code. A
    dense model has no experts to build it for: read as off (`plan.build_job`; `inert` notes
    it), as Megatron-LM builds it only in the experts (transformer MoE experts.py:286-291,
    d98e8a64), and the launch targets then leave --use-transformer-engine-op-fuser out (on a
    dense model that flag builds each dense MLP as Transformer Engine's TEFusedMLP instead,
    gpt_layer_specs.py:534-539 via megatron/training/models/gpt.py:105-106: not timed)."""
    if not training.moe_fused_grouped_mlp or not arch.is_moe:
        return
    field = f"{where}: training.moe_fused_grouped_mlp"
    if training.framework != "megatron":
        raise InputError(
            f"{field}: the fused grouped MLP is Megatron-Core's (--use-transformer-engine-op-"
            "fuser); torchtitan's experts do not use it"
        )
    if not fusable_activation(arch):
        kind = "gated" if arch.gated_linear_unit else "ungated"
        raise InputError(
            f"{field}: Megatron fuses a {kind} expert MLP only with {' / '.join(_fusable(arch))} "
            f'(model activation "{arch.activation}"); set moe_fused_grouped_mlp = false'
        )


def fused_mlp_reading(
    flag: str, op_fuser: bool, experts: bool, glu: bool, interleave: int | None
) -> tuple[bool, str | None]:
    """`moe_fused_grouped_mlp` as a Megatron-LM line (or a NeMo line's model.config) sets it, and a
    note where the switch is on but fuses nothing: Megatron builds the fused grouped MLP only for
    grouped-GEMM experts (`experts`), and Transformer Engine (d0067d0d validate_grouped_mlp_dims)
    fuses a gated unit only with a GLU interleave of 32 (Megatron --moe-mlp-glu-interleave-size);
    otherwise its op fuser runs the same operations one by one, which is timed as unfused."""
    if not op_fuser:
        return False, None
    if not experts:
        return False, (
            f"{flag}: no grouped-GEMM experts to fuse; read as without it (the dense MLPs it "
            "builds as Transformer Engine's TEFusedMLP, gpt_layer_specs.py:534-539 d98e8a64, "
            "are timed and sized as unfused ones)"
        )
    if glu and interleave != 32:
        return False, (
            f"{flag}: without a GLU interleave of 32 (--moe-mlp-glu-interleave-size) Transformer "
            "Engine does not fuse a gated expert MLP; its experts are timed unfused"
        )
    return True, None
