"""The keys of a NeMo 2.0 `nemo llm pretrain` line (NeMo-Run overrides) and what each becomes.

What each key becomes (NeMo 2.0 names: nemo/lightning/pytorch/strategies/megatron_strategy.py,
nemo/collections/llm/gpt/model/base.py GPTConfig, a Megatron-Core TransformerConfig):

    trainer.num_nodes x trainer.devices        the GPU count (must equal --num-gpus)
    trainer.strategy.tensor_model_parallel_size, pipeline_model_parallel_size,
      virtual_pipeline_model_parallel_size, context_parallel_size, expert_model_parallel_size,
      expert_tensor_parallel_size          tp, pp, vpp (None = 1), cp, ep, etp
    trainer.strategy.sequence_parallel         sequence_parallel (off when tp = 1, as NeMo does)
    trainer.strategy.ddp.overlap_grad_reduce / overlap_param_gather / bucket_size /
      num_buckets                              the same (ddp_bucket_size, ddp_num_buckets;
                                               the gather exposed without overlap_grad_reduce:
                                               `nemo_parallel.one_bucket`)
    trainer.strategy.ddp.grad_reduce_in_fp32,
      trainer.plugins.grad_reduce_in_fp32      main_grad_dtype fp32 (False: bf16)
    optim.config.use_distributed_optimizer     zero_stage 1 (False: 0)
    trainer.plugins.precision                  bf16-mixed, 16-mixed (precision / params_dtype fp16)
    trainer.plugins.fp8                        precision fp8 (with fp8_recipe, fp8_param_gather;
                                               model.config.fp8 / fp8_recipe are noted: NeMo
                                               writes the plugin's over them)
    data.micro_batch_size, global_batch_size, seq_length                  the same
    model.config.<ModelArch field>             the model's field (num_layers, hidden_size,
                                               ffn_hidden_size, num_attention_heads,
                                               num_query_groups, kv_channels, num_moe_experts,
                                               moe_router_topk, moe_ffn_hidden_size, vocab_size...)
    model.config.share_embeddings_and_output_weights   untie_embeddings_and_output_weights = not
    model.config.bias_activation_fusion        fused_swiglu (the GLU's fusion)
    model.config.attention_dropout / hidden_dropout   the same at 0 (no masks; unset: the
                                               recipe config's, `nemo_recipes.Recipe.dropout`)
    model.config.cross_entropy_loss_fusion / _fusion_impl   loss_fusion (False: the unfused
                                               loss), compiled_loss_fusion (True with "native")
    model.config.recompute_granularity / _method / _num_layers / _modules   recompute
    model.config.moe_token_dispatcher_type, moe_expert_capacity_factor, ...  the same
    model.config.defer_embedding_wgrad_compute, wgrad_deferral_limit   the same ([parallel])
    model.config.moe_shared_expert_overlap     the same ([parallel])
    trainer.strategy.use_tp_pp_dp_mapping      the same ([parallel])
    model.config.moe_flex_dispatcher_num_sms (moe_deepep_num_sms, moe_hybridep_num_sms)
                                               moe_flex_dispatcher_num_sms ([parallel])
    model.config.use_transformer_engine_op_fuser (with moe_grouped_gemm,
      moe_mlp_glu_interleave_size)             moe_fused_grouped_mlp (moe_checks)
    model.config.overlap_p2p_comm (with batch_p2p_comm)   overlap_p2p_comm ([parallel]; off
                                               unless the line turns it on, as NeMo runs it:
                                               `nemo_parallel.p2p_overlap`)
    model.config.cpu_offloading (with cpu_offloading_num_layers)   cpu_offloading_num_layers
                                               (the count alone offloads nothing in NeMo)
    model.config.tp_comm_overlap=True          refused: NeMo makes no userbuffers without its
                                               comm-overlap callback (`nemo_parallel`)
    trainer.strategy.use_te_rng_tracker        needed beside enable_cuda_graph (`nemo_training`)
    model.config.seq_length                    max_position_embeddings (the learned position
                                               table NeMo builds; unset: the recipe config's)
    model.config.gradient_accumulation_fusion  the same ([training]; unset: the recipe config's)
    trainer.plugins.reuse_grad_buf_for_mxfp8_param_ag   MXFP8's gather as planner prices it
                                               (not True: noted, `nemo_training`)

Keys NeMo runs that planner does not price, and model.config keys NeMo writes the strategy's
over, are noted (`nemo_unread`). Any other `model.config.`, `trainer.strategy.[ddp.]`,
`trainer.plugins.` or `optim.config.` key is classified by the Megatron-LM flag of its name
(`--name-with-dashes`, or `--no-...`), as `megatron_args` classifies flags: one the Megatron
reader ignores does not change memory or layout and is ignored (listed with `check --verbose`),
one of `NOT_MODELLED` gets its note, one the Megatron reader reads or refuses (`REFUSED`) is
refused (it changes memory, and is not mapped here). Run bookkeeping
(steps, validation, logging, checkpointing, learning rates: HARMLESS) is ignored and listed. Any
other key is refused, naming the key and its value.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.megatron_flags import (
    NOT_MODELLED,
    NOT_MODELLED_DEFAULTS,
    READ,
    REFUSED,
    megatron_flags,
)
from planner.inputs.nemo_unread import NOT_FIELDS, NOTED, OVERWRITTEN, unread_note

ROOTS = ("trainer", "model", "data", "optim", "log", "resume")
"""The top-level entries of `nemo llm pretrain`'s Partial (llm.api.pretrain's arguments)."""
KEY = re.compile(r"^(" + "|".join(ROOTS) + r")(\.\w+)+$")
CLI = {"nemo", "llm", "pretrain", "-y", "--yes"}
"""Words of the command itself: `nemo llm pretrain`, and -y (no confirmation prompt)."""
FACTORY = ("--factory", "-f")

PARALLEL = {
    "trainer.strategy.tensor_model_parallel_size": "tp",
    "trainer.strategy.pipeline_model_parallel_size": "pp",
    "trainer.strategy.virtual_pipeline_model_parallel_size": "vpp",
    "trainer.strategy.context_parallel_size": "cp",
    "trainer.strategy.expert_model_parallel_size": "ep",
    "trainer.strategy.expert_tensor_parallel_size": "etp",
    "trainer.strategy.microbatch_group_size_per_vp_stage": "microbatch_group_size_per_vp_stage",
    "trainer.strategy.ddp.bucket_size": "ddp_bucket_size",
    "trainer.strategy.ddp.num_buckets": "ddp_num_buckets",
    "data.micro_batch_size": "micro_batch_size",
    "model.config.recompute_granularity": "recompute",
    "model.config.recompute_method": "recompute_method",
    "model.config.recompute_num_layers": "recompute_num_layers",
    "model.config.recompute_modules": "recompute_modules",
    "model.config.activation_offload_fraction": "activation_offload_fraction",
    "model.config.moe_token_dispatcher_type": "moe_token_dispatcher_type",
    "model.config.moe_flex_dispatcher_backend": "moe_flex_dispatcher_backend",
    # the deprecated per-backend SM counts first: the unified key, read last, wins as in Megatron
    "model.config.moe_deepep_num_sms": "moe_flex_dispatcher_num_sms",
    "model.config.moe_hybridep_num_sms": "moe_flex_dispatcher_num_sms",
    "model.config.moe_flex_dispatcher_num_sms": "moe_flex_dispatcher_num_sms",
    "model.config.cp_comm_type": "cp_comm_type",
    "model.config.wgrad_deferral_limit": "wgrad_deferral_limit",
}
"""Keys that are `[parallel]` fields."""
PARALLEL_SWITCHES = {
    "trainer.strategy.sequence_parallel": "sequence_parallel",
    "trainer.strategy.ddp.overlap_grad_reduce": "overlap_grad_reduce",
    "trainer.strategy.ddp.overlap_param_gather": "overlap_param_gather",
    "model.config.defer_embedding_wgrad_compute": "defer_embedding_wgrad_compute",
    "model.config.moe_shared_expert_overlap": "moe_shared_expert_overlap",
    # MegatronStrategy's (Megatron-Bridge 067f987d docs/nemo2-migration-guide.md:823)
    "trainer.strategy.use_tp_pp_dp_mapping": "use_tp_pp_dp_mapping",
}
TRAINING = {
    "data.seq_length": "seq_length",
    "data.global_batch_size": "global_batch_size",
    "model.config.moe_expert_capacity_factor": "moe_expert_capacity_factor",
    "model.config.moe_expert_rank_capacity_factor": "moe_expert_rank_capacity_factor",
    "model.config.moe_paged_stash": "moe_paged_stash",
    "model.config.moe_paged_stash_buffer_size_factor_cuda": "moe_paged_stash_buffer_size_factor",
    "model.config.moe_pad_expert_input_to_capacity": "moe_pad_expert_input_to_capacity",
    "model.config.moe_router_force_load_balancing": "moe_router_force_load_balancing",
    "model.config.moe_router_num_groups": "moe_router_num_groups",
    "model.config.moe_router_group_topk": "moe_router_group_topk",
    "trainer.plugins.fp8_recipe": "fp8_recipe",
}
"""Keys that are `[training]` fields."""
GRAPH_KEYS = (
    "model.config.enable_cuda_graph",
    "model.config.external_cuda_graph",
    "model.config.cuda_graph_impl",
    "model.config.cuda_graph_modules",
    "model.config.cuda_graph_scope",
)
"""TransformerConfig's CUDA-graph fields (d98e8a64): the deprecated switches for the local and
transformer_engine implementations, the implementation, and the regions captured (the deprecated
scope name too): `cuda_graphs` and `cuda_graph_modules`."""
SPECIAL = (
    "trainer.num_nodes",
    "trainer.devices",
    "trainer.strategy.ddp.grad_reduce_in_fp32",
    "trainer.plugins.grad_reduce_in_fp32",
    "trainer.strategy.account_for_embedding_in_pipeline_split",
    "trainer.strategy.account_for_loss_in_pipeline_split",
    "optim.config.use_distributed_optimizer",
    "trainer.plugins.precision",
    "trainer.plugins.fp8",
    "model.config.fp8",  # noted: the precision plugin's DtypeConfig is written over both
    "model.config.fp8_recipe",
    "trainer.plugins.fp8_params",
    "trainer.plugins.fp8_param_gather",
    "model.config.share_embeddings_and_output_weights",
    "model.config.bias_activation_fusion",
    "model.config.cross_entropy_loss_fusion",
    "model.config.cross_entropy_fusion_impl",
    "model.config.attention_dropout",
    "model.config.hidden_dropout",
    "model.config.moe_layer_freq",
    "model.config.seq_length",  # the learned position table's length (nemo_args._positions)
    "model.config.max_position_embeddings",  # MixtralConfig's alone (nemo_args._positions)
    "model.config.gradient_accumulation_fusion",
    "trainer.plugins.reuse_grad_buf_for_mxfp8_param_ag",
    "model.config.use_transformer_engine_op_fuser",
    "model.config.moe_grouped_gemm",
    "model.config.moe_mlp_glu_interleave_size",
    "model.config.moe_router_padding_for_quantization",
    "model.config.moe_router_padding_for_fp8",
    "model.config.overlap_p2p_comm",
    "model.config.batch_p2p_comm",
    "model.config.cpu_offloading",
    "model.config.cpu_offloading_num_layers",
    "model.config.tp_comm_overlap",
    "trainer.strategy.use_te_rng_tracker",
    "data.tokenizer",
    *GRAPH_KEYS,
)
"""Keys read below, one by one."""
HARMLESS = frozenset(
    {
        "trainer.max_steps",
        "trainer.max_epochs",
        "trainer.val_check_interval",
        "trainer.limit_val_batches",
        "trainer.limit_test_batches",
        "trainer.log_every_n_steps",
        "trainer.num_sanity_val_steps",
        "trainer.enable_checkpointing",
        "trainer.gradient_clip_val",
        "trainer.accumulate_grad_batches",  # NeMo's MegatronStrategy keeps 1: batches are data.*
        "trainer.strategy.gradient_as_bucket_view",
        "trainer.strategy.ckpt_async_save",
        "trainer.strategy.ckpt_parallel_load",
        "trainer.strategy.ckpt_include_optimizer",
        "trainer.strategy.ckpt_load_optimizer",
        "trainer.strategy.ddp.check_for_nan_in_grad",
        "trainer.strategy.ddp.average_in_collective",
        "data.num_workers",
        "data.pin_memory",
        "data.persistent_workers",
        "data.num_train_samples",
        "data.num_val_samples",
        "data.num_test_samples",
        # read by Megatron-Core's local attention only; NeMo builds TE's, which reads
        # NVTE_MASKED_SOFTMAX_FUSION instead (TE d0067d0d dot_product_attention/softmax.py:264-266)
        "model.config.masked_softmax_fusion",
        "optim.config.lr",
        "optim.config.min_lr",
        "optim.config.weight_decay",
        "optim.config.adam_beta1",
        "optim.config.adam_beta2",
        "optim.config.adam_eps",
        "optim.config.clip_grad",
    }
)
"""Run bookkeeping: steps, validation, logging, checkpointing, data loading, learning rates."""
HARMLESS_PREFIXES = ("log.", "resume.", "optim.lr_scheduler.")
BY_MEGATRON_FLAG = (
    "model.config.",
    "trainer.strategy.ddp.",
    "trainer.strategy.",
    "trainer.plugins.",
    "optim.config.",
)
"""Prefixes whose other keys are classified by the Megatron-LM flag of their last name."""
_ARCH_FIXED = {
    *("name", "source", "display_name", "seq_length", "moe_layer_freq", "max_position_embeddings"),
    *NOT_FIELDS,
}
ARCH_KEYS = {f"model.config.{f}": f for f in ModelArch.model_fields if f not in _ARCH_FIXED}
"""model.config.<field> -> the ModelArch field of the same name: TransformerConfig's and
GPTConfig's names; planner's own names for what the configs say otherwise
(`nemo_unread.NOT_FIELDS`) are refused."""
KNOWN = frozenset(
    {*PARALLEL, *PARALLEL_SWITCHES, *TRAINING, *SPECIAL, *HARMLESS, *ARCH_KEYS, *NOTED}
    | set(OVERWRITTEN)
)
TYPO_CUTOFF = 0.9
"""difflib similarity from which an unknown key is taken for a misspelt known one:
`trainer.strategy.tensor_model_paralel_size` scores 0.99, `data.micro_batch` 0.91; distinct
known keys score below it (`data.global_batch_size` against `data.micro_batch_size`: 0.85)."""


TRUE_WORDS = ("true", "yes", "on")
FALSE_WORDS = ("false", "no", "off")
"""NeMo-Run's booleans (NVIDIA/NeMo-Run cli_parser.py TypeParser.parse_bool: 1 and 0 too, read
here as the numbers, which `NemoLine.flag` takes as True and False where a switch is read)."""
NONE_WORDS = ("none", "null")
"""NeMo-Run's None, in any case, for an Optional field (cli_parser.py:929-930, parse_union)."""


