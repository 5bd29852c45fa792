"""The `[training]` table of a NeMo 2.0 `nemo llm pretrain` line (`planner.inputs.nemo_args`):
the recipe's batch and sequence, the keys of `nemo_keys.TRAINING`, precision and FP8, CUDA graphs,
the fused loss, dropouts and the experts' fused grouped MLP."""

from __future__ import annotations

from typing import Any

from planner.inputs.megatron_args_memory import loss_fields
from planner.inputs.megatron_training import CUDA_GRAPH_IMPLS, graph_regions
from planner.inputs.moe_checks import fused_mlp_reading
from planner.inputs.nemo_keys import GRAPH_KEYS, TRAINING, NemoLine
from planner.inputs.nemo_recipes import Recipe


def training_table(
    line: NemoLine, recipe: Recipe, model: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq_length": recipe.seq_length,
        "global_batch_size": recipe.global_batch_size,
        "precision": "bf16",
    }
    for key, name in TRAINING.items():
        value = line.get(key)
        if value is not None:
            out[name] = value
    # NeMo's strategy writes the precision plugin's dtype settings over its DDP config
    # (megatron_strategy.py `update_config_with_dtype_overrides`, NeMo 8cfedd72): the plugin's
    # grad_reduce_in_fp32 (True by default, plugins/mixed_precision.py) is what runs
    value = line.flag("trainer.plugins.grad_reduce_in_fp32")
    if value is not None:
        out["main_grad_dtype"] = "fp32" if value else "bf16"
    if line.get("trainer.strategy.ddp.grad_reduce_in_fp32") is not None:
        notes.append(
            "trainer.strategy.ddp.grad_reduce_in_fp32: NeMo writes the precision plugin's "
            "value over it (trainer.plugins.grad_reduce_in_fp32, True by default): read that"
        )
    precision = line.get("trainer.plugins.precision", "bf16-mixed")
    if precision not in ("bf16-mixed", "16-mixed"):
        raise line.fail("trainer.plugins.precision", "planner models bf16-mixed and 16-mixed")
    if precision == "16-mixed":  # fp16 parameters (NeMo's fp16_mixed: params_dtype torch.half)
        out["precision"] = "fp16"
    for key in ("model.config.fp8", "model.config.fp8_recipe"):
        if key in line.values:  # megatron_strategy.py `connect`: the plugin's DtypeConfig wins
            notes.append(
                f"{key}: NeMo writes the precision plugin's value over it "
                "(update_config_with_dtype_overrides): give trainer.plugins.fp8 / fp8_recipe"
            )
    if line.get("trainer.plugins.fp8"):
        if out["precision"] == "fp16":
            out["params_dtype"] = "fp16"
        out["precision"] = "fp8"
        out["fp8_param_gather"] = _fp8_gather(line)
    _graphs(line, out)
    if not recipe.flash_attention:
        out["flash_attention"] = False
    fused = line.flag("model.config.bias_activation_fusion")
    glu = model.get("gated_linear_unit", False)
    if glu and (not recipe.fused_glu if fused is None else not fused):
        out["fused_swiglu"] = False
    _loss(line, out)
    _dropouts(line, recipe, out)
    if not line.flag("model.config.gradient_accumulation_fusion", recipe.grad_accum_fusion):
        out["gradient_accumulation_fusion"] = False  # planner.model.wgrad_accumulation
    key = "model.config.use_transformer_engine_op_fuser"
    # grouped-GEMM experts only where the line asks: no recipe config here sets it, and
    # TransformerConfig leaves it off (transformer_config.py:850 @d98e8a64; MixtralConfig,
    # NeMo 8cfedd72 gpt/model/mixtral.py:36-78, does not set it)
    grouped = bool(line.flag("model.config.moe_grouped_gemm", False))
    fused_mlp, note = fused_mlp_reading(
        key, bool(line.flag(key)), bool(model.get("num_moe_experts")) and grouped, glu,
        line.get("model.config.moe_mlp_glu_interleave_size"),
    )  # fmt: skip
    if fused_mlp:
        out["moe_fused_grouped_mlp"] = True
    if note:
        notes.append(note)
    # the alias turns the padding on whatever the other says (transformer_config.py:2641-2647)
    keys = (
        "model.config.moe_router_padding_for_quantization",
        "model.config.moe_router_padding_for_fp8",
    )
    if any(line.flag(key) for key in keys):
        out["moe_router_padding"] = True
    return out


def _fp8_gather(line: NemoLine) -> bool:
    """trainer.plugins.fp8_param_gather, or its older name fp8_params; both given, they must
    agree (plugins/mixed_precision.py raises "Getting conflicting values for fp8_params and
    fp8_param_gather")."""
    keys = ("trainer.plugins.fp8_param_gather", "trainer.plugins.fp8_params")
    values = [line.flag(k) for k in keys]
    given = [v for v in values if v is not None]
    if len(given) == 2 and given[0] != given[1]:
        raise line.fail(
            "trainer.plugins.fp8_params",
            "conflicts with trainer.plugins.fp8_param_gather (NeMo's precision plugin raises)",
        )
    return bool(given and given[0])


