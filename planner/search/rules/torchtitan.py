"""What torchtitan runs: rules on a plan with `[training] framework = "torchtitan"`.

Sources: pytorch/torchtitan e347b1e5 (planner.inputs.torchtitan.TORCHTITAN_COMMIT):
distributed/parallel_dims.py (`_validate`: etp is 1 or tp; the FSDP mesh is dp_shard x cp, the
expert mesh pp x dp_replicate x efsdp x ep x etp; `seq_len_divisor` tp x 2cp; DDP only alone),
models/llama3/infra/parallelize.py (FSDP2 `fully_shard` on every block,
sequence parallelism whenever tp > 1, float8 all-gather only for tensorwise), config/job_config.py
(the settings that exist). Each rule returns a Violation naming the plan field, the value and
what torchtitan supports, or nothing; all return nothing for Megatron-LM plans. The pipeline
schedules' and the attention heads' rules are `planner.search.rules.torchtitan_shapes`'.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import (
    MODELS,
    MOE_MODELS,
    flavor_name,
)
from planner.inputs.torchtitan_float8 import DEEPEP_GROUPED
from planner.search.rules.base import Violation
from planner.search.rules.torchtitan_era import head_era
from planner.search.rules.torchtitan_megatron import megatron_setting
from planner.search.rules.torchtitan_mtp import mtp
from planner.search.rules.torchtitan_shapes import heads, placement, schedule, stage_count
from planner.search.rules.torchtitan_tied import tied_pipeline


def _titan(job: Job) -> bool:
    return job.framework == "torchtitan"


def shard_degree(job: Job, lay: Layout) -> int:
    """FSDP2's shard group for dense parameters: data_parallel_shard_degree x cp."""
    return lay.dp // job.titan.dp_replicate * lay.cp


def sharding(job: Job, lay: Layout) -> Violation | None:
    """dp = dp_replicate x dp_shard; FSDP2 (zero_stage 3) wherever dp_shard x cp > 1, else
    replicated (zero_stage 0): b5bcd76c's fully_shard over (dp_replicate, fsdp of 1) beside any
    tp and pp (models/llama3/parallelize.py always calls apply_fsdp_to_decoder), e347b1e5's DDP
    only alone (the TOML target's `era_refusal`)."""
    if not _titan(job):
        return None
    rep = job.titan.dp_replicate
    if lay.dp % rep:
        return Violation(
            "tt_hsdp",
            "torchtitan.dp_replicate",
            f"data_parallel_replicate_degree ({rep}) must divide the data-parallel size "
            f"({lay.dp}); torchtitan's dp is replicate x shard",
        )
    shard = shard_degree(job, lay)
    want = 3 if shard > 1 else 0
    if lay.zero_stage != want:
        return Violation(
            "tt_zero",
            "parallel.zero_stage",
            f"zero_stage {lay.zero_stage} is not a torchtitan mode: it shards parameters, "
            f"gradients and optimizer states with FSDP2 (zero_stage = 3) over "
            f"data_parallel_shard_degree x cp ({lay.dp // rep} x {lay.cp}), and replicates "
            f"(zero_stage = 0) only where that is 1; here zero_stage must be {want}",
        )
    return None


def experts(job: Job, lay: Layout) -> Violation | None:
    """EP only for torchtitan's MoE models, expert TP 1 or tp, and ep x etp dividing
    dp_shard x cp x tp (its expert mesh). Without EP the experts are tensor-parallel over the
    whole tp mesh (e347b1e5 models/llama4/infra/parallelize.py `apply_moe_ep_tp`: no ep mesh ->
    `TensorParallel()` on tp_mesh; b5bcd76c the same, models common MOE_SHARDING.md): expert TP
    is tp there, as the configuration reader reads it."""
    if not _titan(job):
        return None
    if lay.ep == 1:
        if job.arch.is_moe and lay.expert_tp != lay.tp:
            return Violation(
                "tt_etp",
                "parallel.etp",
                f"expert_tensor_parallel_degree ({lay.expert_tp}) with expert_parallel_degree 1: "
                f"torchtitan then shards the experts over the whole tensor_parallel_degree "
                f"({lay.tp}); set etp = {lay.tp}, or ep > 1",
            )
        return None
    model = MODELS.get(flavor_name(job.arch), ("", ""))[0]
    if model not in MOE_MODELS:
        return Violation(
            "tt_ep_model",
            "parallel.ep",
            f"expert_parallel_degree {lay.ep}: torchtitan runs expert parallelism only in its "
            f"MoE models ({', '.join(sorted(MOE_MODELS))}); {job.arch.name} is not one",
        )
    if lay.expert_tp not in (1, lay.tp):
        return Violation(
            "tt_etp",
            "parallel.etp",
            f"expert_tensor_parallel_degree ({lay.expert_tp}) must be 1 or "
            f"tensor_parallel_degree ({lay.tp}) in torchtitan",
        )
    room = shard_degree(job, lay) * lay.tp
    if room % (lay.ep * lay.expert_tp):
        return Violation(
            "tt_ep_mesh",
            "parallel.ep",
            f"expert_parallel_degree x etp ({lay.ep} x {lay.expert_tp}) must divide "
            f"data_parallel_shard_degree x cp x tp ({room}) in torchtitan's expert mesh",
        )
    return None


