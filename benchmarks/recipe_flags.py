"""A Megatron-Bridge recipe's Megatron-LM flags against the ones `planner launch` emits for its
plan file: `recipe_flags` writes each Bridge setting in the spelling of Megatron-LM's parser,
independently of `planner.emit.megatron`; `emitted_flags` reads launch's; `compare` lists the
differences within `SCOPE` (layout, precision, recompute and MoE flags), and `WHY` says why the
ones that differ alike in every recipe do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from benchmarks.recipe_data import CP_COMM_TYPE, DSV3_ROUTING, Recipe
from benchmarks.recipe_settings import Settings
from planner.emit.megatron import arguments
from planner.inputs import pipeline_layout
from planner.inputs.megatron_flags import PRECISION_FLAGS
from planner.inputs.plan import Plan

SCOPE = frozenset(
    {
        # layout
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--cp-comm-type",
        "--num-virtual-stages-per-pipeline-rank",
        "--num-layers-per-virtual-pipeline-stage",
        "--pipeline-model-parallel-layout",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--microbatch-group-size-per-virtual-pipeline-stage",
        "--sequence-parallel",
        "--tp-comm-overlap",
        "--micro-batch-size",
        "--global-batch-size",
        "--seq-length",
        "--use-distributed-optimizer",
        "--optimizer",
        "--muon-tp-mode",
        "--no-use-layer-wise-param-layout",
        "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy",
        "--fsdp-double-buffer",
        "--suggested-communication-unit-size",
        "--num-distributed-optimizer-instances",
        "--outer-dp-sharding-strategy",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--overlap-param-gather-with-optimizer-step",
        "--cpu-offloading-num-layers",
        "--fine-grained-activation-offloading",
        "--offload-modules",
        # precision
        *PRECISION_FLAGS,
        "--fp8-amax-history-len",
        "--fp8-amax-compute-algo",
        "--reuse-grad-buf-for-mxfp8-param-ag",
        "--grad-reduce-in-bf16",
        "--use-precision-aware-optimizer",
        "--main-grads-dtype",
        "--exp-avg-dtype",
        "--exp-avg-sq-dtype",
        # recompute
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
        "--recompute-modules",
        # MoE
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--moe-token-dispatcher-type",
        "--moe-flex-dispatcher-backend",
        "--moe-flex-dispatcher-num-sms",
        "--overlap-moe-expert-parallel-comm",
        "--delay-wgrad-compute",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-expert-capacity-factor",
        "--moe-pad-expert-input-to-capacity",
        "--moe-router-force-load-balancing",
        "--moe-paged-stash",
        "--moe-expert-rank-capacity-factor",
        "--mtp-num-layers",
        "--use-transformer-engine-op-fuser",
        "--moe-mlp-glu-interleave-size",
    }
)
"""The flags compared: layout, precision, recompute and MoE. Data, kernels (grouped GEMM, fused
permute), logging and checkpointing flags are not."""

WHY: dict[str, str] = {
    "--fp8-amax-history-len": "FP8-DS's amax history (1024, max): no plan field; Megatron's "
    "default (1, most_recent) is emitted",
    "--fp8-amax-compute-algo": "see --fp8-amax-history-len",
    "--overlap-param-gather-with-optimizer-step": "no plan field (Bridge's "
    "PG-overlap-with-opt-step)",
    "--num-distributed-optimizer-instances": "the plan's training.optimizer_instances (HSDP: "
    "states sharded over dp / instances) is counted by planner's memory model, but "
    "planner.emit.megatron emits the flag only for its own data-parallel pools (zero_stage 1)",
    "--delay-wgrad-compute": "the plan's ep_comm_overlap always delays the weight gradients",
    "--use-precision-aware-optimizer": "precision-aware optimizer with fp32 states: same memory "
    "as Adam's, so planner emits it only for bf16 moments",
    "--overlap-param-gather": "Megatron-LM's validate_args refuses param-gather overlap without "
    "grad-reduce overlap (Bridge, outside validate_args, keeps it)",
    "--main-grads-dtype": "the precision-aware optimizer's fp32 main grads beside bf16 moments and "
    "a bf16 gradient reduction: the plan's main_grad_dtype is both the reduction's and (with "
    "bf16 optimizer states) the optimizer's, so launch writes bf16",
    "--moe-mlp-glu-interleave-size": "no effect on an MLP without a gated unit (Megatron-LM "
    "d98e8a64's MoE experts module interleaves only a GLU's fc1: Nemotron 3's squared ReLU has "
    "none); launch emits it for gated MLPs only",
}
"""Why a flag differs where the reason is the same for every recipe that shows it."""


Flags = dict[str, tuple[str, ...]]


def recipe_flags(r: Recipe, s: Settings) -> Flags:
    """The Megatron-LM flags (within SCOPE) that carry the recipe's settings: each Bridge config
    field in the spelling of Megatron-LM's parser (megatron/training/arguments.py)."""
    f: Flags = {
        "--tensor-model-parallel-size": (str(r.tp),),
        "--pipeline-model-parallel-size": (str(r.pp),),
        "--context-parallel-size": (str(r.cp),),
        "--micro-batch-size": (str(r.mbs),),
        "--global-batch-size": (str(r.gbs),),
        "--seq-length": (str(r.seq),),
        "--bf16": (),
        # _benchmark_common: grad_reduce_in_fp32 = False
        "--grad-reduce-in-bf16": (),
    }
    if r.cp > 1 and r.family in CP_COMM_TYPE:
        f["--cp-comm-type"] = (CP_COMM_TYPE[r.family],)
    if s.layout is not None:  # Megatron derives vpp from the layout (and refuses both)
        f["--pipeline-model-parallel-layout"] = (pipeline_layout.compact(s.layout),)
    else:
        if s.account_for:
            f["--account-for-embedding-in-pipeline-split"] = ()
            f["--account-for-loss-in-pipeline-split"] = ()
        if r.vpp and r.vpp > 1:
            f["--num-virtual-stages-per-pipeline-rank"] = (str(r.vpp),)
    if r.sp:
        f["--sequence-parallel"] = ()
    if s.tp_overlap:
        f["--tp-comm-overlap"] = ()
    if s.precision == "fp8":
        f["--fp8-format"] = ("e4m3" if s.fp8_recipe == "mxfp8" else "hybrid",)
        f["--fp8-recipe"] = (str(s.fp8_recipe),)
        if s.fp8_param_gather:
            f["--fp8-param-gather"] = ()
            # Bridge's MXFP8 preset; Bridge turns it off under Megatron-FSDP (training/config.py:
            # 1098-1102, bridge_recipes.md)
            if s.fp8_recipe == "mxfp8" and s.zero_stage != 3:
                f["--reuse-grad-buf-for-mxfp8-param-ag"] = ()
        if s.fp8_recipe == "delayed":  # Bridge's FP8-DS preset
            f["--fp8-amax-history-len"] = ("1024",)
            f["--fp8-amax-compute-algo"] = ("max",)
    if s.precision == "fp4":  # Bridge's NVFP4 preset: fp4 e2m1, recipe nvfp4
        f["--fp4-format"] = ("e2m1",)
        f["--fp4-recipe"] = ("nvfp4",)
        if s.fp4_param_gather:
            f["--fp4-param-gather"] = ()
    if s.bf16_layers_at_start or s.bf16_layers_at_end:  # first_last_layers_bf16 with its counts
        f["--first-last-layers-bf16"] = ()
        f["--num-layers-at-start-in-bf16"] = (str(s.bf16_layers_at_start),)
        f["--num-layers-at-end-in-bf16"] = (str(s.bf16_layers_at_end),)
    if "fp8 output proj" in r.precision:
        f["--fp8-output-proj"] = ()
    f["--use-distributed-optimizer"] = ()  # on in every recipe (base), FSDP included
    if s.optimizer == "muon":
        # Bridge's optimizer "dist_muon" with use_distributed_optimizer False is Megatron-LM's
        # "--optimizer muon --use-distributed-optimizer" (validate_args d98e8a64 arguments.py:
        # 1725-1736: dist_muon is deprecated for that spelling; both run the layer-wise
        # distributed optimizer) on its legacy path: Bridge's DDP wrap passes no
        # use_layer_wise_distributed_optimizer (model_provider.py:698-706; False by default,
        # Megatron-LM 2a75ac12 dist_utils.py:270), so no layer-wise parameter layout
        f["--optimizer"] = ("muon",)
        f["--muon-tp-mode"] = (str(s.muon_tp_mode),)
        f["--no-use-layer-wise-param-layout"] = ()
    if s.zero_stage == 3:
        f["--use-megatron-fsdp"] = ()
        f["--data-parallel-sharding-strategy"] = ("optim_grads_params",)
        if s.fsdp_double_buffer:
            f["--fsdp-double-buffer"] = ()
        if s.fsdp_unit_size is not None:
            f["--suggested-communication-unit-size"] = (str(s.fsdp_unit_size),)
    if s.optimizer_instances > 1:
        f["--num-distributed-optimizer-instances"] = (str(s.optimizer_instances),)
        if s.outer_optim:
            f["--outer-dp-sharding-strategy"] = ("optim",)
    if s.bf16_optimizer:
        f["--use-precision-aware-optimizer"] = ()
        if s.bf16_main_grads:
            f["--main-grads-dtype"] = ("bf16",)
        f["--exp-avg-dtype"] = ("bf16",)
        f["--exp-avg-sq-dtype"] = ("bf16",)
    elif s.fp32_aware_optimizer:
        f["--use-precision-aware-optimizer"] = ()
    if s.overlap_grad_reduce:
        f["--overlap-grad-reduce"] = ()
    if s.overlap_param_gather:
        f["--overlap-param-gather"] = ()
    if s.param_gather_with_step:
        f["--overlap-param-gather-with-optimizer-step"] = ()
    if s.offload_layers:
        f["--cpu-offloading-num-layers"] = (str(s.offload_layers),)
    if s.offload_modules:
        f["--fine-grained-activation-offloading"] = ()
        f["--offload-modules"] = s.offload_modules
    if s.recompute == "full":
        f["--recompute-granularity"] = ("full",)
        f["--recompute-method"] = (str(s.recompute_method),)
        f["--recompute-num-layers"] = (str(s.recompute_num_layers),)
    elif s.recompute == "selective":
        f["--recompute-granularity"] = ("selective",)
        f["--recompute-modules"] = s.recompute_modules
    if r.is_moe:
        f["--expert-model-parallel-size"] = (str(r.ep),)
        f["--expert-tensor-parallel-size"] = (str(r.etp or r.tp),)
        f["--moe-token-dispatcher-type"] = (str(s.dispatcher),)
        if s.backend:
            f["--moe-flex-dispatcher-backend"] = (s.backend,)
        if s.dispatcher_sms is not None:
            f["--moe-flex-dispatcher-num-sms"] = (str(s.dispatcher_sms),)
        if s.force_load_balancing:  # every MoE recipe but GPT-OSS-20B's
            f["--moe-router-force-load-balancing"] = ()
        if s.ep_overlap:
            f["--overlap-moe-expert-parallel-comm"] = ()
        if s.delay_wgrad:
            f["--delay-wgrad-compute"] = ()
        if s.paged_stash:
            f["--moe-paged-stash"] = ()
        if s.rank_capacity:
            f["--moe-expert-rank-capacity-factor"] = (s.rank_capacity,)
        if s.moe_fused_grouped_mlp:  # the full-iteration MXFP8 helpers (bridge_recipes.md)
            f["--use-transformer-engine-op-fuser"] = ()
            if s.glu_interleave:
                f["--moe-mlp-glu-interleave-size"] = ("32",)
    if r.family == "deepseek_v3":
        groups, topk = DSV3_ROUTING
        f["--moe-router-num-groups"] = (str(groups),)
        f["--moe-router-group-topk"] = (str(topk),)
    if r.family in ("deepseek_v3", "qwen3_next_80b_a3b"):  # their base recipes' one MTP layer
        f["--mtp-num-layers"] = ("1",)
    return f