REUSE = "trainer.plugins.reuse_grad_buf_for_mxfp8_param_ag"
MXFP8_OWN_BUFFER = (
    "trainer.plugins.fp8_recipe=mxfp8 with the FP8 parameter gather and without "
    f"{REUSE}=True (False by default: NeMo 8cfedd72 plugins/mixed_precision.py:92, :132, written "
    "onto the DDP config by megatron_strategy.py:469-470): Megatron-Core's DDP then backs every "
    "parameter with a persistent parameter buffer of its own (param_and_grad_buffer.py:1245-1263 "
    "@d98e8a64; optimizer_config.py:416-422 warns of 'significant additional GPU memory'): "
    "planner counts the gather through the gradient buffer, as with the switch on (memory "
    "under-estimated)"
)
"""What `mxfp8_gather_note` says (the Megatron-LM reader's megatron_args_memory.MXFP8_OWN_BUFFER
in NeMo's keys)."""


def mxfp8_gather_note(
    line: NemoLine, training: dict[str, Any], parallel: dict[str, Any]
) -> list[str]:
    """The not-modelled note of an MXFP8 parameter gather by the distributed optimizer (ZeRO 1)
    without the precision plugin's reuse of the gradient buffer (MXFP8_OWN_BUFFER); with it on,
    the path planner prices (`planner.model.stage_sync` gathers_in_grad_buffer), nothing."""
    reuse = line.flag(REUSE, False)  # True / False (NeMo-Run's 1 / 0) whatever the recipe
    gather = training.get("fp8_param_gather") and training.get("fp8_recipe") == "mxfp8"
    if not gather or parallel.get("zero_stage", 0) != 1:
        return []
    return [] if reuse else [MXFP8_OWN_BUFFER]


def _dropouts(line: NemoLine, recipe: Recipe, out: dict[str, Any]) -> None:
    """model.config.attention_dropout / hidden_dropout where the line sets them, else the recipe
    config's (`Recipe.dropout`): at 0 the plan counts no dropout masks."""
    for name in ("attention_dropout", "hidden_dropout"):
        key = f"model.config.{name}"
        rate = line.get(key)
        if rate is None:
            zero = not recipe.dropout
        elif isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
            raise line.fail(key, "expected a dropout rate in [0, 1)")
        else:
            zero = rate == 0
        if zero:
            out[name] = False


def _loss(line: NemoLine, out: dict[str, Any]) -> None:
    """model.config.cross_entropy_loss_fusion / cross_entropy_fusion_impl, where the line sets
    them (TransformerConfig's fields; left out, the recipe's loss is timed as a fused one)."""
    fused = line.flag("model.config.cross_entropy_loss_fusion")
    impl = line.get("model.config.cross_entropy_fusion_impl")
    if impl is not None and impl not in ("native", "te"):
        raise line.fail("model.config.cross_entropy_fusion_impl", "expected native or te")
    out.update(loss_fields(fused, impl))


def _graphs(line: NemoLine, out: dict[str, Any]) -> None:
    """CUDA graphs (nemo_keys.GRAPH_KEYS): on with enable_cuda_graph, external_cuda_graph or an
    implementation other than "none" (kept as `cuda_graph_impl`; a "full_iteration" scope is the
    whole iteration's graph); the regions named (a list, or one name) less "full", the whole
    layer."""
    impl_key = "model.config.cuda_graph_impl"
    impl = line.get(impl_key)
    if impl is not None and impl not in CUDA_GRAPH_IMPLS:
        raise line.fail(impl_key, f"expected one of {', '.join(CUDA_GRAPH_IMPLS)}")
    legacy = line.flag("model.config.enable_cuda_graph") or line.flag(
        "model.config.external_cuda_graph"
    )
    if not (legacy or impl not in (None, "none")):
        return
    _rng_tracker(line)
    out["cuda_graphs"] = True
    key = next((k for k in GRAPH_KEYS[3:] if line.get(k) is not None), None)
    words = str(line.get(key)) if key is not None else ""
    if "full_iteration" in words:  # Megatron-Core's full-iteration graph, by its old scope name
        impl = "full_iteration"
    elif impl in (None, "none"):  # the deprecated switches: external is Transformer Engine's
        impl = "transformer_engine" if line.flag("model.config.external_cuda_graph") else "local"
    out["cuda_graph_impl"] = impl
    if key is None:
        return
    parts = graph_regions(words)
    if isinstance(parts, str):
        raise line.fail(key, parts)
    if parts and impl != "full_iteration":
        out["cuda_graph_modules"] = parts


def _rng_tracker(line: NemoLine) -> None:
    """GPTConfig.configure_model asserts Transformer Engine's RNG tracker with the deprecated
    enable_cuda_graph unless the scope is the full iteration (NeMo 8cfedd72 gpt/model/base.py
    :332-337); the tracker is the strategy's use_te_rng_tracker, which NeMo writes onto the model
    config (_strategy_lib.py:166-171), so model.config.use_te_rng_tracker alone is overwritten."""
    if not line.flag("model.config.enable_cuda_graph"):
        return
    if line.get("model.config.cuda_graph_scope") == "full_iteration":
        return
    key = "trainer.strategy.use_te_rng_tracker"
    if not line.flag(key, False):
        raise line.fail(
            "model.config.enable_cuda_graph",
            f"NeMo asserts Transformer Engine's RNG tracker beside it (gpt/model/base.py:332-337, "
            f"NeMo 8cfedd72): add {key}=True",
        )
