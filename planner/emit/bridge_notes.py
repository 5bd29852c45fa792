"""The Megatron-Bridge override's notes and env_vars (planner.emit.bridge): what the plan was timed
with that the override's tables cannot hold, or that a recipe or run_script.py changes after
them, and the environment the plan's settings need (Megatron-Bridge 067f987d)."""

from __future__ import annotations

import shlex

from planner.emit import bridge_model, bridge_precision, common
from planner.emit.megatron import unflagged
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan
from planner.search.rules.context import flash2_head_dims

COMM_OVERLAP = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
"""The class a comm_overlap table must name (`_target_`) where the recipe leaves comm_overlap
unset (recipes/common.py's None): written into a note, not the override. Most recipes set it
(every performance recipe), and there a `_target_` breaks both ways in: run_script.py's Hydra
overrides apply to the recipe as a struct OmegaConf config without that key
(utils/omegaconf_utils.py `parse_hydra_overrides`: "Could not override"), and a merged
--config-file table with it is instantiated whole from the recipe's fields turned to plain dicts
(`_apply_overrides`), whose tp_comm_overlap_cfg then fails CommOverlapConfig's asdict. Without
it, the fields are set on the recipe's own CommOverlapConfig one by one."""


DETERMINISM_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
}
"""What Bridge's deterministic mode asks of the environment (Megatron-Bridge 067f987d
recipes/utils/determinism_utils.py `apply_determinism_overrides`, into env_vars;
training/config.py `_validate_and_apply_deterministic_mode` asserts NCCL_ALGO): the same three
Megatron-LM's determinism.py sets."""

OFFLOAD_ENV = "NVTE_CPU_OFFLOAD_V1"
"""What Bridge's config validation asks of fine-grained activation offloading on Transformer
Engine >= 2.10 (training/config.py: "should be set to 1 to avoid offloading weights"); its
DeepSeek and Nemotron recipes set it in env_vars (a ConfigContainer field, applied before the
runtime config)."""


def attention_backend(job: Job) -> str:
    """TransformerConfig.attention_backend as the plan runs it: Megatron's "auto" (its default,
    as the megatron-args target leaves it), "unfused" without flash attention, and "flash" for
    FlashAttention-2. Bridge sets the YAML's string on the field as it is (omegaconf_utils.py
    `_apply_overrides`), which Megatron-Core's `_set_attention_backend` (language_module.py) does
    not match to its enum: Transformer Engine's NVTE_* variables then choose
    (`environment`), and "auto" leaves it its own choice. Never "flash" for multi-latent
    attention: FlashAttention-2 does not run its unequal head dims and the pinned backend leaves
    Transformer Engine no other (`flash2_head_dims`, which `check_plan` refuses first)."""
    if not job.flash_attention:
        return "unfused"
    if (broken := flash2_head_dims(job, Layout())) is not None:
        raise InputError(f"{broken.field}: {broken.message}")
    return "flash" if job.attention_kernel == "flash2" else "auto"


ATTENTION_ENV = {
    "unfused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0"},
    "flash": {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0"},
}
"""Transformer Engine's attention switches for the override's model.attention_backend (as
Megatron-Core's language_module.py `_set_attention_backend` sets them for its enum, which the
override's string does not reach: `attention_backend`); "auto" needs none."""


MEMORY_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER")
"""The variables of the plan's environment (planner.emit.common.environment) that set the
allocator its memory is priced with: the expandable segments, and NCCL_GRAPH_REGISTER=0, which
Megatron-Core asserts beside them for Transformer Engine's CUDA graphs (cuda_graphs.py
:2193-2199 @d98e8a64). The Megatron-LM targets export them; Bridge writes them into env_vars
(`_env_groups`)."""


CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
"""The hardware queues the plan's environment gives (planner.emit.common.environment): "1"
where TP / CP > 1 before Blackwell needs it, else more. Recipes set their own in env_vars
(Bridge 067f987d perf_recipes/llama/h100/llama3.py:58 and llama31.py:55 "1",
perf_recipes/deepseek/*/deepseek_v3.py 32), which a Megatron-FSDP plan must not inherit as "1"
(training/config.py:1110 asserts it is not) and an EP-overlap plan needs above 1."""


def _connections(plan: Plan) -> dict[str, dict[str, str]]:
    """`CONNECTIONS` as the plan's environment sets it, by why; none where it leaves it unset
    (`notes` says so)."""
    for var in common.environment(plan):
        if var.name == CONNECTIONS and var.value is not None:
            return {var.why: {CONNECTIONS: var.value}}
    return {}


