"""Each Megatron-Bridge recipe's cells (`benchmarks.recipe_data.Recipe`) read into the `Settings` a
plan can carry (`read`); what has no plan field is kept as notes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from benchmarks.recipe_data import BUILT_IN_LAYOUTS, Recipe
from planner.inputs import pipeline_layout
from planner.inputs.plan_types import CUDA_GRAPH_MODULES


@dataclass(frozen=True)
class Settings:
    """A recipe's settings, read from its cells (`read`)."""

    precision: str  # "bf16" | "fp8" | "fp4"
    fp8_recipe: str | None
    fp8_param_gather: bool
    fp4_param_gather: bool  # NVFP4: --fp4-param-gather (Bridge's preset on; D10, GPT-OSS-20B off)
    bf16_layers_at_start: int  # first / last decoder layers kept in bf16 (--first-last-layers-bf16)
    bf16_layers_at_end: int
    fp8_attention: bool  # "fp8 DPA": mixed_precision.fp8_dot_product_attention
    fp8_output_proj: bool  # "fp8 output proj": model.fp8_output_proj (MXFP8 LM head)
    moe_fused_grouped_mlp: bool  # "TE op fuser" on an MoE: model.use_transformer_engine_op_fuser
    glu_interleave: bool  # ... with moe_mlp_glu_interleave_size 32 (all but Nemotron 3 Ultra's)
    layout: tuple[str, ...] | None  # the pipeline layout's stages, if the recipe gives one
    account_for: bool
    recompute: str
    recompute_modules: tuple[str, ...]
    recompute_method: str | None
    recompute_num_layers: int | None
    offload_layers: int
    offload_modules: tuple[str, ...]  # fine-grained activation offloading's modules (() = off)
    dispatcher: str | None
    backend: str | None
    dispatcher_sms: int | None  # the flex dispatcher's SMs (None: Megatron's default, 20)
    tp_overlap: bool
    ep_overlap: bool
    delay_wgrad: bool
    zero_stage: int
    fsdp_double_buffer: bool  # Megatron-FSDP's persistent double buffers (zero_stage 3 only)
    fsdp_unit_size: int | None  # Megatron-FSDP's suggested_communication_unit_size ("unit 8e8")
    optimizer_instances: int  # Megatron-FSDP / distributed-optimizer instances (HSDP when > 1)
    outer_optim: bool  # HSDP outer sharding "optim": the optimizer states over the instances too
    optimizer: str  # "adam" | "muon" (Kimi K2's dist_muon: the layer-wise distributed optimizer)
    muon_tp_mode: str | None  # Muon's muon_tp_mode where the optimizer is Muon
    bf16_optimizer: bool  # precision-aware optimizer with bf16 moments
    bf16_main_grads: bool  # ... and bf16 main grads (every such recipe but S1, whose are fp32)
    fp32_aware_optimizer: bool  # precision-aware optimizer with every dtype fp32
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    param_gather_with_step: bool
    rank_capacity: str | None
    paged_stash: bool
    force_load_balancing: bool  # moe_router_force_load_balancing (MoE recipes)
    graph_modules: tuple[str, ...] | None  # CUDA graphs: the regions captured, () whole; None off
    extra: dict[str, object]  # more [training] fields: the graphs' implementation, the loss's
    notes: tuple[str, ...]


def fsdp_fields(s: Settings) -> dict[str, object]:
    """The plan's Megatron-FSDP buffer fields the recipe sets (`[parallel]`): Bridge's
    ddp.fsdp_double_buffer and ddp.suggested_communication_unit_size (perf_recipes/llama/*/
    llama3.py at 067f987d, e.g. gb200/llama3.py:223-224)."""
    out: dict[str, object] = {}
    if s.fsdp_double_buffer:
        out["fsdp_double_buffer"] = True
    if s.fsdp_unit_size is not None:
        out["suggested_communication_unit_size"] = s.fsdp_unit_size
    return out