# --- what launch emits, against the recipe


def emitted_flags(plan: Plan) -> Flags:
    """`planner launch`'s Megatron-LM flags within SCOPE, a layers-per-virtual-stage count read
    as the virtual stages per rank it means, a pipeline layout as Megatron expands it."""
    lay = plan.require_layout()
    out: Flags = {}
    for arg in arguments(plan).flat_args():
        flag, values = arg[0], tuple(arg[1:])
        if flag == "--num-layers-per-virtual-pipeline-stage":
            flag, values = "--num-virtual-stages-per-pipeline-rank", (str(lay.vpp),)
        if flag == "--pipeline-model-parallel-layout":
            values = (pipeline_layout.compact(pipeline_layout.parse(values[0]) or ()),)
        if flag in SCOPE:
            out[flag] = values
    return out


@dataclass(frozen=True)
class Difference:
    flag: str
    recipe: tuple[str, ...] | None  # None: the recipe does not set it
    launch: tuple[str, ...] | None  # None: launch does not emit it

    def text(self) -> str:
        def spell(v: tuple[str, ...] | None) -> str:
            return "-" if v is None else " ".join((self.flag, *v))

        if self.launch is None:
            return f"recipe only: {spell(self.recipe)}"
        if self.recipe is None:
            return f"launch only: {spell(self.launch)}"
        both = f"recipe {' '.join(self.recipe)} / launch {' '.join(self.launch)}"
        return f"differ: {both} ({self.flag})"


def compare(want: Flags, got: Flags) -> list[Difference]:
    return [
        Difference(flag, want.get(flag), got.get(flag))
        for flag in sorted(set(want) | set(got))
        if want.get(flag) != got.get(flag)
    ]


def recipe_connections(r: Recipe) -> str | None:
    m = re.search(r"CUDA_DEVICE_MAX_CONNECTIONS=(\d+)", r.env)
    return m.group(1) if m else None
