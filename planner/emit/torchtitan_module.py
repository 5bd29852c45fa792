"""torchtitan's Python configuration for a plan with framework = "torchtitan": a module holding
one config function, for torchtitan since its move from TOML job configs (9810191b, 2026-02-23;
names and fields of pytorch/torchtitan b5bcd76c, HEAD_COMMIT; facts with path:line in
benchmarks/data/torchtitan_head_config.md; tests/data/torchtitan_config_schema.json holds the
classes and functions the emitted module uses, and the test checks it against them).

The function starts from the model's baseline (`BASELINES`: its config_registry function, which
sets the tokenizer folder, dataset, loss and logging) and sets what the plan decides:
- `model_spec`: the flavor's `model_registry(...)`, with the float8 converter (rowwise recipes;
  the LM head, `lm_head`, kept in bf16 as the TOML's filter did, and in an MoE model the
  router's gate, `router.gate`, as torchtitan's deepseek_v3_671b_float8 keeps it,
  deepseek_v3/config_registry.py:261-264: planner times it in bf16), and with `[torchtitan]
  float8_experts` the routed experts' Float8GroupedExpertsConverter (float8.py:216-266; without
  it the experts, grouped GEMMs and not Linear, run in bf16, as planner then times them), the
  DeepEP dispatcher for a plan with the flex dispatcher, FlexAttention for gpt-oss under CP (its
  default, varlen, does not run CP);
- `parallelism`: a whole ParallelismConfig (the baseline's presets, DeepSeek-V3's ep 2, Llama 3
  70B's tp 8, do not leak in): the degrees, reshard_after_forward, the schedule, its
  micro-batches (num_pp_microbatches: one schedule's per-rank batch over the micro-batch size;
  num_tokens_per_train_step over those tokens x dp is the step's schedules, `[torchtitan]
  gradient_accumulation_steps`, trainer.py:409-428) and the plan's stages
  (module_fqns_per_model_part, the last module now `lm_head`), the CP balancer;
- `training`: tokens per micro-batch per DP rank (micro-batch x sequence), per step (global
  batch x sequence), the context length, the steps; CUDA graphs off (on by default at HEAD; the
  prediction has no graph pool, and PP and EP refuse them);
- `activation_checkpoint` (None, SelectiveAC per-op, FullAC), `compile` (async TP only with
  compile, as torchtitan requires), optimizer, LR schedule, checkpoint interval, determinism,
  forced-balance routing (debug.moe_force_load_balance, round-robin: every MoE layer's router,
  models common decoder.py:233-236);
- the validator (`config.validator.enable`) where the plan validates: on the training's batches,
  the only ones it runs (`planner.emit.torchtitan_validation`: another batch or length refused);
- the profiler off (`config.profiler.enable_profiling = False`): llama3_8b() and llama3_70b()
  turn it on (llama3/config_registry.py:203-206, 276-279: a traced step every 100, with a
  trace written per rank, tools/profiler.py), which the predicted steady-state step has not.

What that torchtitan cannot run is refused, naming the plan's field: expert TP (EP borrows the TP
ranks there), every-N-layers checkpointing, the tensorwise float8 recipe and its FSDP float8
all-gather, float8 experts with DeepEP (components/quantization/utils.py:33-64 raises), a
context beyond the flavor's RoPE table (a TP degree that does not divide the KV heads
no plan has: `rules.torchtitan_shapes.heads`). The loss is the plan's (`[torchtitan] loss_chunks`):
ChunkedLossWrapper over that many chunks, as the baselines run it with 8, or at 1 the whole logits'
CrossEntropyLoss, which the prediction then counts. The prediction in the header is for the
training code planner models (e347b1e5's, causal SDPA, with the plan's loss); the header says how
this torchtitan differs. The header's `# planner-gpu:` line names the GPU, and `planner check
--torchtitan-config planner_job.py` reads the module back into its plan
(`planner.inputs.torchtitan_module`).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.emit.common import SCHEDULE, comment_block
from planner.emit.prediction import HEADROOM, header, predict
from planner.emit.torchtitan import GPU_LINE, routing_refusal, stage_modules
from planner.emit.torchtitan_validation import module_refusal
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan import (
    HEAD_CONTEXT,
    HEAD_GONE,
    MODELS,
    ROUTER_GATE,
    no_flavor,
    zoo_flavor,
)
from planner.inputs.torchtitan_float8 import DEEPEP_GROUPED

HEAD_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
"""pytorch/torchtitan commit (2026-08-21) whose configuration API the module follows."""
FUNCTION = "planner_job"
"""The module's (and its config function's) name: `--module planner_job --config planner_job`."""
MODULE_FILE = f"{FUNCTION}.py"


@dataclass(frozen=True)
class Baseline:
    function: str
    """The config_registry function the configuration starts from."""
    max_context: int
    """The flavor's RoPE table (torchtitan refuses a longer max_context_length)."""
    hf_folder: str | None = None
    """A tokenizer folder to set where the baseline is another flavor's."""