def _graph_modules(cell: str) -> tuple[str, ...] | None:
    """A graphs cell as the plan's cuda_graphs / cuda_graph_modules: None for "none"; the regions
    in brackets ("transformer_engine [attn, moe_router, moe_preprocess]"); () for a whole layer
    or a whole iteration (full_iteration, "modules cleared (whole layer)")."""
    if cell.startswith("none"):
        return None
    m = re.search(r"\[([^]]*)\]", cell)
    listed = [w.strip() for w in m.group(1).split(",")] if m else []
    if any(w not in CUDA_GRAPH_MODULES for w in listed):  # e.g. "scope [full_iteration]"
        return ()
    return tuple(listed)


def read(r: Recipe) -> Settings:
    """The recipe's settings from its cells; what has no plan field goes into `notes`."""
    rt = r.runtime
    notes: list[str] = []
    if r.legacy and r.flat:
        notes.append(f"modelled: the legacy preset {r.legacy}, {_legacy_why(r, r.flat)}")
    label = r.precision
    fp8_recipe, gather, precision = None, False, "bf16"
    if label.startswith("FP8-CS"):
        precision, fp8_recipe, gather = "fp8", "tensorwise", True
    elif label.startswith("FP8-DS"):
        precision, fp8_recipe, gather = "fp8", "delayed", True
    elif label.startswith("FP8-blockwise"):
        precision, fp8_recipe, gather = "fp8", "blockwise", False
    elif label.startswith("MXFP8"):
        precision, fp8_recipe = "fp8", "mxfp8"
        gather = "without fp8-param-gather" not in label
    # NVFP4: Bridge's preset gathers the NVFP4 weights (bridge_recipes.md, "NVFP4 per recipe")
    fp4_gather = label.startswith("NVFP4") and "no fp4 param gather" not in label
    if label.startswith("NVFP4"):
        precision = "fp4"
    bf16_start = int(m.group(1)) if (m := re.search(r"first (\d+) layers? bf16", label)) else 0
    bf16_end = int(m.group(1)) if (m := re.search(r"last (\d+) layers? bf16", label)) else 0

    layout, account = None, False
    if r.split.startswith("account_for_embedding+loss"):
        account = True
    elif r.split.startswith("built-in"):
        layout = tuple(BUILT_IN_LAYOUTS[r.family][(r.pp, r.vpp or 1)])
        if r.id in ("D3", "D6"):
            notes.append(
                "the data file lists the 8-stage (8,1) layout for vpp 2; Bridge's (8,2) layout "
                "(16 stages) is used"
            )
    elif r.split != "-":
        layout = pipeline_layout.parse(r.split)
        if layout is None:
            raise ValueError(f"{r.id}: cannot read the pipeline layout {r.split!r}")

    recompute, method, nlayers = "none", None, None
    modules: tuple[str, ...] = ()
    text = rt["recompute"]
    if m := re.fullmatch(r"full, (\w+), (\d+) layers", text):
        recompute, method, nlayers = "full", m.group(1), int(m.group(2))
    elif m := re.fullmatch(r"selective \[(.+)\]", text):
        recompute, modules = "selective", tuple(x.strip() for x in m.group(1).split(","))
    elif text.startswith("selective with empty module list"):
        notes.append("selective recompute with an empty module list: nothing recomputed")
    elif text != "none":
        raise ValueError(f"{r.id}: cannot read the recompute cell {text!r}")

    offload, fine = 0, ()
    if m := re.match(r"cpu_offloading, (\d+) layers", rt["offload"]):
        offload = int(m.group(1))
    elif "no effect" in rt["offload"]:
        notes.append(f"{rt['offload'].split(' set')[0]} without cpu_offloading: no effect (0)")
    elif m := re.match(r"fine-grained \[([^]]*)\]", rt["offload"]):
        fine = tuple(x.strip() for x in m.group(1).split(","))

    dispatcher = backend = None
    d = rt["dispatcher"]
    if d.startswith("alltoall"):
        dispatcher = "alltoall"
    elif m := re.match(r"flex / (\w+)", d):
        dispatcher, backend = "flex", m.group(1)
        if "(from base)" in d:
            notes.append(
                "flex / hybridep as the base recipe sets it when built on an sm 8-10 GPU or none"
            )
    # the SM count: the cell's "(SMs n)", the notes' "hybridep SMs n" where a recipe sets it
    # after _benchmark_common, else the 32 _benchmark_common gives every HybridEP recipe
    sms = None
    if m := re.search(r"\(SMs (\d+)\)", d) or re.search(r"hybridep SMs (\d+)", rt["notes"]):
        sms = int(m.group(1))
    elif backend == "hybridep":
        sms = 32
    if "(+permute fusion into hybridep)" in d:
        notes.append("dispatcher tuning (+permute fusion into hybridep): no plan field")

    dropping = rt["dropping"]
    rank_capacity = None
    if m := re.search(r"moe_expert_rank_capacity_factor ([\d.]+)", dropping):
        rank_capacity = m.group(1)
    paged = "paged stash" in dropping

    ep_text = rt["ep_overlap"]
    ep_overlap = ep_text.startswith("on")
    delay = ep_overlap and "delay_wgrad on" in ep_text

    opt = rt["optimizer"]
    zero = 3 if "Megatron-FSDP" in opt else 1
    if zero == 3:
        unfielded = [
            text
            for cue, text in (
                ("no grad-accum fusion", "no gradient-accumulation fusion"),
                ("nccl_ub", "NCCL user-buffer registration"),
                ("average_in_collective off", "average_in_collective off"),
            )
            if cue in opt
        ]
        notes.append(f"Megatron-FSDP {', '.join(unfielded)}: no plan fields")
    instances = int(m.group(1)) if (m := re.search(r"optimizer_instances (\d+)", opt)) else 1
    muon = opt.startswith("Muon")
    tp_mode = m.group(1) if muon and (m := re.search(r"muon_tp_mode (\w+)", opt)) else None
    bf16_opt = "exp_avg bf16" in opt
    fp32_aware = "precision-aware optimizer" in opt and "fp32" in opt and not bf16_opt
    grad_overlap = "overlap_grad_reduce off" not in opt
    with_step = "PG-overlap-with-opt-step" in opt
    if not grad_overlap and "all param-gather overlap off" not in opt:
        notes.append("grad-reduce overlap off with param-gather overlap on: plan has both off")

    graphs = rt["graphs"]
    graph_modules = _graph_modules(graphs)
    if graph_modules is not None and "full_iteration" in graphs:
        notes.append(f"CUDA graphs ({graphs}): timed as per-layer graphs of the whole layer")
    outside = [m for m in fine if m not in ("expert_fc1", "moe_act", "fused_group_mlp")]
    if graph_modules is not None and outside:
        # Megatron refuses these modules under the local per-layer graphs planner launches
        # (TransformerConfig d98e8a64); the recipe's full-iteration graphs take them
        notes.append(
            f"fine-grained activation offloading of [{', '.join(fine)}] under {graphs}: planner's "
            "per-layer graphs do not run it, so the activations stay on the GPU (memory errs high)"
        )
        fine = ()
    fused_mlp = "TE op fuser" in graphs and r.is_moe  # the experts' fused grouped MLP
    if "TE op fuser" in graphs and not r.is_moe:
        notes.append("TE op fuser on a dense model: no plan field")
    # the recipe's own notes: learned routing (GPT-OSS-20B's helper), the router's dtype
    learned = "moe_router_force_load_balancing False" in rt["notes"]
    if learned:
        notes.append("learned routing: the recipe turns moe_router_force_load_balancing off")
    if m := re.search(r"moe_router_dtype (\w+)", rt["notes"]):
        notes.append(f"router dtype {m.group(1)}: no plan field")
    if r.family in ("llama3_8b", "llama3_70b"):
        notes.append("Llama 3 shapes = the zoo's Llama 3.1 ones")
    return Settings(
        precision=precision,
        fp8_recipe=fp8_recipe,
        fp8_param_gather=gather,
        fp4_param_gather=fp4_gather,
        bf16_layers_at_start=bf16_start,
        bf16_layers_at_end=bf16_end,
        fp8_attention="fp8 DPA" in label,
        fp8_output_proj="fp8 output proj" in label,
        moe_fused_grouped_mlp=fused_mlp,
        glu_interleave=fused_mlp and "no glu interleave" not in graphs,
        layout=layout,
        account_for=account,
        recompute=recompute,
        recompute_modules=modules,
        recompute_method=method,
        recompute_num_layers=nlayers,
        offload_layers=offload,
        offload_modules=fine,
        dispatcher=dispatcher,
        backend=backend,
        dispatcher_sms=sms,
        tp_overlap=rt["tp_overlap"].startswith("on"),
        ep_overlap=ep_overlap,
        delay_wgrad=delay,
        zero_stage=zero,
        fsdp_double_buffer=zero == 3 and "double-buffer" in opt,
        fsdp_unit_size=800_000_000 if zero == 3 and "unit 8e8" in opt else None,
        optimizer_instances=instances,
        outer_optim="outer_dp_sharding_strategy optim" in opt,
        optimizer="muon" if muon else "adam",
        muon_tp_mode=tp_mode,
        bf16_optimizer=bf16_opt,
        bf16_main_grads=bf16_opt and "main_grads bf16" in opt,
        fp32_aware_optimizer=fp32_aware,
        overlap_grad_reduce=grad_overlap,
        overlap_param_gather="all param-gather overlap off" not in opt,
        param_gather_with_step=with_step,
        rank_capacity=rank_capacity,
        paged_stash=paged,
        force_load_balancing=r.is_moe and not learned,
        graph_modules=graph_modules,
        extra=_extra(r, graph_modules is not None and "full_iteration" not in graphs),
        notes=tuple(notes),
    )


