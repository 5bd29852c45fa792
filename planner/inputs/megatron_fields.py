"""The words of a command line behind each plan field, for errors about the plan read from it
(`megatron_line.flags_named`: `FILE: --global-batch-size (training.global_batch_size): ...`):
a Megatron-LM line's flags (`flag_of_field`) and a NeMo line's keys (KEY_OF_FIELD).

Both are built from the readers' own tables where they have one (`megatron_layout.PARALLEL_INT`,
`megatron_model.MODEL_INT`, the NeMo keys of `nemo_keys`, whose `model.config.<name>` is
Megatron-LM's `--<name>` where Megatron-LM has that flag); `flag_of_field` adds the flags the
readers take one by one (READ_ONE_BY_ONE). A field two flags may set (vpp, the first / last
stage's layers, precision) is left as planner names it.
"""

from __future__ import annotations

from functools import cache

from planner.inputs.megatron_args_memory import HASH_FLAG
from planner.inputs.megatron_flags import megatron_flags
from planner.inputs.megatron_layout import DISPATCHER_TEXT, LAYOUT_INT, PARALLEL_INT
from planner.inputs.megatron_model import MODEL_INT
from planner.inputs.nemo_keys import (
    ARCH_KEYS,
    BY_MEGATRON_FLAG,
    PARALLEL,
    PARALLEL_SWITCHES,
    TRAINING,
)

READ_ONE_BY_ONE = {
    "training.seq_length": "--seq-length",
    "training.global_batch_size": "--global-batch-size",
    "training.fp8_recipe": "--fp8-recipe",
    "training.bf16_layers_at_start": "--num-layers-at-start-in-bf16",
    "training.bf16_layers_at_end": "--num-layers-at-end-in-bf16",
    "training.moe_expert_capacity_factor": "--moe-expert-capacity-factor",
    "training.moe_expert_rank_capacity_factor": "--moe-expert-rank-capacity-factor",
    "training.moe_paged_stash_buffer_size_factor": "--moe-paged-stash-buffer-size-factor-cuda",
    "training.moe_router_dtype": "--moe-router-dtype",
    "training.cuda_graph_impl": "--cuda-graph-impl",
    "training.dsa_kernel_backend": "--dsa-kernel-backend",
    "training.optimizer_instances": "--num-distributed-optimizer-instances",
    "training.muon_ns_steps": "--muon-num-ns-steps",
    "training.muon_tp_mode": "--muon-tp-mode",
    "training.muon_matmul_precision": "--muon-fp32-matmul-prec",
    "training.weight_hash_interval": HASH_FLAG,
    "training.optimizer_offload_fraction": "--optimizer-offload-fraction",
    "training.dsa_indexer_loss_coeff": "--dsa-indexer-loss-coeff",
    "training.rl_kv_cache_gib": "--inference-dynamic-batching-buffer-size-gb",
    "parallel.pipeline_model_parallel_layout": "--pipeline-model-parallel-layout",
    "parallel.recompute": "--recompute-granularity",
    "parallel.recompute_method": "--recompute-method",
    "parallel.recompute_num_layers": "--recompute-num-layers",
    "parallel.recompute_modules": "--recompute-modules",
    "parallel.offload_modules": "--offload-modules",
    "parallel.activation_offload_fraction": "--activation-offload-fraction",
    "parallel.moe_flex_dispatcher_num_sms": "--moe-flex-dispatcher-num-sms",
    "parallel.wgrad_deferral_limit": "--wgrad-deferral-limit",
    "parallel.cp_comm_type": "--cp-comm-type",
    "parallel.use_torch_fsdp2": "--use-torch-fsdp2",
}
"""The plan fields Megatron-LM's reader fills from one flag each in code of its own
(`megatron_training`, `megatron_layout`, `megatron_args_memory`), with that flag."""


def _nemo_keys() -> dict[str, str]:
    """plan field -> the NeMo key that sets it (the last of several: the unified
    moe_flex_dispatcher_num_sms, read last, wins as in Megatron); the model's fields too
    (`nemo_keys.ARCH_KEYS`), but the vocabulary's, which --vocab-size or the tokenizer may set
    (`nemo_args._vocabulary`), and the position table's length, model.config.seq_length
    (`nemo_args._positions`)."""
    out = {f"parallel.{f}": k for k, f in {**PARALLEL, **PARALLEL_SWITCHES}.items()}
    out.update({f"training.{f}": k for k, f in TRAINING.items()})
    vocab = ("vocab_size", "make_vocab_size_divisible_by")
    out.update({f"model.{f}": k for k, f in ARCH_KEYS.items() if f not in vocab})
    out["model.max_position_embeddings"] = "model.config.seq_length"
    return out


KEY_OF_FIELD = _nemo_keys()
"""The NeMo key behind each plan field an error names (as `flag_of_field` names a Megatron-LM
line's flags): `trainer.strategy.tensor_model_parallel_size (parallel.tp)`, not a Megatron-LM
flag the line does not hold."""


@cache
def flag_of_field() -> dict[str, str]:
    """The Megatron-LM flag behind each plan field, for a plan read from a Megatron-LM line
    (built at first use: Megatron-LM's flag list is read then, `megatron_flags`)."""
    known = megatron_flags()
    out = {f"model.{f}": flag for flag, f in MODEL_INT.items()}
    out.update({f"parallel.{f}": flag for flag, f in PARALLEL_INT.items()})
    out.update({f"parallel.{f}": flag for flag, f in {**LAYOUT_INT, **DISPATCHER_TEXT}.items()})
    for field, key in KEY_OF_FIELD.items():  # model.config.<name>: Megatron-LM's --<name>
        flag = "--" + key.rpartition(".")[2].replace("_", "-")
        if field.startswith("model."):  # Megatron-LM's model flags are MODEL_INT's
            continue
        if key.startswith(BY_MEGATRON_FLAG) and flag in known:
            out.setdefault(field, flag)
    out.update(READ_ONE_BY_ONE)
    return out
