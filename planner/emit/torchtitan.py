"""The job config TOML torchtitan's train.py reads (`--job.config_file`), for a plan with
framework = "torchtitan".

Section and field names are those of torchtitan/config/job_config.py at pytorch/torchtitan
e347b1e5 (planner.inputs.torchtitan.TORCHTITAN_COMMIT; its schema,
planner/inputs/torchtitan_job_config_schema.json, holds every field of that file, and the
emitted TOML is checked against it):
- [parallelism] data_parallel_replicate_degree x data_parallel_shard_degree x
  context_parallel_degree x tensor_parallel_degree x pipeline_parallel_degree = the GPUs;
  fsdp_reshard_after_forward; enable_async_tensor_parallel; pipeline_parallel_schedule and
  pipeline_parallel_microbatch_size; module_fqns_per_model_part spells the plan's pipeline split
  stage by stage (tok_embeddings, layers.i, norm and output), so torchtitan runs planner's split
  (its stage count fixes the stages per rank); expert_parallel_degree,
  expert_tensor_parallel_degree, expert_parallel_comm_backend.
- [training] local_batch_size is the per-data-parallel-rank batch: with PP one pipeline
  schedule's, global / (dp x `[torchtitan] gradient_accumulation_steps` k) (torchtitan splits it
  into micro-batches of pipeline_parallel_microbatch_size and runs k schedules a step, train.py
  :561), without PP the micro-batch (train.py accumulates global / (local x dp) of them).
- [activation_checkpoint] mode none | full | selective with selective_ac_option "op" or "N".
- [validation] enable, local_batch_size and seq_len (job_config.py:951, :960, :963) where the
  plan validates (`[torchtitan] validation_batch`, whose forward the memory counts).
- [debug] deterministic, and moe_force_load_balance for forced-balance routing (the models
  that read it: `torchtitan_toml.FORCE_BALANCE_MODELS`; gpt_oss's is refused, naming the
  module target).
- [compile] (components: "model" with compile, "loss" with compile_loss),
  [quantize.linear.float8] (with model.converters = ["quantize.linear.float8"], the name
  e347b1e5 registers the converter under; no recipe_name for tensorwise, its recipe-less path,
  which alone takes the FSDP float8 all-gather). Its filter_fqns keep the output layer in
  bf16 and, in an MoE model, the router's gate (`router.gate`, as torchtitan's own MoE TOMLs
  do: deepseek_v3/train_configs/deepseek_v3_671b.toml:74, llama4/train_configs/
  llama4_17bx16e.toml:67), which planner times in bf16 (`planner.inputs.torchtitan.ROUTER_GATE`).
- The routed experts are grouped GEMMs, which that converter leaves in bf16, as planner then
  times them; with `[torchtitan] float8_experts` the grouped-GEMM converter too
  (model.converters += "quantize.grouped_mm.float8", [quantize.grouped_mm.float8] fqns =
  ["experts"]: `planner.inputs.torchtitan.FLOAT8_EXPERTS`), which e347b1e5 asserts without
  pipelining and context parallelism (components/quantization/float8.py:193-198, refused by
  field, naming the module target).
What e347b1e5 raises on and b5bcd76c runs is refused (`era_refusal`), naming the module target.
`planner.inputs.torchtitan_config` reads the file back into the same plan (`planner check
--torchtitan-config FILE`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.emit.common import SCHEDULE, comment_block
from planner.emit.prediction import HEADROOM, header, predict
from planner.emit.torchtitan_validation import toml_table
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.plan_writer import toml_value
from planner.inputs.torchtitan import (
    DEEPEP_MODELS,
    MODELS,
    ROUTER_GATE,
    TOML_REMOVED,
    TORCHTITAN_COMMIT,
    TorchtitanSection,
    no_flavor,
    zoo_flavor,
)
from planner.inputs.torchtitan_float8 import (
    EXPERT_FQNS,
    FLOAT8,
    GROUPED_FLOAT8,
    grouped_float8_problem,
)
from planner.inputs.torchtitan_toml import FORCE_BALANCE_MODELS as FORCE_BALANCE
from planner.inputs.torchtitan_toml import plan_era_problem

GPU_LINE = "planner-gpu: "
"""A header comment naming the catalog GPU, which torchtitan's config has no field for (read
back by `planner check --torchtitan-config` when --gpu is not given)."""


def stage_modules(stage: str, first_layer: int) -> list[str]:
    """torchtitan module names of one pipeline stage in planner's stage string (E, t, L)."""
    out = ["tok_embeddings"] if "E" in stage else []
    n = stage.count("t")
    out += [f"layers.{first_layer + i}" for i in range(n)]
    if "L" in stage:
        out += ["norm", "output"]
    return out


