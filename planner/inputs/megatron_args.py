"""Read an existing Megatron-LM command line or launch script into a plan document.

Teams gate the launch scripts they already have: `planner check --megatron-args train.sh --gpu
h100-sxm-80gb --num-gpus 1024`. The text becomes flags (`megatron_line`: shell splitting,
`NAME=value` substitution), and the flags that decide memory become a plan document for
`planner.inputs.plan.parse_plan`: model shape and vocabulary here (`megatron_vocab` for the
tokenizer's size, `megatron_values` for per-layer patterns), batch, precision, attention kernels
and optimizer dtypes here, the layout in `megatron_layout`. Flag names and meanings: Megatron-LM
d98e8a64 (`megatron/training/arguments.py`, the config dataclasses; `megatron_flags.txt` lists
every flag its parser accepts).

Megatron-LM flags the reader does not read do not change memory or layout; they are ignored
and listed (`Reading.ignored`); those that change memory in ways planner does not model are
named in `Reading.not_modelled`. Words that are not Megatron-LM flags (a launcher's, an
inference script's) are listed too (`Reading.unknown`), unless they look like a misspelt flag
the reader reads, which is an error (`megatron_flags.typo_of`). Models planner does not
represent (encoder-decoder T5) are refused by name; hybrid Mamba stacks are read by
`megatron_hybrid`. A NeMo 2 `nemo llm pretrain` line (NeMo-Run `key=value` overrides, no
Megatron-LM flag) goes to `nemo_args`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.inputs import megatron_args_memory, nemo_args
from planner.inputs import megatron_layout as layout
from planner.inputs.errors import InputError
from planner.inputs.files import read_file, read_text
from planner.inputs.megatron_flags import (
    NOT_MODELLED,
    NOT_MODELLED_DEFAULTS,
    megatron_flags,
    typo_of,
)
from planner.inputs.megatron_hybrid import model_fields as hybrid_fields
from planner.inputs.megatron_line import Line, flags_of, no_flags, tokens
from planner.inputs.megatron_values import layer_pattern
from planner.inputs.megatron_vocab import VocabFlags, script_of, vocabulary

__all__ = ["Reading", "load", "read", "to_plan", "tokens"]

# flag -> ModelArch field (integer valued)
MODEL_INT = {
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels",
    "--max-position-embeddings": "max_position_embeddings",
    "--num-experts": "num_moe_experts",
    "--moe-router-topk": "moe_router_topk",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--q-lora-rank": "q_lora_rank",
    "--kv-lora-rank": "kv_lora_rank",
    "--qk-head-dim": "qk_head_dim",
    "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim",
    "--v-head-dim": "v_head_dim",
    "--mtp-num-layers": "mtp_num_layers",
}
# flag -> ModelArch field set to a constant
MODEL_SWITCH: dict[str, tuple[str, Any]] = {
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", True),
    "--disable-bias-linear": ("add_bias_linear", False),
    "--add-qkv-bias": ("add_qkv_bias", True),
    "--qk-layernorm": ("qk_layernorm", True),
    "--multi-latent-attention": ("multi_latent_attention", True),
}
# Megatron position embeddings that store what RoPE stores (YaRN and multimodal RoPE rescale it)
_ROPE_LIKE = {"yarn": "rope", "mrope": "rope"}


@dataclass(frozen=True)
class Reading:
    """A command line read: the plan document and what was not read."""

    doc: dict[str, Any]
    ignored: tuple[str, ...] = ()
    """Megatron-LM flags that do not change memory or layout."""
    unknown: tuple[str, ...] = ()
    """Words shaped like flags that Megatron-LM's parser lacks (a launcher's, a script's)."""
    notes: tuple[str, ...] = ()
    """How the line was read where it says less than a plan (the vocabulary's source, a batch
    schedule) or where planner's value is the same in memory (fp16 as bf16, YaRN as RoPE)."""
    not_modelled: tuple[str, ...] = ()
    """What the line asks for that planner does not model, and which way that errs."""
    kind: str = "Megatron-LM flags"
    """What the line's settings are, in messages: Megatron-LM flags or NeMo overrides."""


def to_plan(
    text: str,
    gpu: str,
    num_gpus: int,
    where: str = "<megatron-args>",
    vocab_size: int | None = None,
    nemo_model: str | None = None,
) -> dict[str, Any]:
    """A plan document (as `planner.inputs.plan.parse_plan` takes) from Megatron-LM arguments."""
    return read(text, gpu, num_gpus, where, vocab_size, nemo_model).doc