BASELINES = {
    "llama3.1-8b": Baseline("llama3_8b", HEAD_CONTEXT["llama3.1-8b"]),
    "llama3.1-70b": Baseline("llama3_70b", HEAD_CONTEXT["llama3.1-70b"]),
    "llama3.1-405b": Baseline(
        "llama3_70b", HEAD_CONTEXT["llama3.1-405b"], "./assets/hf/Llama-3.1-405B"
    ),
    "deepseek-v2-lite": Baseline("deepseek_v3_16b", HEAD_CONTEXT["deepseek-v2-lite"]),
    "deepseek-v3": Baseline("deepseek_v3_671b", HEAD_CONTEXT["deepseek-v3"]),
    "qwen3-30b-a3b": Baseline("qwen3_30b_a3b", HEAD_CONTEXT["qwen3-30b-a3b"]),
    "qwen3-235b-a22b": Baseline(
        "qwen3_30b_a3b", HEAD_CONTEXT["qwen3-235b-a22b"], "./assets/hf/Qwen3-235B-A22B"
    ),
    "gpt-oss-20b": Baseline("gpt_oss_20b", HEAD_CONTEXT["gpt-oss-20b"]),
    "gpt-oss-120b": Baseline("gpt_oss_120b", HEAD_CONTEXT["gpt-oss-120b"]),
}
"""planner zoo name (the one `planner.inputs.torchtitan.zoo_flavor` finds by the model's shape)
-> its baseline (b5bcd76c: torchtitan/models/<model>/config_registry.py, and the RoPE maxima of
__init__.py's model_registry flavors); the model and flavor are
`planner.inputs.torchtitan.MODELS`' (the same names at b5bcd76c). Qwen3 235B-A22B has no
baseline of its own: the 30B-A3B one with its flavor, the same vocabulary. Llama 3.1 405B starts
from the 70B one with its own tokenizer folder (the same vocabulary): `llama3_405b` builds a
float8 converter inside `model_registry` (Float8LinearConverter's constructor raises without
torchao or below SM89), before the module could replace its model_spec."""


AC = {"none": ("None", None), "selective": ("SelectiveAC.Config()", "SelectiveAC")}
"""recompute -> (activation_checkpoint's value, the class it imports); else full."""
FULL_AC = ("FullAC.Config()", "FullAC")

DIFFERENCES = (
    "the prediction is for the training code planner models (torchtitan e347b1e5's, with the "
    "plan's loss: [torchtitan] loss_chunks); this torchtitan runs FlexAttention (varlen for "
    "gpt-oss) with per-document masks on packed sequences, and FSDP even at shard degree 1"
)


def _refuse(plan: Plan, field: str, why: str, value: str | None = None) -> InputError:
    """`FILE: field: torchtitan b5bcd76c <why>` ("has no ..."); with `value`, `FILE: field:
    value: <why>`, the sentence naming torchtitan itself."""
    where = str(plan.path) if plan.path else "<plan>"
    if value is not None:
        return InputError(f"{where}: {field}: {value}: {why}")
    return InputError(f"{where}: {field}: torchtitan {HEAD_COMMIT[:8]} {why}")


