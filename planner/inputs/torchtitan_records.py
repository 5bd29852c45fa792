"""The fields of torchtitan's own configuration records that the plan does not read (the
optimizer, the learning-rate schedule, metrics, the profiler, the validator, the data loader,
the tokenizer, communication, overrides, the model converters), so that a name their class lacks
exits 2 naming the line (`planner.inputs.torchtitan_module`), as torchtitan raises: each class is
a `@dataclass(kw_only=True, slots=True)` at pytorch/torchtitan b5bcd76c (its base
Configurable.Config too, torchtitan/config/configurable.py:40-41), so another name set raises
AttributeError, given as a keyword TypeError.

A class the user's file defines, or imports from elsewhere, is not looked into: planner does
not read class bodies, and a plain class takes any attribute.
"""

from __future__ import annotations

_CONVERTER = "model_compile_enabled"  # QuantizationConverter.Config, quantization/__init__.py:29-31

OWN_RECORD_FIELDS: dict[str, tuple[frozenset[str], str]] = {
    "OptimizersContainer.Config": (
        frozenset(["implementation", "optimizer_factory_kwargs_by_name", "param_groups"]),
        "components/optimizer/optimizer.py:103-136",
    ),
    "ParamGroupConfig": (
        frozenset(["optimizer_kwargs", "optimizer_name", "pattern"]),
        "components/optimizer/optimizer.py:41-67",
    ),
    "LRSchedulersContainer.Config": (
        frozenset(["decay_ratio", "decay_type", "min_lr_factor", "total_steps", "warmup_steps"]),
        "components/optimizer/lr_scheduler.py:51-194",
    ),
    "MetricsProcessor.Config": (
        frozenset(
            [
                "disable_color_printing",
                "enable_tensorboard",
                "enable_wandb",
                "log_freq",
                "save_for_all_ranks",
                "save_tb_folder",
            ]
        ),
        "components/metrics.py:278-304",
    ),
    "Profiler.Config": (
        frozenset(
            [
                "enable_memory_snapshot",
                "enable_profiling",
                "memory_snapshot_freq",
                "memory_snapshot_max_entries",
                "profile_freq",
                "profiler_active",
                "profiler_repeat",
                "profiler_skip_first",
                "profiler_skip_first_wait",
                "profiler_warmup",
                "save_memory_snapshot_folder",
                "save_traces_folder",
                "trace_post_processor",
            ]
        ),
        "tools/profiler.py:122-202",
    ),
    "Validator.Config": (
        frozenset(["dataloader", "enable", "freq", "steps"]),
        "components/validate.py:80-104, BaseValidator.Config :36-44",
    ),
    "BaseDataLoader.Config": (frozenset(), "components/data/loader.py:43-44"),
    "GrainDataLoader.Config": (
        frozenset(
            [
                "collator",
                "dataset",
                "num_prefetch_batches",
                "read_options",
                "repeat",
                "seed",
                "shuffle",
                "streaming_shuffle_buffer_size",
            ]
        ),
        "components/data/loader.py:58-73",
    ),
    "HuggingFaceTokenizer.Config": (frozenset(), "components/tokenizer.py:114-115"),
    "CommConfig": (
        frozenset(
            [
                "init_timeout_seconds",
                "mode",
                "save_traces_file_prefix",
                "save_traces_folder",
                "trace_buf_size",
                "train_timeout_seconds",
            ]
        ),
        "config/configs.py:317-351",
    ),
    "OverrideConfig": (frozenset(["imports"]), "config/override.py:61-91"),
    "Float8LinearConverter.Config": (
        frozenset([_CONVERTER, "emulate", "filter_fqns", "recipe_name"]),
        "components/quantization/float8.py:57-72",
    ),
    "Float8GroupedExpertsConverter.Config": (
        frozenset([_CONVERTER]),
        "components/quantization/float8.py:223-224",
    ),
    "MXFP8LinearConverter.Config": (
        frozenset([_CONVERTER, "fqns"]),
        "components/quantization/mx.py:54-60",
    ),
    "MXFP8GroupedExpertsConverter.Config": (
        frozenset([_CONVERTER, "pad_multiple", "recipe_name"]),
        "components/quantization/mx.py:153-165",
    ),
    "NVFP4LinearConverter.Config": (
        frozenset([_CONVERTER, "fqns"]),
        "components/quantization/nvfp4.py:272-279",
    ),
    "LoRAConverter.Config": (
        frozenset(["alpha", "rank", "target_modules"]),
        "components/lora.py:155-164",
    ),
}
"""Each class's fields, its bases' included, and where they are (torchtitan/ paths at
b5bcd76c)."""

TRAINER_DEFAULT_RECORDS: dict[str, str] = {
    "profiler": "Profiler.Config",
    "metrics": "MetricsProcessor.Config",
    "tokenizer": "HuggingFaceTokenizer.Config",
    "dataloader": "BaseDataLoader.Config",
    "optimizer": "OptimizersContainer.Config",
    "lr_scheduler": "LRSchedulersContainer.Config",
    "comm": "CommConfig",
    "validator": "Validator.Config",
    "override": "OverrideConfig",
}
"""The record each of these Trainer.Config fields holds where nothing sets it (its
default_factory, trainer.py:89-115 at b5bcd76c)."""

BASELINE_RECORDS: dict[str, str] = {"dataloader": "GrainDataLoader.Config"}
"""What every baseline (`torchtitan_baselines.BASELINES`) holds otherwise than Trainer.Config's
default (each config_registry function passes `dataloader=GrainDataLoader.Config(...)`; their
`optimizer=default_adamw(...)` is an OptimizersContainer.Config, the default's class)."""

FACTORIES: dict[str, str] = {"default_adamw": "OptimizersContainer.Config"}
"""Functions that return a record of a known class (`default_adamw(lr, **kwargs)`,
components/optimizer/optimizer.py:378-398: its keywords are AdamW's, not the record's fields;
fields set on its result afterwards are the class's)."""