def read(
    text: str,
    gpu: str,
    num_gpus: int,
    where: str = "<megatron-args>",
    vocab_size: int | None = None,
    nemo_model: str | None = None,
) -> Reading:
    """Megatron-LM arguments as a plan document, with what was ignored and assumed.
    `vocab_size`: the tokenizer's vocabulary where the line does not imply it
    (`planner check --vocab-size`). A NeMo 2 `nemo llm pretrain` line (NeMo-Run overrides) is
    read by `nemo_args`, its model named by the line's `--factory` or by `nemo_model`."""
    words = tokens(text)
    if nemo_args.is_nemo_line(words):
        r = nemo_args.read(words, gpu, num_gpus, where, vocab_size, nemo_model)
        return Reading(r.doc, r.ignored, r.unknown, r.notes, r.not_modelled, "NeMo overrides")
    if nemo_model is not None:
        raise InputError(
            f"{where}: --nemo-model {nemo_model}: only for NeMo `nemo llm pretrain` lines "
            "(key=value overrides); this one holds Megatron-LM flags"
        )
    flags = flags_of(words)
    if not flags:
        raise InputError(f"{where}: {no_flags(words)}")
    known = megatron_flags()
    unknown = []
    for flag in flags:
        if flag in known:
            continue
        typo = typo_of(flag)
        if typo is not None:
            raise InputError(
                f"{where}: {flag}: not a Megatron-LM flag (did you mean {typo}?); Megatron-LM "
                "rejects it, and it would change the layout"
            )
        unknown.append(flag)
    line = Line(flags, where)
    notes: list[str] = []
    missing: list[str] = []
    model = _model(line, notes)
    parallel = layout.parallel(line, model["num_layers"], num_gpus)
    training = _training(line, parallel, num_gpus, notes, missing)
    megatron_args_memory.vision(line, model, parallel, training)
    model.setdefault("max_position_embeddings", training["seq_length"])
    vocab = vocabulary(
        VocabFlags(
            tokenizer_type=line.raw("--tokenizer-type"),
            tokenizer_model=line.raw("--tokenizer-model"),
            vocab_file=line.raw("--vocab-file"),
            vocab_size=line.integer("--vocab-size"),
            padded_vocab_size=line.integer("--padded-vocab-size"),
            script=script_of(words),
        ),
        vocab_size,
        where,
    )
    model["vocab_size"] = vocab.size
    if vocab.padded:
        model["make_vocab_size_divisible_by"] = 1
    elif line.has("--make-vocab-size-divisible-by"):
        model["make_vocab_size_divisible_by"] = line.integer("--make-vocab-size-divisible-by")
    notes.insert(0, f"vocabulary: {vocab.note}")
    for flag, what in NOT_MODELLED.items():
        if flag in flags and (flags[flag] or [""])[0] != NOT_MODELLED_DEFAULTS.get(flag):
            line.used.add(flag)
            missing.append(f"{flag}: {what}")
    ignored = sorted(f for f in flags if f in known and f not in line.used)
    doc = {
        "model": model,
        "cluster": {"gpu": gpu, "num_gpus": num_gpus},
        "training": training,
        "parallel": parallel,
    }
    return Reading(doc, tuple(ignored), tuple(unknown), tuple(notes), tuple(missing))


def _model(line: Line, notes: list[str]) -> dict[str, Any]:
    where = line.where
    for flag in ("--encoder-num-layers", "--decoder-num-layers"):
        if line.has(flag):
            raise InputError(
                f"{where}: {flag}: an encoder-decoder (T5) model; planner models decoder-only "
                "transformers"
            )
    model: dict[str, Any] = {}
    for flag, field in MODEL_INT.items():
        value = line.integer(flag)
        if value is not None:
            model[field] = value
    for flag, (field, value) in MODEL_SWITCH.items():
        if line.has(flag):
            model[field] = value
    model.update(hybrid_fields(line, model, notes))
    if not line.has("--group-query-attention"):
        model.pop("num_query_groups", None)  # Megatron ignores it without the switch
    if line.has("--swiglu"):
        model.update(gated_linear_unit=True, activation="swiglu")
    elif line.has("--quick-geglu"):
        model.update(gated_linear_unit=True, activation="geglu")
    elif line.has("--squared-relu"):
        model["activation"] = "squared_relu"
    norm = line.text("--normalization")
    if norm is not None:
        model["normalization"] = norm
    # Megatron's default (arguments.py): learned absolute position embeddings; the legacy
    # --use-rotary-position-embeddings sets rope
    position = line.text("--position-embedding-type") or "learned_absolute"
    if line.has("--use-rotary-position-embeddings"):
        position = "rope"
    if position in _ROPE_LIKE:
        notes.append(f"--position-embedding-type {position}: stores what rope stores")
        position = _ROPE_LIKE[position]
    model["position_embedding_type"] = position
    freq = line.text("--moe-layer-freq")
    if freq is not None:
        model["moe_layer_freq"] = layer_pattern(freq, f"{where}: --moe-layer-freq")
    for required in ("num_layers", "hidden_size", "num_attention_heads"):
        if required not in model:
            flag = next(f for f, v in MODEL_INT.items() if v == required)
            why = ""
            if line.has("--use-checkpoint-args"):
                why = (
                    " (--use-checkpoint-args takes it from the checkpoint, which planner does "
                    "not read)"
                )
            raise InputError(f"{where}: {flag}: required to size the model, but not given{why}")
    model.setdefault("ffn_hidden_size", _default_ffn(model))
    return model