def _checked(plan: Plan) -> tuple[Baseline, str, str]:
    """The plan's baseline, model and flavor, or the InputError for what this torchtitan cannot
    run."""
    job, lay, titan = plan.job, plan.require_layout(), plan.job.titan
    zoo = zoo_flavor(job.arch)
    if zoo is None:
        raise _refuse(
            plan,
            "model",
            f"has no flavor of {job.arch.name!r}: {no_flavor(job.arch)}; it runs "
            f"{', '.join(BASELINES)} (each chosen by the model's shape, not its name)",
        )
    model, flavor = MODELS[zoo]
    base = BASELINES.get(zoo)
    if base is None:
        why = HEAD_GONE.get(model, "which has no config_registry baseline there")
        raise _refuse(
            plan,
            "model",
            f"has no {model} {flavor} ({job.arch.name!r} is that flavor, {why}): it runs "
            f"{', '.join(BASELINES)}; "
            "write the TOML job config (launch --target torchtitan)",
        )
    refused = routing_refusal(plan, HEAD_COMMIT)
    if refused is not None:
        raise refused
    if job.cross_entropy == "gathered" and lay.tp > 1:
        raise _refuse(
            plan,
            "training.cross_entropy",
            "runs the loss vocab-parallel under TP (components/loss.py:66-75, no "
            'disable_loss_parallel): "gathered" is the TOML target\'s (e347b1e5); set "pytorch"',
        )
    if lay.ep > 1 and lay.expert_tp > 1:
        raise _refuse(
            plan,
            "parallel.etp",
            "has no expert tensor parallelism (its EP takes the TP ranks): set etp = 1",
        )
    if titan.selective_layer_every is not None:
        raise _refuse(
            plan,
            "torchtitan.selective_layer_every",
            "checkpoints per op or whole (no every-N-layers option)",
        )
    if job.precision == "fp8" and job.fp8_recipe not in ("rowwise", "rowwise_with_gw_hp"):
        raise _refuse(
            plan,
            "training.fp8_recipe",
            f"has no float8 recipe {job.fp8_recipe!r} (rowwise or rowwise_with_gw_hp)",
        )
    if titan.float8_all_gather:
        raise _refuse(plan, "torchtitan.float8_all_gather", "has no FSDP float8 all-gather")
    if titan.float8_experts and lay.ep > 1 and lay.moe_token_dispatcher_type == "flex":
        raise _refuse(plan, "torchtitan.float8_experts", DEEPEP_GROUPED, "true")
    if job.precision not in ("bf16", "fp8"):
        why = f"planner writes torchtitan {HEAD_COMMIT[:8]}'s module for bf16 and fp8 only"
        raise _refuse(plan, "training.precision", why, job.precision)
    if job.attention_kernel == "flash2":
        raise _refuse(plan, "training.attention_kernel", "runs no SDPA flash2 for LMs")
    if job.deterministic and titan.deterministic_fill:
        raise _refuse(
            plan,
            "torchtitan.deterministic_fill",
            f"torchtitan {HEAD_COMMIT[:8]}'s debug.deterministic turns PyTorch's NaN fill of "
            "empty tensors off (distributed/utils.py:201-206, since da38566d) and no field keeps "
            "it on: set deterministic_fill = false, or write the TOML job config (launch --target "
            "torchtitan)",
            "true with training.deterministic",
        )
    refused = module_refusal(plan, HEAD_COMMIT)
    if refused is not None:
        raise refused
    if job.seq_length > base.max_context:
        raise _refuse(
            plan,
            "training.seq_length",
            f"refuses a context above the {flavor} flavor's RoPE table ({base.max_context:,})",
        )
    return base, model, flavor