def _env_groups(plan: Plan) -> dict[str, dict[str, str]]:
    """The env_vars the plan needs, by why: `CONNECTIONS` from the plan's environment,
    NVTE_CPU_OFFLOAD_V1=1 for fine-grained offloading (config.py raises without it on
    Transformer Engine >= 2.10), `DETERMINISM_ENV` in deterministic mode, `ATTENTION_ENV` for an
    unfused or FlashAttention-2 plan, the kernel choices the plan's environment sets
    (`common.PLAN_KERNEL_ENV`: the GEMMs' SM margin, TE's fused grouped MLP, MXFP8 on AMD) and,
    where the plan's memory counts expandable segments, the allocator that gives them
    (`MEMORY_ENV`, as the scripts export it). Recipes set their own env_vars whole: the base
    recipes' COMMON_RECIPE_ENV_VARS and the non-FSDP performance recipes hold
    expandable_segments:True (Bridge 067f987d recipes/utils/environment_utils.py:22-33,
    perf_recipes/llama/h100/llama3.py:55-61), which the header's second peak counts
    (`prediction.exports_expandable`), but the Megatron-FSDP ones leave it unset
    (perf_recipes/llama/b200/llama3.py:254, :274-285), so a plan priced with it must set it;
    where the plan is priced without it, a recipe's own value (some add
    graph_capture_record_stream_reuse) is left as it is."""
    groups = _connections(plan)
    memory_env = MEMORY_ENV if plan.job.expandable_segments else ()
    for var in common.environment(plan):
        if var.name in (*common.PLAN_KERNEL_ENV, *memory_env) and var.value is not None:
            groups.setdefault(var.why, {})[var.name] = var.value
    if (backend := attention_backend(plan.job)) in ATTENTION_ENV:
        groups[f"attention_backend {backend}"] = ATTENTION_ENV[backend]
    if plan.require_layout().offload_modules:
        groups["fine-grained activation offloading, Transformer Engine >= 2.10"] = {
            OFFLOAD_ENV: "1"
        }
    if plan.job.deterministic:
        groups["deterministic mode"] = DETERMINISM_ENV
    return groups


def environment(plan: Plan) -> dict[str, str]:
    """Every env_var the plan needs (`_env_groups`), in order."""
    return {k: v for vs in _env_groups(plan).values() for k, v in vs.items()}


def notes(plan: Plan, comm_overlap_whole: str) -> list[str]:
    """The override's notes; `comm_overlap_whole` is the comm_overlap table as one Hydra
    override, for a recipe that leaves the table unset."""
    out = bridge_precision.notes(plan)
    job, lay = plan.job, plan.require_layout()
    if job.arch.has_dsa:
        a = job.arch
        out.append(
            "DeepSeek sparse attention: planned with model.experimental_attention_variant=dsa, "
            f"dsa_indexer_n_heads={a.dsa_indexer_n_heads}, dsa_indexer_head_dim="
            f"{a.dsa_indexer_head_dim}, dsa_indexer_topk={a.dsa_indexer_topk}: the recipe's "
            "model must set them"
        )
    window = bridge_model.window_note(job.arch)
    if window is not None:
        out.append(window)
    if job.log_grad_stats:
        out.append("gradient statistics: set logger.log_params_norm=true too (planned with both)")
    if lay.zero_stage >= 2 and job.main_grad_dtype == "fp32":
        out.append(
            "Megatron-FSDP reduces gradients in ddp.megatron_fsdp_main_grads_dtype (unset: the "
            f"parameters' {job.params_dtype}), not grad_reduce_in_fp32: set it to torch.float32 "
            "in the recipe "
            "(planned with fp32 gradients)"
        )
    if lay.zero_stage >= 2 and job.fsdp_grad_comm_dtype is not None:
        name = bridge_precision.TORCH_DTYPES[job.fsdp_grad_comm_dtype]
        out.append(
            f"set ddp.megatron_fsdp_grad_comm_dtype = {name} in the recipe (planned with "
            f"Megatron-FSDP's gradient buckets in {job.fsdp_grad_comm_dtype})"
        )
    out += unflagged(plan)
    out.append(
        "a recipe that leaves comm_overlap unset (None, as recipes/common.py does) takes it whole: "
        f"{shlex.quote(comm_overlap_whole)} in place of the comm_overlap lines (in the "
        f"file, _target_: {COMM_OVERLAP} in its table)"
    )
    groups = _env_groups(plan)
    if groups:
        out.append(
            "env_vars "
            + "; ".join(
                f"{', '.join(f'{k}={v}' for k, v in vs.items())} ({why})"
                for why, vs in groups.items()
            )
            + ": the env_vars table (--config-file) and the ++env_vars lines set them over those "
            "of the recipe, as defaults: a value already exported where the run starts wins "
            "(training/config.py apply_environment_variables, os.environ.setdefault)"
        )
    if lay.zero_stage >= 2 and not lay.use_torch_fsdp2 and not _connections(plan):
        out.append(
            f"{CONNECTIONS} must be unset or above 1 under Megatron-FSDP (training/config.py:1110 "
            "asserts it): drop it from the env_vars of the recipe where it sets 1"
        )
    if job.precision == "bf16" and job.optimizer == "adam" and not job.precision_aware_optimizer:
        out.append(
            "run_script.py --compute_dtype bf16 turns optimizer.use_precision_aware_optimizer on "
            "after these overrides (planned without it"
            + (
                "; at ZeRO 0 Megatron-Core refuses it: use a recipe script)"
                if lay.zero_stage == 0
                else ")"
            )
        )
    interleaved = lay.dp > 1 and lay.pp > 1 and lay.vpp > 1
    if interleaved and job.optimizer == "adam" and not job.block_scaled:
        out.append(
            "set_post_overrides in run_script.py (recipes without a flat perf recipe) turns "
            "overlap_param_gather_with_optimizer_step on after these overrides here (planned "
            "off): use a recipe script, or a flat perf recipe"
        )
    return out
