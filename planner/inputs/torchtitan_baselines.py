"""torchtitan's configuration records as `planner.inputs.torchtitan_module` reads them, the
baselines' values (pytorch/torchtitan b5bcd76c config_registry functions) and torchtitan's
defaults of the fields a plan needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.inputs.torchtitan_records import (
    BASELINE_RECORDS,
    OWN_RECORD_FIELDS,
    TRAINER_DEFAULT_RECORDS,
)

Fields = dict[tuple[str, ...], Any]
"""Configuration values by field path, ("parallelism", "tensor_parallel_degree") -> 8; a whole
record at a shorter path (("parallelism",) -> Record) holds its own fields."""


@dataclass(frozen=True)
class Record:
    """What a call in the configuration builds: the callee as written (`ParallelismConfig`,
    `FullAC.Config`, `model_registry`), its positional and keyword arguments."""

    callee: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    line: int = 0
    """Where it is built (0: a baseline's)."""
    text: str = ""


@dataclass(frozen=True)
class Unread:
    """A value the reader does not evaluate, kept with its line and text: an error only if the
    plan needs it."""

    line: int
    text: str


@dataclass(frozen=True)
class Baseline:
    model: str
    """torchtitan's model module (torchtitan/models/<model>)."""
    fields: Fields
    source: str
    """Where the values are: the config_registry function's lines at b5bcd76c."""


def _baseline(
    model: str,
    lines: str,
    flavor: str,
    tokens: int,
    context: int,
    ac: str,
    spec: dict[str, Any] | None = None,
    graphs_off: bool = False,
    **records: Record,
) -> Baseline:
    """A baseline's values: its model_registry(flavor, **spec), the chunked loss every baseline
    has (`loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(...))`, num_chunks at
    its default 8, torchtitan/components/loss.py:544), tokens per micro-batch per DP rank,
    context length, activation checkpointing (SelectiveAC / FullAC), CUDA graphs turned off
    (`graphs_off`) and whole records (`parallelism`, `compile`)."""
    fields: Fields = {
        ("model_spec",): Record("model_registry", (flavor,), spec or {}),
        ("loss",): Record("ChunkedLossWrapper.Config"),
        ("training", "num_tokens_per_microbatch_per_dp_rank"): tokens,
        ("training", "max_context_length"): context,
        ("activation_checkpoint",): Record(f"{ac}.Config"),
    }
    fields.update({(name,): Record(cls) for name, cls in BASELINE_RECORDS.items()})
    if graphs_off:
        fields["training", "disable_cuda_graphs"] = True
    fields.update({(name,): rec for name, rec in records.items()})
    return Baseline(model, fields, f"torchtitan/models/{model}/config_registry.py:{lines}")


def _parallelism(**kwargs: Any) -> Record:
    return Record("ParallelismConfig", (), kwargs)


BASELINES = {
    "llama3_8b": _baseline("llama3", "194-226", "8B", 8192, 8192, "SelectiveAC"),
    "llama3_70b": _baseline(
        "llama3",
        "267-302",
        "70B",
        8 * 8192,
        8192,
        "FullAC",
        parallelism=_parallelism(tensor_parallel_degree=8),
    ),
    "llama3_405b": _baseline(
        "llama3",
        "305-356",
        "405B",
        2 * 8192,
        8192,
        "FullAC",
        {"converters": [Record("Float8LinearConverter.Config", (), {"filter_fqns": ["lm_head"]})]},
        parallelism=_parallelism(tensor_parallel_degree=8),
        compile=Record("CompileConfig", (), {"enable": True, "enable_async_tensor_parallel": True}),
    ),
    "deepseek_v3_16b": _baseline(
        "deepseek_v3",
        "141-173",
        "16B",
        4 * 4096,
        4096,
        "SelectiveAC",
        {"attn_backend": "flex"},
        parallelism=_parallelism(
            pipeline_parallel_schedule="Interleaved1F1B", expert_parallel_degree=8
        ),
        graphs_off=True,
        compile=Record("CompileConfig", (), {"enable": True, "components": ["loss"]}),
    ),
    "deepseek_v3_671b": _baseline(
        "deepseek_v3",
        "209-245",
        "671B",
        4 * 4096,
        4096,
        "SelectiveAC",
        {"attn_backend": "flex"},
        parallelism=_parallelism(
            pipeline_parallel_schedule="Interleaved1F1B", expert_parallel_degree=2
        ),
        graphs_off=True,
        compile=Record("CompileConfig", (), {"enable": True, "components": ["loss"]}),
    ),
    "qwen3_30b_a3b": _baseline("qwen3", "305-337", "30B-A3B", 2 * 4096, 4096, "FullAC"),
    "gpt_oss_20b": _baseline("gpt_oss", "71-101", "20b", 8192, 8192, "FullAC"),
    "gpt_oss_120b": _baseline("gpt_oss", "104-134", "120b", 8192, 8192, "FullAC"),
}
"""The baselines (b5bcd76c config_registry functions, `Baseline.source`) and the values of theirs
the plan reads; the rest of what they set (tokenizer, dataset, loss, optimizer, logging) the plan
does not. The float8 converter of llama3_405b has its default recipe, rowwise, and keeps the output
layer in bf16 (filter_fqns=["lm_head"], config_registry.py:312-316)."""

DEFAULTS: Fields = {
    ("parallelism", "data_parallel_replicate_degree"): 1,
    ("parallelism", "data_parallel_shard_degree"): -1,
    ("parallelism", "fsdp_reshard_after_forward"): "default",
    ("parallelism", "tensor_parallel_degree"): 1,
    ("parallelism", "pipeline_parallel_degree"): 1,
    ("parallelism", "context_parallel_degree"): 1,
    ("parallelism", "expert_parallel_degree"): 1,
    ("parallelism", "pipeline_parallel_schedule"): "1F1B",
    ("parallelism", "num_pp_microbatches"): 1,
    ("parallelism", "module_fqns_per_model_part"): None,
    ("parallelism", "context_parallel_load_balancer"): "headtail",
    ("training", "num_tokens_per_microbatch_per_dp_rank"): 16384,
    ("training", "num_tokens_per_train_step"): -1,
    ("training", "max_context_length"): 2048,
    ("training", "disable_cuda_graphs"): False,
    ("activation_checkpoint",): Record("SelectiveAC.Config"),
    ("checkpoint",): Record("CheckpointManager.Config"),
    ("compile", "enable"): False,
    ("compile", "enable_async_tensor_parallel"): False,
    ("compile", "components"): ["model", "loss"],
    ("debug", "deterministic"): False,
    ("validator", "enable"): False,
    ("validator", "freq"): 10,
    ("validator", "steps"): -1,
    ("debug", "batch_invariant"): False,
    ("loss",): Record("BaseLoss.Config"),
    ("parallelism", "enable_sequence_parallel"): True,
    ("parallelism", "pipeline_parallel_layers_per_stage"): None,
    ("parallelism", "pipeline_parallel_first_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_last_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_schedule_csv"): "",
    ("training", "enable_cpu_offload"): False,
    ("training", "mixed_precision_param"): "bfloat16",
    ("training", "dtype"): "float32",
    ("debug", "moe_force_load_balance"): False,
    ("compile", "backend"): "inductor",
    ("parallelism", "spmd_backend"): "spmd_types",
    ("parallelism", "enable_fsdp_symm_mem"): False,
    ("optimizer", "implementation"): "fused",
    **{(name,): Record(cls) for name, cls in TRAINER_DEFAULT_RECORDS.items()},
}
"""torchtitan b5bcd76c's defaults of the fields read (torchtitan/config/configs.py: parallelism
:133-290 (spmd_backend :172, enable_fsdp_symm_mem :160), training :43-51, compile :293-313
(backend :304); the optimizer's implementation, components/optimizer/optimizer.py:109-111; the
default activation checkpointing trainer.py:108-110; the checkpointer's, trainer.py:105-107;
the loss's, trainer.py:116; the validator's enable, freq and steps, components/validate.py:81,
:37, :84; CUDA graphs on, configs.py:75-85; the `UNMODELLED` ones,
configs.py:70-209; forced load balance, :368), as benchmarks/data/torchtitan_head_config.md
cites them; the records of the fields the plan does not read
(`torchtitan_records.TRAINER_DEFAULT_RECORDS`), whose fields are checked by name."""


def lookup(values: Fields, path: tuple[str, ...]) -> Any:
    """The field's value: set at its path, else in a record set at a shorter one (its keyword
    argument, else torchtitan's default: the record replaced the baseline's), else the
    default."""
    if path in values:
        return values[path]
    for i in range(len(path) - 1, 0, -1):
        rec = values.get(path[:i])
        if isinstance(rec, Unread):  # the record itself not read: nor what it holds
            return rec
        if isinstance(rec, Record):
            rest = path[i:]
            if len(rest) == 1 and rest[0] in rec.kwargs:
                return rec.kwargs[rest[0]]
            break
    return DEFAULTS.get(path)


SECTION_CLASSES = {
    "training": "TrainingConfig",
    "parallelism": "ParallelismConfig",
    "compile": "CompileConfig",
    "debug": "DebugConfig",
    "validator": "Validator.Config",
}
"""The sections the reader reads field by field, and the class each is built by
(torchtitan/config/configs.py at b5bcd76c, the validator's components/validate.py:80-104;
Trainer.Config's fields, trainer.py:69-116, validator :113)."""

TRAINER_FIELDS = frozenset(
    [
        "activation_checkpoint",
        "checkpoint",
        "comm",
        "compile",
        "dataloader",
        "debug",
        "dump_folder",
        "hf_assets_path",
        "loss",
        "lr_scheduler",
        "metrics",
        "model_spec",
        "optimizer",
        "override",
        "parallelism",
        "profiler",
        "tokenizer",
        "training",
        "validator",
    ]
)
"""Trainer.Config's fields (trainer.py:69-116 at b5bcd76c, a slotted dataclass: any other name
raises AttributeError)."""

SECTION_FIELDS: dict[str, frozenset[str]] = {
    "training": frozenset(
        [
            "disable_cuda_graphs",
            "dtype",
            "enable_cpu_offload",
            "gc_debug",
            "gc_freq",
            "max_context_length",
            "max_norm",
            "mixed_precision_param",
            "mixed_precision_reduce",
            "num_tokens_per_microbatch_per_dp_rank",
            "num_tokens_per_train_step",
            "steps",
        ]
    ),
    "parallelism": frozenset(
        [
            "context_parallel_degree",
            "context_parallel_load_balancer",
            "context_parallel_ptrr_mask_key",
            "data_parallel_replicate_degree",
            "data_parallel_shard_degree",
            "enable_fsdp_symm_mem",
            "enable_sequence_parallel",
            "expert_parallel_degree",
            "fsdp_reshard_after_forward",
            "module_fqns_per_model_part",
            "num_pp_microbatches",
            "pipeline_parallel_degree",
            "pipeline_parallel_first_stage_less_layers",
            "pipeline_parallel_last_stage_less_layers",
            "pipeline_parallel_layers_per_stage",
            "pipeline_parallel_schedule",
            "pipeline_parallel_schedule_csv",
            "spmd_backend",
            "tensor_parallel_degree",
        ]
    ),
    "compile": frozenset(["backend", "components", "enable", "enable_async_tensor_parallel"]),
    "debug": frozenset(
        [
            "batch_invariant",
            "detect_anomaly",
            "deterministic",
            "deterministic_warn_only",
            "enable_structured_logging",
            "moe_force_load_balance",
            "print_config",
            "save_config_file",
            "seed",
            "spmd_typechecking",
        ]
    ),
}
"""The fields of the sections the reader reads (torchtitan/config/configs.py at b5bcd76c:
TrainingConfig :36-106, ParallelismConfig :121-290, CompileConfig :294-313, DebugConfig :355-);
torchtitan's dataclasses have slots, so any other name fails there as here.
tests/inputs/test_torchtitan_module.py checks them against tests/data/torchtitan_config_schema.json
(benchmarks/torchtitan_schema.py's reading of the same files)."""

UNMODELLED: frozenset[tuple[str, ...]] = frozenset(
    {
        ("parallelism", "enable_sequence_parallel"),
        ("parallelism", "pipeline_parallel_layers_per_stage"),
        ("parallelism", "pipeline_parallel_first_stage_less_layers"),
        ("parallelism", "pipeline_parallel_last_stage_less_layers"),
        ("parallelism", "pipeline_parallel_schedule_csv"),
        ("training", "enable_cpu_offload"),
        ("training", "mixed_precision_param"),
        ("training", "dtype"),
    }
)
"""Fields that move memory, time or the stages in a way planner does not model: the reader takes
each at its torchtitan default only (`DEFAULTS`; the sequence-parallel switch, the stages by
layer count, a schedule from a CSV, FSDP's CPU offload, fp32 parameters; forced load balance,
debug.moe_force_load_balance, is read: `torchtitan_tables`)."""


_AC = ("debug", "determinism_check", "preserve_rng_state")
_CHECKPOINT = (
    "create_seed_checkpoint",
    "enable",
    "enable_first_step_checkpoint",
    "exclude_from_loading",
    "export_dtype",
    "folder",
    "initial_load_in_hf",
    "initial_load_in_hf_quantized",
    "initial_load_model_only",
    "initial_load_path",
    "interval",
    "keep_latest_k",
    "last_save_in_hf",
    "last_save_model_only",
    "load_only",
    "load_step",
)
_AC_AT = "distributed/activation_checkpoint.py:120-140"
_CHECKPOINT_AT = "components/checkpointer/base.py:274-325"
RECORD_FIELDS: dict[str, tuple[frozenset[str], str]] = {
    "FullAC.Config": (frozenset(_AC), f"{_AC_AT}, :169-171"),
    "SelectiveAC.Config": (
        frozenset([*_AC, "force_recompute_mm_shapes_by_fqns"]),
        f"{_AC_AT}, :194-207",
    ),
    "MemoryBudgetAC.Config": (
        frozenset([*_AC, "memory_budget", "visualize_memory_budget_pareto"]),
        f"{_AC_AT}, :296-313",
    ),
    "CheckpointManager.Config": (
        frozenset([*_CHECKPOINT, "async_mode"]),
        f"{_CHECKPOINT_AT}, dcp.py:135-138",
    ),
    "TorchCheckpointingManager.Config": (
        frozenset(_CHECKPOINT),
        f"{_CHECKPOINT_AT}, torch_checkpointing.py:122-124",
    ),
    "BaseLoss.Config": (frozenset(), "components/loss.py:237-239"),
    "ChunkedLossWrapper.Config": (
        frozenset(["loss_fn", "num_chunks"]),
        "components/loss.py:542-548",
    ),
    "CrossEntropyLoss.Config": (frozenset(["global_vocab_size"]), "components/loss.py:277-280"),
    "MTPLoss.Config": (
        frozenset(["mtp_scale", "global_vocab_size"]),
        "models/deepseek_v3/mtp.py:324-328",
    ),
    **OWN_RECORD_FIELDS,
}
"""The fields of the records Trainer.Config holds whole that the reader knows, by class, and
where they are at b5bcd76c (each a `@dataclass(kw_only=True, slots=True)`, torchtitan/ paths:
another name set raises AttributeError, given as a keyword TypeError): activation checkpointing's
three policies, the checkpointers (CheckpointManager.Config the default, trainer.py:105-107), the
losses; and those the plan does not read (`torchtitan_records.OWN_RECORD_FIELDS`)."""


def record_fields(callee: str) -> tuple[frozenset[str], str] | None:
    """`RECORD_FIELDS` of the class a record's callee names (`FullAC.Config`, or
    `activation_checkpoint.FullAC.Config`; `CommConfig`, or `configs.CommConfig`); None for a
    class the reader does not know."""
    parts = callee.split(".")
    return RECORD_FIELDS.get(".".join(parts[-2:])) or RECORD_FIELDS.get(parts[-1])