def features(job: Job, lay: Layout) -> Violation | None:
    """Megatron-LM features torchtitan does not have, and torchtitan's own conditions."""
    if not _titan(job):
        return None
    found = megatron_setting(job, lay)
    if found is not None:
        return found
    backend = lay.moe_flex_dispatcher_backend
    if job.arch.is_moe and lay.moe_token_dispatcher_type == "flex" and backend != "deepep":
        return Violation(
            "tt_flex_backend",
            "parallel.moe_flex_dispatcher_backend",
            f'"{backend}": planner models torchtitan\'s DeepEP ("deepep") only: e347b1e5 has '
            'no other (config/job_config.py:474: "standard" or "deepep"), and b5bcd76c\'s '
            'moe_comm_backend "hybridep" (torchtitan models common config_utils.py:402-408) is not '
            'modelled; use "deepep", or framework = "megatron"',
        )
    if lay.recompute_modules != ("core_attn",):
        return Violation(
            "tt_megatron_only",
            "parallel.recompute_modules",
            "a Megatron-LM setting torchtitan does not run (its selective recompute is per-op)",
        )
    block = (lay.recompute_method, lay.recompute_num_layers) != ("uniform", 1)
    if block and job.titan.selective_layer_every is None:
        return Violation(
            "tt_megatron_only",
            "parallel.recompute_method",
            "a Megatron-LM setting torchtitan does not run (every N-th layer is "
            "torchtitan.selective_layer_every)",
        )
    if lay.recompute == "selective" and job.selective_recompute != "per_op":
        return Violation(
            "tt_recompute",
            "training.selective_recompute",
            f"torchtitan's selective activation checkpointing is per-op ('op') or every N-th "
            f"layer (torchtitan.selective_layer_every); got {job.selective_recompute!r}",
        )
    if lay.tp > 1 and not lay.sequence_parallel:
        return Violation(
            "tt_sp",
            "parallel.sequence_parallel",
            f"false at tensor_parallel_degree {lay.tp}: planner models torchtitan's tensor "
            "parallelism with sequence parallelism only, as e347b1e5 always runs it "
            "(llama3/infra/parallelize.py:181-233); b5bcd76c's "
            "parallelism.enable_sequence_parallel = False (config/configs.py:169) is not modelled",
        )
    return _compile_and_float8(job, lay)