def _model_spec(plan: Plan, model: str, flavor: str) -> tuple[str, list[str]]:
    """The model_registry call, and the imports it needs."""
    job, lay = plan.job, plan.require_layout()
    args, imports = [repr(flavor)], []
    if job.precision == "fp8":
        compiled = f"model_compile_enabled={job.titan.compile}"
        kept = ["lm_head", ROUTER_GATE] if job.arch.is_moe else ["lm_head"]
        converters = [
            f"Float8LinearConverter.Config(recipe_name={job.fp8_recipe!r}, "
            f"filter_fqns={kept!r}, {compiled})"
        ]
        names = "Float8LinearConverter"
        if job.titan.float8_experts:
            converters.append(f"Float8GroupedExpertsConverter.Config({compiled})")
            names = "Float8GroupedExpertsConverter, Float8LinearConverter"
        args.append(f"converters=[{', '.join(converters)}]")
        imports.append(f"from torchtitan.components.quantization import {names}")
    if lay.ep > 1 and lay.moe_token_dispatcher_type == "flex":
        args.append("moe_comm_backend='deepep'")
    if model == "gpt_oss" and lay.cp > 1:
        args.append("attn_backend='flex'")
    if job.titan.num_mtp_layers:  # deepseek_v3's MTP depths (__init__.py:616-628)
        args.append(f"num_mtp_layers={job.titan.num_mtp_layers}")
    return f"model_registry({', '.join(args)})", imports