def _default_ffn(model: dict[str, Any]) -> int:
    """Megatron's default ffn_hidden_size: 4h, or int(4h x 2/3 / 64) x 64 with --swiglu."""
    h = int(model["hidden_size"])
    if model.get("gated_linear_unit"):
        return int(4 * h * 2 / 3 / 64) * 64
    return 4 * h


def _training(
    line: Line, parallel: dict[str, Any], num_gpus: int, notes: list[str], missing: list[str]
) -> dict[str, Any]:
    where = line.where
    seq = line.integer("--seq-length")
    if seq is None:
        raise InputError(f"{where}: --seq-length: required, but not given")
    training: dict[str, Any] = {"seq_length": seq}
    gbs = line.integer("--global-batch-size")
    schedule = line.words("--step-batch-size-schedule")
    if schedule is not None:
        if gbs is not None:
            raise InputError(
                f"{where}: --step-batch-size-schedule: cannot be combined with "
                "--global-batch-size (Megatron-LM raises ValueError)"
            )
        gbs = _largest_batch(" ".join(schedule), where)
        notes.append(f"--step-batch-size-schedule: read at its largest batch, {gbs}")
    if gbs is None:  # Megatron's default: one micro-batch per data-parallel rank
        model_size = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1)
        gbs = parallel.get("micro_batch_size", 1) * max(num_gpus // model_size, 1)
    training["global_batch_size"] = gbs
    fp8, bf16 = line.has("--fp8-format"), line.has("--bf16")
    training["precision"] = "fp8" if fp8 else "bf16"
    if fp8:
        training["fp8_param_gather"] = line.has("--fp8-param-gather")
        recipe = line.text("--fp8-recipe")
        if recipe is not None:
            training["fp8_recipe"] = recipe
    elif line.has("--fp16"):
        notes.append("--fp16: read as bf16 (the same bytes per value)")
    elif not bf16:
        missing.append(
            "neither --bf16 nor --fp16: Megatron trains in fp32, planner counts bf16 weights and "
            "activations (the fp32 run needs more)"
        )
    _attention(line, training)
    if line.has("--no-bias-swiglu-fusion"):
        training["fused_swiglu"] = False
    for flag in ("--moe-router-num-groups", "--moe-router-group-topk"):
        value = line.integer(flag)
        if value is not None:
            training[flag[2:].replace("-", "_")] = value
    capacity = line.number("--moe-expert-capacity-factor")
    if capacity is not None:
        training["moe_expert_capacity_factor"] = capacity
    if line.has("--moe-pad-expert-input-to-capacity"):
        training["moe_pad_expert_input_to_capacity"] = True
    training.update(_optimizer_dtypes(line))
    training.update(megatron_args_memory.training_flags(line, parallel))
    if _cuda_graphs(line, notes):
        training["cuda_graphs"] = True
    return training


CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
"""Megatron-LM d98e8a64 --cuda-graph-impl choices (arguments.py; TransformerConfig
cuda_graph_impl)."""


def _cuda_graphs(line: Line, notes: list[str]) -> bool:
    """Whether the training step runs its layers as CUDA graphs: --cuda-graph-impl local |
    transformer_engine | full_iteration, or the deprecated --enable-cuda-graph (local) and
    --external-cuda-graph (transformer_engine) (arguments.py validate_args, d98e8a64).
    --cuda-graph-modules / --cuda-graph-scope naming only some of a layer's modules (attn, mlp,
    moe_router, ...) graph part of it: read as the whole layer graphed, with a note."""
    impl = line.text("--cuda-graph-impl")
    if impl is not None and impl not in CUDA_GRAPH_IMPLS:
        raise InputError(
            f"{line.where}: --cuda-graph-impl: expected one of {', '.join(CUDA_GRAPH_IMPLS)} "
            f"(got {impl!r})"
        )
    legacy = line.has("--enable-cuda-graph") or line.has("--external-cuda-graph")
    if legacy and impl not in (None, "none"):
        raise InputError(
            f"{line.where}: --cuda-graph-impl: cannot be combined with --enable-cuda-graph or "
            "--external-cuda-graph (Megatron-LM asserts it)"
        )
    on = legacy or impl not in (None, "none")
    modules = line.words("--cuda-graph-modules") or line.words("--cuda-graph-scope") or []
    parts = [m for w in modules for m in w.split(",") if m and m not in ("full", "full_iteration")]
    if on and parts:
        notes.append(
            f"--cuda-graph-modules {' '.join(modules)}: part of each layer graphed, read as the "
            "whole layer (the host's issue of the eager rest is not counted)"
        )
    return on


def _largest_batch(schedule: str, where: str) -> int:
    """The largest batch of a "THRESHOLD:BS THRESHOLD:BS ..." schedule (Megatron-LM
    num_microbatches_calculator.py: thresholds in samples or tokens, with K/M/B/T suffixes)."""
    sizes = []
    for part in schedule.split():
        _, colon, size = part.partition(":")
        if not colon or not size.isdigit() or int(size) < 1:
            raise InputError(
                f"{where}: --step-batch-size-schedule: expected THRESHOLD:BATCH pairs "
                f"(got {schedule!r})"
            )
        sizes.append(int(size))
    if not sizes:
        raise InputError(f"{where}: --step-batch-size-schedule: empty")
    return max(sizes)


def _attention(line: Line, training: dict[str, Any]) -> None:
    """The s x s attention scores are stored by the unfused paths: TE's `unfused` backend, and
    MCore's own DotProductAttention, which `--attention-backend local` and `--transformer-impl
    local` select (megatron_rules.md section 10); flash / fused / auto keep none."""
    backend = line.text("--attention-backend")
    impl = line.text("--transformer-impl")
    if backend == "local" and (line.words("--spec") or [""])[0] != "local":
        raise InputError(
            f"{line.where}: --attention-backend: 'local' needs --spec local (Megatron-LM "
            "asserts it, arguments.py:436-437)"
        )
    if backend in ("unfused", "local") or impl == "local":
        training["flash_attention"] = False


def _optimizer_dtypes(line: Line) -> dict[str, Any]:
    """Gradient buffers and Adam moments. Megatron keeps fp32 main grads unless
    --grad-reduce-in-bf16, or --main-grads-dtype bf16 with the precision-aware optimizer;
    Megatron-FSDP's grads default to the parameters' dtype (--megatron-fsdp-main-grads-dtype
    auto: DistributedDataParallelConfig.megatron_fsdp_main_grads_dtype = None, resolved in
    megatron_fsdp/param_and_grad_buffer.py `_resolve_group_grad_dtype`)."""
    out: dict[str, Any] = {}
    aware = line.has("--use-precision-aware-optimizer")
    bf16_grads = line.has("--grad-reduce-in-bf16")
    if aware and line.text("--main-grads-dtype") == "bf16":
        bf16_grads = True
    if line.has("--use-megatron-fsdp"):
        fsdp = line.text("--megatron-fsdp-main-grads-dtype") or "auto"
        bf16_grads = fsdp != "fp32"
    if bf16_grads:
        out["main_grad_dtype"] = "bf16"
    if aware:
        # both moments in 16 bits (each defaults to fp32)
        moments = [line.text(f) or "fp32" for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype")]
        if all(m in ("bf16", "fp16") for m in moments):
            out["optimizer_state_dtype"] = "bf16"
    return out


def load(
    path: str,
    gpu: str,
    num_gpus: int,
    vocab_size: int | None = None,
    nemo_model: str | None = None,
) -> tuple[Reading, str]:
    """Read a file (or '-' for standard input) of Megatron-LM arguments (or a NeMo 2 line);
    also returns how messages name the source."""
    where = "<stdin>" if path == "-" else path
    text = read_text(sys.stdin, where) if path == "-" else read_file(Path(path))
    return read(text, gpu, num_gpus, where, vocab_size, nemo_model), where