def _compile_and_float8(job: Job, lay: Layout) -> Violation | None:
    titan = job.titan
    if titan.async_tp and not titan.compile:
        # at tp 1 torchtitan ignores it (`inert` notes it): only compile is asserted
        return Violation(
            "tt_async_tp",
            "torchtitan.async_tp",
            "true needs torchtitan.compile = true: torchtitan raises 'Async TP requires 'model' "
            "in --compile.components and --compile.enable' (b5bcd76c config/configs.py:306-313; "
            "e347b1e5 distributed/tensor_parallel.py:20-23 at tp > 1)",
        )
    if job.precision == "fp4":
        return Violation(
            "tt_fp4",
            "training.precision",
            '"fp4": planner models NVFP4 as Megatron-LM runs it with Transformer Engine, not '
            "torchtitan's: e347b1e5 has no NVFP4 converter, and b5bcd76c's NVFP4LinearConverter "
            "(components/quantization/nvfp4.py:268-305, torchao's kernels on compute capability "
            '10.0 and later) is not modelled: use framework = "megatron" or precision "fp8"',
        )
    if job.precision == "fp8" and job.fp8_recipe not in (
        "tensorwise",
        "rowwise",
        "rowwise_with_gw_hp",
    ):
        return Violation(
            "tt_fp8",
            "training.fp8_recipe",
            f"torchtitan's float8 recipes are tensorwise, rowwise and rowwise_with_gw_hp "
            f"(got {job.fp8_recipe!r})",
        )
    if titan.float8_all_gather and not (job.precision == "fp8" and job.fp8_recipe == "tensorwise"):
        return Violation(
            "tt_fp8_gather",
            "torchtitan.float8_all_gather",
            'the float8 FSDP all-gather needs precision "fp8" with fp8_recipe "tensorwise"',
        )
    if titan.float8_experts and not (job.precision == "fp8" and job.arch.is_moe):
        why = (
            f'precision "{job.precision}": planner runs them in float8 beside the float8 '
            'linear layers only (precision "fp8")'
            if job.arch.is_moe
            else f"{job.arch.name} has no routed experts"
        )
        return Violation(
            "tt_float8_experts",
            "torchtitan.float8_experts",
            f"true: torchtitan's grouped-GEMM float8 converter of the MoE's routed experts, but "
            f"{why}",
        )
    divisor = lay.tp * 2 * lay.cp if lay.cp > 1 else lay.tp
    if job.seq_length % divisor:
        return Violation(
            "tt_seq",
            "training.seq_length",
            f"torchtitan needs seq_length ({job.seq_length}) divisible by tp x 2cp "
            f"({lay.tp} x 2 x {lay.cp} = {divisor})"
            if lay.cp > 1
            else f"torchtitan needs seq_length ({job.seq_length}) divisible by tp ({lay.tp})",
        )
    chunks = titan.loss_chunks
    tokens = lay.micro_batch_size * job.seq_length // lay.cp
    if chunks > 1 and tokens % chunks:
        return Violation(
            "tt_loss_chunks",
            "torchtitan.loss_chunks",
            f"the chunked loss splits a micro-batch's {tokens} tokens per CP rank into "
            f"{chunks} equal chunks (torchtitan/components/loss.py: 'sequence length must be "
            "divisible by num_chunks')",
        )
    return None


def megatron_recipes(job: Job, lay: Layout) -> Violation | None:
    """torchao's rowwise recipes are torchtitan's; Megatron-LM has no --fp8-recipe rowwise."""
    if job.framework == "megatron" and job.precision == "fp8" and "rowwise" in job.fp8_recipe:
        return Violation(
            "fp8_recipe",
            "training.fp8_recipe",
            f"Megatron-LM's --fp8-recipe has no {job.fp8_recipe!r} (delayed, tensorwise, "
            'blockwise, mxfp8); it is a torchtitan recipe (framework = "torchtitan")',
        )
    return None


def deepep_spread(job: Job, ep: int, etp: int) -> bool:
    """Whether the experts are spread so that DeepEP runs on them: Megatron's needs expert TP x
    EP > 1; torchtitan's expert parallelism itself, without expert TP (`deepep`)."""
    return ep > 1 and etp == 1 if _titan(job) else ep * etp > 1


def deepep(job: Job, lay: Layout) -> Violation | None:
    """torchtitan's DeepEP (the flex dispatcher) needs expert parallelism, and at e347b1e5 runs
    without expert TP (models/llama4/infra/parallelize.py:114-125: ValueError at ep 1,
    NotImplementedError with etp enabled; b5bcd76c's dispatchers need ep > 1 as well), and
    without float8 experts (`torchtitan_float8.DEEPEP_GROUPED`: b5bcd76c raises)."""
    if not _titan(job) or lay.moe_token_dispatcher_type != "flex" or not job.arch.is_moe:
        return None
    field = "parallel.moe_token_dispatcher_type"
    if lay.ep == 1:
        return Violation(
            "tt_deepep", field, "torchtitan's DeepEP needs expert parallelism (ep > 1; "
            "expert_parallel_comm_backend deepep raises at expert_parallel_degree 1)",
        )  # fmt: skip
    if lay.expert_tp > 1:
        return Violation(
            "tt_deepep", field, f"torchtitan's DeepEP runs without expert TP (etp "
            f"{lay.expert_tp}: NotImplementedError there); etp = 1 or the all-to-all dispatcher",
        )  # fmt: skip
    if job.titan.float8_experts:
        return Violation("tt_deepep", "torchtitan.float8_experts", f"true: {DEEPEP_GROUPED}")
    return None


RULES = (
    sharding, schedule, stage_count, placement, heads, experts, features, deepep, head_era,
    megatron_recipes, mtp, tied_pipeline,
)  # fmt: skip
"""The framework rules, in the order their messages are listed."""