def value_of(text: str) -> Any:
    """A NeMo-Run CLI value: int, float, bool, None, else the text (quotes stripped). Double
    quotes come off first, as NeMo-Run strips them before any typed parser (NVIDIA/NeMo-Run
    0c491271 cli_parser.py:739): `"none"` is None there, `'none'` the text none."""
    text = text.strip('"')
    low = text.lower()
    if low in TRUE_WORDS or low in FALSE_WORDS:
        return low in TRUE_WORDS
    if low in NONE_WORDS:
        return None
    if text.startswith("[") and text.endswith("]"):  # NeMo-Run's lists (parse_list)
        return [value_of(w.strip()) for w in text[1:-1].split(",") if w.strip()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("\"'")


def classify(values: dict[str, Any], where: str, missing: list[str], notes: list[str]) -> list[str]:
    """The keys that are not read: the harmless ones (returned, to be listed), the NOT_MODELLED
    ones that ask for what their flag does (`_asks`, a value other than NOT_MODELLED_DEFAULTS')
    and `nemo_unread.NOTED`'s (a note in `missing`), those NeMo writes another key over
    (`nemo_unread.OVERWRITTEN`: a note in `notes`); a key whose Megatron-LM flag that reader
    refuses (`megatron_flags.REFUSED`), or reads, is refused, as is any other."""
    ignored = []
    flags = megatron_flags()
    for key, value in values.items():
        name = key.removeprefix("model.config.")
        if name in NOT_FIELDS and name != key:
            raise InputError(
                f"{where}: {key}={value!r}: not a field of NeMo's model config (NeMo-Run refuses "
                f"it: No parameter named {name}); {NOT_FIELDS[name]}"
            )
        if key in NOTED or key in OVERWRITTEN:
            note = unread_note(key, value)
            if note is not None:
                (notes if key in OVERWRITTEN else missing).append(note)
            elif key in NOTED:
                ignored.append(key)
            continue
        if key in KNOWN and key not in HARMLESS:
            continue
        if key in HARMLESS or key.startswith(HARMLESS_PREFIXES):
            ignored.append(key)
            continue
        prefix = next((p for p in BY_MEGATRON_FLAG if key.startswith(p)), None)
        rest = key.removeprefix(prefix) if prefix else ""
        if prefix and "." not in rest:
            dashed = rest.replace("_", "-")
            flag = next((f for f in (f"--{dashed}", f"--no-{dashed}") if f in flags), None)
            if flag in NOT_MODELLED:
                if _asks(flag, value) and str(value) not in NOT_MODELLED_DEFAULTS.get(flag, ()):
                    missing.append(f"{key} ({flag}): {NOT_MODELLED[flag]}")
                else:
                    ignored.append(key)
                continue
            if flag in REFUSED and _asks(flag, value):
                raise InputError(
                    f"{where}: {key}={value!r}: {REFUSED[flag]} (Megatron-LM {flag}, which "
                    "planner refuses alike)"
                )
            if flag is not None and flag not in READ:
                ignored.append(key)
                continue
            if flag is not None:
                raise InputError(
                    f"{where}: {key}={value!r}: changes memory or layout (Megatron-LM {flag}), "
                    "and planner does not read it from NeMo overrides; write the job as a plan "
                    "file"
                )
        close = difflib.get_close_matches(key, sorted(KNOWN), n=1, cutoff=TYPO_CUTOFF)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"{where}: {key}={value!r}: not a NeMo 2 override planner knows{hint}")
    return sorted(ignored)


def _asks(flag: str, value: Any) -> bool:
    """Whether a key's value asks for what its Megatron-LM switch does: True for `--name`, False
    for `--no-name` (NeMo-Run's 1 and 0 alike); anything else, yes."""
    if value in (True, False) and not isinstance(value, float):
        return bool(value) != flag.startswith("--no-")
    return value is not None


@dataclass
class NemoLine:
    """A NeMo line's overrides as read: key -> value, the recipe it names, the words it has
    that are neither."""

    where: str
    values: dict[str, Any] = field(default_factory=dict)
    factory: str | None = None
    unknown: list[str] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def flag(self, key: str, default: bool | None = None) -> bool | None:
        """A switch's value: True / False, or NeMo-Run's 1 / 0 (its parse_bool reads them for a
        bool field; the on / off and yes / no words `value_of` reads); `default` where the line
        leaves it out or gives None."""
        value = self.values.get(key)
        if value is None:
            return default
        if value in (0, 1) and not isinstance(value, float):
            return bool(value)
        raise self.fail(key, "expected True or False")

    def fail(self, key: str, why: str) -> InputError:
        return InputError(f"{self.where}: {key}={self.values.get(key)!r}: {why}")