def routing_refusal(plan: Plan, commit: str) -> InputError | None:
    """The refusal of a plan whose MoE routing groups are not its model's: torchtitan's flavor
    builds the router with its own (MoE num_expert_groups / num_limited_groups at b5bcd76c),
    which neither launch target writes, so the run would route as the flavor does and not as
    the plan was timed (group-limited routing changes the dispatch, `planner.model.dispatch`)."""
    job, arch = plan.job, plan.job.arch
    given = (job.moe_router_num_groups, job.moe_router_group_topk)
    own = (arch.moe_router_num_groups, arch.moe_router_group_topk)
    if given == own:
        return None
    where = str(plan.path) if plan.path else "<plan>"
    return InputError(
        f"{where}: training.moe_router_num_groups: groups {given[0]}, group top-k {given[1]} "
        f"(the model's: {own[0]}, {own[1]}): torchtitan {commit[:8]} routes with its flavor's "
        "own groups, which this launch does not change; drop the override to launch it"
    )


def era_refusal(plan: Plan, name: str) -> InputError | None:
    """What torchtitan e347b1e5 (the TOML era) refuses of a plan that `check` takes, which the
    module target's torchtitan (b5bcd76c) runs (`torchtitan_toml.era_problem`, in the plan's
    field names)."""
    problem = plan_era_problem(plan.job, plan.require_layout(), name)
    if problem is None:
        return None
    field, value, why = problem
    where = str(plan.path) if plan.path else "<plan>"
    return InputError(
        f"{where}: {field}: {value}: {why}; write the module (launch --target torchtitan-module)"
    )