NATIVE_LOSS_FAMILIES = ("nemotron_3_ultra",)
"""Families whose perf recipes run Megatron's native fused loss, not Transformer Engine's
(perf_recipes/nemotronh/common.py:94-99 `_apply_nemotron_3_ultra_perf_defaults`, which
gb200/nemotronh.py:240 and its GB300 twin call: `_benchmark_common(cfg, cross_entropy_impl=
"native")`; the others keep _common.py:12's "te"): planner's compiled_loss_fusion, 10 bytes a
logit."""


def _extra(r: Recipe, per_layer_graphs: bool) -> dict[str, object]:
    """[training] fields beyond `Settings`' own: Bridge's per-layer CUDA graphs are Transformer
    Engine's whatever the cell's impl (utils/cuda_graph.py:146-154 at 067f987d: it runs per-layer
    graphs through TE only; planner.model.graph_buffers), and the native loss of
    `NATIVE_LOSS_FAMILIES`."""
    out: dict[str, object] = {}
    if per_layer_graphs:
        out["cuda_graph_impl"] = "transformer_engine"
    if r.family in NATIVE_LOSS_FAMILIES:
        out["compiled_loss_fusion"] = True
    return out


def _legacy_why(r: Recipe, flat: Recipe) -> str:
    """What the flat recipe codes instead of the legacy preset modelled for it."""
    fields = ("tp", "pp", "vpp", "cp", "mbs", "gbs")
    coded = ", ".join(
        f"{k} {getattr(flat, k) or 1}" for k in fields if getattr(flat, k) != getattr(r, k)
    )
    if (
        "Megatron-FSDP" in r.runtime["optimizer"]
        and "Megatron-FSDP" not in flat.runtime["optimizer"]
    ):
        coded += ", the distributed optimizer without Megatron-FSDP or offloading"
    return (
        f"which its docstring describes; the flat code sets {coded} (the 256-GPU V2 preset run "
        "on 128 GPUs with the launcher's GBS scaling; bridge_recipes.md, legacy presets)"
    )