def _parallelism(plan: Plan) -> list[str]:
    """ParallelismConfig's keyword arguments."""
    job, lay, titan = plan.job, plan.require_layout(), plan.job.titan
    out = [
        f"data_parallel_replicate_degree={titan.dp_replicate}",
        f"data_parallel_shard_degree={lay.dp // titan.dp_replicate}",
        f"fsdp_reshard_after_forward={titan.reshard_after_forward!r}",
        f"tensor_parallel_degree={lay.tp}",
        f"pipeline_parallel_degree={lay.pp}",
        f"context_parallel_degree={lay.cp}",
        f"expert_parallel_degree={lay.ep}",
    ]
    if lay.pp > 1:
        parts, start = [], 0  # in stage order: torchtitan places them (Layout.v_stages)
        for stage in lay.stages(job.arch.num_layers):
            names = ["lm_head" if m == "output" else m for m in stage_modules(stage, start)]
            parts.append(names)
            start += stage.count("t")
        # one schedule's per-rank batch: the step runs gradient_accumulation_steps of them
        # (trainer.py:409-428: num_tokens_per_train_step over the schedule's tokens x dp)
        local = job.global_batch_size // (lay.dp * titan.gradient_accumulation_steps)
        out += [
            f"pipeline_parallel_schedule={titan.schedule(lay.vpp)!r}",
            f"num_pp_microbatches={local // lay.micro_batch_size}",
            f"module_fqns_per_model_part={parts!r}",
        ]
    if lay.cp > 1 and not titan.cp_load_balance:
        out.append("context_parallel_load_balancer=None")
    return out


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The whole module, headed by the prediction."""
    base, model, flavor = _checked(plan)
    job, lay, titan = plan.job, plan.require_layout(), plan.job.titan
    p = predict(plan, headroom_pct)
    spec, spec_imports = _model_spec(plan, model, flavor)
    ac, ac_class = AC.get(lay.recompute, FULL_AC)
    ac_module = "torchtitan.distributed.activation_checkpoint"
    ac_imports = [f"from {ac_module} import {ac_class}"] if ac_class else []
    schedule = {flag: value for flag, _, value in SCHEDULE}
    lr, min_lr = float(schedule["--lr"]), float(schedule["--min-lr"])
    seq = job.seq_length
    async_tp = titan.async_tp and titan.compile
    parts = [name for name, on in (("model", titan.compile), ("loss", titan.compile_loss)) if on]
    loss_imports = "CrossEntropyLoss"
    if titan.loss_chunks > 1:
        loss_imports = "ChunkedLossWrapper, CrossEntropyLoss"
    loss_import = f"from torchtitan.components.loss import {loss_imports}"
    if titan.num_mtp_layers:  # MTPLoss (models/deepseek_v3/mtp.py:321-406)
        loss_import = f"from torchtitan.models.{model}.mtp import MTPLoss"
    imports = sorted(
        {
            "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw",
            loss_import,
            "from torchtitan.models.common.config_utils import decoder_vocab_size",
            "from torchtitan.config import CompileConfig, ParallelismConfig",
            f"from torchtitan.models.{model} import model_registry",
            f"from torchtitan.models.{model}.config_registry import {base.function}",
            "from torchtitan.trainer import Trainer",
            *spec_imports,
            *ac_imports,
        }
    )
    body = [
        f"config = {base.function}()",
        f"config.model_spec = {spec}",
        "config.parallelism = ParallelismConfig(",
        *(f"    {a}," for a in _parallelism(plan)),
        ")",
        f"config.training.num_tokens_per_microbatch_per_dp_rank = {lay.micro_batch_size * seq}",
        f"config.training.num_tokens_per_train_step = {job.global_batch_size * seq}",
        f"config.training.max_context_length = {seq}",
        f"config.training.steps = {int(schedule['--train-iters'])}",
        "config.training.disable_cuda_graphs = True",
        f"config.activation_checkpoint = {ac}",
        f"config.compile = CompileConfig(enable={bool(parts)}, "
        + (f"components={parts!r}, " if parts else "")
        + f"enable_async_tensor_parallel={async_tp})",
        f"config.optimizer = default_adamw(lr={lr!r})",
        *(  # AdamW's moments in bf16 (components/optimizer/optimizer.py:109-123, :332-371)
            ['config.optimizer.implementation = "fused_opt_states_bf16"']
            if job.optimizer_state_dtype == "bf16"
            else []
        ),
        "config.lr_scheduler = LRSchedulersContainer.Config(",
        f"    warmup_steps={int(schedule['--lr-warmup-iters'])},",
        "    decay_type='cosine',",
        f"    min_lr_factor={min_lr / lr!r},",
        ")",
        "config.checkpoint.enable = True",
        f"config.checkpoint.interval = {p.checkpoint_interval_steps}",
        "config.profiler.enable_profiling = False",
    ]
    vocab = "global_vocab_size=decoder_vocab_size(config.model_spec)"
    loss_fn = f"CrossEntropyLoss.Config({vocab})"
    if titan.num_mtp_layers:  # the main and each depth's loss
        scale = f"mtp_scale={titan.mtp_scale!r}, " if titan.mtp_scale != 0.3 else ""
        body.append(f"config.loss = MTPLoss.Config({scale}{vocab})")
    elif titan.loss_chunks > 1:
        body += [
            "config.loss = ChunkedLossWrapper.Config(",
            f"    num_chunks={titan.loss_chunks},",
            f"    loss_fn={loss_fn},",
            ")",
        ]
    else:
        body.append(f"config.loss = {loss_fn}")
    if base.hf_folder:
        body.append(f"config.hf_assets_path = {base.hf_folder!r}  # its tokenizer: set the path")
    if job.deterministic:
        body.append("config.debug.deterministic = True")
    if job.arch.is_moe and job.moe_router_force_load_balancing:  # every MoE layer's router
        body.append("config.debug.moe_force_load_balance = True")
    if titan.validation_batch:  # its batch and seq_len the training's (module_refusal)
        body.append("config.validator.enable = True")
    head = comment_block(
        [
            *header(plan, "torchtitan module", job_name, p),
            f"torchtitan configuration (pytorch/torchtitan @ {HEAD_COMMIT}, the API since "
            "9810191b, 2026-02-23): run torchrun ... -m torchtitan.train --module "
            f"{FUNCTION} --config {FUNCTION} with this file's folder on PYTHONPATH (the scripts "
            "planner launch --target torchtitan-module writes beside it); the tokenizer folder "
            "and dataset are the baseline's",
            DIFFERENCES,
            *(f"note: {n}" for n in plan.launch_notes),
            f"{GPU_LINE}{job.cluster.gpu.name}",
        ]
    )
    return (
        head
        + "\n".join(imports)
        + f"\n\n\ndef {FUNCTION}() -> Trainer.Config:\n"
        + f'    """The plan\'s layout on {base.function}\'s baseline."""\n'
        + "".join(f"    {line}\n" for line in body)
        + "    return config\n"
    )