def sections(plan: Plan, checkpoint_interval: int) -> dict[str, dict[str, Any]]:
    """The TOML tables, by dotted name."""
    job, lay = plan.job, plan.require_layout()
    titan = job.titan
    where = str(plan.path) if plan.path else "<plan>"
    zoo = zoo_flavor(job.arch)
    if zoo is None:
        raise InputError(
            f"{where}: model: torchtitan has no flavor of {job.arch.name!r}: "
            f"{no_flavor(job.arch)}; it runs {', '.join(sorted(MODELS))} (torchtitan/models at "
            f"{TORCHTITAN_COMMIT[:8]}, each chosen by the model's shape, not its name)"
        )
    refused = routing_refusal(plan, TORCHTITAN_COMMIT)
    if refused is not None:
        raise refused
    if lay.cp > 1 and not titan.cp_load_balance:
        raise InputError(
            f"{where}: torchtitan.cp_load_balance: false is context_parallel_load_balancer = "
            "None, which a TOML file cannot hold; pass "
            "--parallelism.context_parallel_load_balancer on train.py's command line instead"
        )
    if titan.loss_chunks > 1:
        raise InputError(
            f"{where}: torchtitan.loss_chunks: {titan.loss_chunks}: torchtitan "
            f"{TORCHTITAN_COMMIT[:8]} computes the loss on the whole logits (its chunked loss "
            "came with the Python configurations): set loss_chunks = 1, or write the module "
            "(launch --target torchtitan-module)"
        )
    if titan.num_mtp_layers:
        raise InputError(
            f"{where}: torchtitan.num_mtp_layers: {titan.num_mtp_layers}: torchtitan "
            f"{TORCHTITAN_COMMIT[:8]} has no multi-token prediction (it came with the Python "
            "configurations, b5bcd76c models/deepseek_v3/mtp.py): write the module (launch "
            "--target torchtitan-module)"
        )
    if job.attention_kernel == "flash2":
        raise InputError(
            f"{where}: training.attention_kernel: flash2 is torchtitan before Oct 2025; at "
            f"{TORCHTITAN_COMMIT[:8]} its SDPA tries cuDNN attention first "
            "(torchtitan/models/attention.py, no setting), which attention_kernel fused models"
        )
    if job.deterministic and not titan.deterministic_fill:
        raise InputError(
            f"{where}: torchtitan.deterministic_fill: false with training.deterministic: "
            f"torchtitan {TORCHTITAN_COMMIT[:8]}'s debug.deterministic leaves PyTorch's NaN fill "
            "of empty tensors on (distributed/utils.py:114-124; da38566d turned it off), which "
            "no TOML key turns off: set deterministic_fill = true, or write the module (launch "
            "--target torchtitan-module)"
        )
    if job.optimizer_state_dtype == "bf16":
        raise InputError(
            f"{where}: training.optimizer_state_dtype: bf16: torchtitan {TORCHTITAN_COMMIT[:8]} "
            "keeps AdamW's moments in fp32 (optimizer.implementation for-loop, foreach or fused, "
            "components/optimizer.py:300); write the module (launch --target torchtitan-module: "
            'b5bcd76c\'s "fused_opt_states_bf16")'
        )
    name, flavor = MODELS[zoo]
    refused = era_refusal(plan, name) or float8_experts_refusal(plan)
    if refused is not None:
        raise refused
    if job.arch.is_moe and job.moe_router_force_load_balancing and name not in FORCE_BALANCE:
        raise InputError(
            f"{where}: training.moe_router_force_load_balancing: true, but torchtitan "
            f"{TORCHTITAN_COMMIT[:8]}'s {name} ignores debug.moe_force_load_balance (only "
            f"{', '.join(FORCE_BALANCE)} read it) and would route as learned, which the plan did "
            "not time: write the module (launch --target torchtitan-module), or set it false"
        )
    deepep = lay.ep > 1 and lay.moe_token_dispatcher_type == "flex"
    if deepep and name not in DEEPEP_MODELS:
        raise InputError(
            f"{where}: parallel.moe_token_dispatcher_type: flex (DeepEP), but torchtitan "
            f"{TORCHTITAN_COMMIT[:8]}'s {name} ignores expert_parallel_comm_backend (only "
            f"{' and '.join(DEEPEP_MODELS)} read it) and would run the all-to-all the plan did "
            'not time: write the module (launch --target torchtitan-module), or set "alltoall"'
        )
    schedule = {flag: value for flag, _, value in SCHEDULE}
    lr, min_lr = float(schedule["--lr"]), float(schedule["--min-lr"])
    warmup, iters = int(schedule["--lr-warmup-iters"]), int(schedule["--train-iters"])
    rep = titan.dp_replicate
    mbs = lay.micro_batch_size
    k = titan.gradient_accumulation_steps  # pipeline schedules a step (1 without PP: rules)
    local = job.global_batch_size // (lay.dp * k) if lay.pp > 1 else mbs
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": rep,
        "data_parallel_shard_degree": lay.dp // rep,
        "fsdp_reshard_after_forward": titan.reshard_after_forward,
        "tensor_parallel_degree": lay.tp,
        "disable_loss_parallel": job.cross_entropy == "gathered",
        "enable_async_tensor_parallel": titan.async_tp,
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
        "expert_parallel_degree": lay.ep,
        "expert_tensor_parallel_degree": lay.expert_tp if lay.ep > 1 else 1,
    }
    if lay.pp > 1:
        parallelism["pipeline_parallel_schedule"] = titan.schedule(lay.vpp)
        # e347b1e5 job_config.py:420 turns DualPipeV's EP / PP overlap on by default, which
        # planner does not model and which raises beside activation checkpointing
        # (distributed/dual_pipe_v.py:32-49): written off
        parallelism["pipeline_parallel_expert_parallel_overlap"] = False
        parallelism["pipeline_parallel_microbatch_size"] = mbs
        # in stage order: torchtitan places them itself, stages r and 2 pp - 1 - r on rank r
        # under its V schedules (the layout's placement, Layout.v_stages), r + c x pp otherwise
        parts, start = [], 0
        for stage in lay.stages(job.arch.num_layers):
            parts.append(stage_modules(stage, start))
            start += stage.count("t")
        parallelism["module_fqns_per_model_part"] = parts
    if lay.cp > 1:
        parallelism["context_parallel_load_balancer"] = "headtail"
    if lay.ep > 1 and lay.moe_token_dispatcher_type == "flex":
        parallelism["expert_parallel_comm_backend"] = "deepep"
    model: dict[str, Any] = {
        "name": name,
        "flavor": flavor,
        "hf_assets_path": "./assets/hf/SET-ME",
    }
    out: dict[str, dict[str, Any]] = {
        "job": {"dump_folder": "./outputs", "description": plan.path.stem if plan.path else "job"},
        "metrics": {"log_freq": 10},
        "model": model,
        "optimizer": {
            "name": "AdamW",
            "lr": lr,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-8,
            "weight_decay": 0.1,
        },
        "lr_scheduler": {
            "warmup_steps": warmup,
            "decay_type": "cosine",
            "min_lr_factor": min_lr / lr,
        },
        "training": {
            "local_batch_size": local,
            "global_batch_size": job.global_batch_size,
            "seq_len": job.seq_length,
            "max_norm": 1.0,
            "steps": iters,
            "dataset": "c4_test",
            "mixed_precision_param": "bfloat16",
            "mixed_precision_reduce": "float32",
        },
        "parallelism": parallelism,
        "checkpoint": {"enable": True, "folder": "checkpoint", "interval": checkpoint_interval},
        "activation_checkpoint": _activation_checkpoint(plan),
        "compile": _compile(titan),
    }
    if titan.validation_batch:  # the validator after each step (planner.model.titan_validation)
        out["validation"] = toml_table(plan)
    if job.deterministic:  # torch's deterministic algorithms (model.determinism)
        out["debug"] = {"deterministic": True}
    if job.arch.is_moe and job.moe_router_force_load_balancing:  # round-robin routing
        out.setdefault("debug", {})["moe_force_load_balance"] = True
    if job.precision == "fp8":
        model["converters"] = [FLOAT8]  # e347b1e5's registry name
        float8: dict[str, Any] = {
            "enable_fsdp_float8_all_gather": titan.float8_all_gather,
            "precompute_float8_dynamic_scale_for_fsdp": titan.float8_all_gather,
            # the router's gate stays bf16, as planner times it (ROUTER_GATE)
            "filter_fqns": ["output", ROUTER_GATE] if job.arch.is_moe else ["output"],
        }
        if job.fp8_recipe != "tensorwise":
            # tensorwise is the recipe-less path: e347b1e5 float8.py asserts a recipe_name is
            # never given with enable_fsdp_float8_all_gather
            float8 = {"recipe_name": job.fp8_recipe, **float8}
        out["quantize.linear.float8"] = float8
        if titan.float8_experts:
            model["converters"].append(GROUPED_FLOAT8)
            out["quantize.grouped_mm.float8"] = {"fqns": list(EXPERT_FQNS)}
    return out


def float8_experts_refusal(plan: Plan) -> InputError | None:
    """`[torchtitan] float8_experts` where e347b1e5's grouped-GEMM float8 converter asserts:
    with pipelining or context parallelism ("Float8 MoE training prototype does not yet support
    pipeline parallelism" / "context parallelism", components/quantization/float8.py:193-198);
    b5bcd76c runs them (its converter has no such assert, float8.py:216-266)."""
    job, lay = plan.job, plan.require_layout()
    problem = grouped_float8_problem(lay.pp, lay.cp, "pp", "cp")
    if not job.titan.float8_experts or problem is None:
        return None
    where = str(plan.path) if plan.path else "<plan>"
    return InputError(
        f"{where}: torchtitan.float8_experts: true: {problem}; write the module (launch "
        "--target torchtitan-module)"
    )


def _activation_checkpoint(plan: Plan) -> dict[str, Any]:
    lay = plan.require_layout()
    every = plan.job.titan.selective_layer_every
    if lay.recompute == "none":
        return {"mode": "none"}
    if lay.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    if every is not None:
        return {"mode": "selective", "selective_ac_option": str(every)}
    return {"mode": "full"}


def shard_gather(plan: Plan) -> Plan:
    """The plan as e347b1e5 runs it: enable_fsdp_float8_all_gather takes effect only where
    data_parallel_shard_degree > 1 (components/quantization/float8.py:87-90, parallel_dims.py:
    322-323), so at shard degree 1 the FSDP all-gather (over cp) is bf16 and the file writes it
    off, its header predicting that."""
    job, lay = plan.job, plan.require_layout()
    if not job.titan.float8_all_gather or lay.dp // job.titan.dp_replicate > 1:
        return plan
    titan = job.titan.model_copy(update={"float8_all_gather": False})
    return replace(plan, job=replace(job, torchtitan=titan))


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The whole TOML file, headed by the prediction (of `shard_gather`'s plan)."""
    plan = shard_gather(plan)
    p = predict(plan, headroom_pct)
    tables = sections(plan, p.checkpoint_interval_steps)
    tables["job"]["description"] = job_name
    text = comment_block(
        [
            *header(plan, "torchtitan", job_name, p),
            f"torchtitan job config (torchtitan/config/job_config.py @ {TORCHTITAN_COMMIT}):",
            "run: torchrun ... -m torchtitan.train --job.config_file THIS_FILE (see the scripts "
            "planner launch --target torchtitan writes beside it); set model.hf_assets_path "
            "and training.dataset",
            f"for torchtitan at that commit or before it: {TOML_REMOVED} reads no TOML (a "
            "Python config function, --module / --config: launch --target torchtitan-module)",
            *(f"note: {n}" for n in plan.launch_notes),
            f"{GPU_LINE}{plan.job.cluster.gpu.name}",
        ]
    )
    for name, items in tables.items():
        text += f"\n[{name}]\n"
        text += "".join(f"{k} = {toml_value(v)}\n" for k, v in items.items())
    return text


def _compile(titan: TorchtitanSection) -> dict[str, Any]:
    """The compile table: on where the plan compiles the model (compile) or the loss
    (compile_loss), with those components (e347b1e5 job_config.py's compile.components;
    components/loss.py:33-35 compiles the loss where "loss" is among them)."""
    parts = [name for name, on in (("model", titan.compile), ("loss", titan.compile_loss)) if on]
    return {"enable": bool(parts), "components": parts or ["model", "loss"]}
