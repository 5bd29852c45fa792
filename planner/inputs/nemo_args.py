"""A NeMo 2.0 `nemo llm pretrain` command line (NeMo-Run `key=value` overrides) as a plan document.

    nemo llm pretrain -y --factory llama3_8b trainer.num_nodes=2 \\
        trainer.strategy.tensor_model_parallel_size=2 data.seq_length=4096 ...

The recipe (`--factory NAME` on the line, or `planner check --nemo-model NAME`) names the model
and sets everything the line does not (`nemo_recipes`); the overrides change it. A bare key is
True: Megatron-LM's CI writes a YAML `true` as the key alone (Megatron-LM d98e8a64
tests/functional_tests/shell_test_utils/_run_training.sh). Values are read as NeMo-Run reads
them: integers, floats, True / False, None, else text.

What each key becomes: `nemo_keys` (and `nemo_unread`, the keys that are not read); the
`[parallel]` table: `nemo_parallel`; the `[training]` table: `nemo_training`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from planner.inputs import catalog
from planner.inputs.arch import MAX_SIZE
from planner.inputs.errors import InputError
from planner.inputs.megatron_fields import KEY_OF_FIELD as KEY_OF_FIELD
from planner.inputs.megatron_flags import megatron_flags
from planner.inputs.megatron_values import layer_pattern
from planner.inputs.megatron_vocab import PUBLIC_VOCAB
from planner.inputs.nemo_keys import (
    ARCH_KEYS,
    CLI,
    FACTORY,
    KEY,
    ROOTS,
    NemoLine,
    classify,
    value_of,
)
from planner.inputs.nemo_parallel import parallel_table
from planner.inputs.nemo_recipes import GPUS_PER_NODE, NEMO_SOURCE, RECIPES, Recipe
from planner.inputs.nemo_training import mxfp8_gather_note, training_table

__all__ = ["NemoReading", "is_nemo_line", "read"]


@dataclass(frozen=True)
class NemoReading:
    """A NeMo line read: the plan document and what was not read (as megatron_args.Reading)."""

    doc: dict[str, Any]
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    not_modelled: tuple[str, ...] = ()


def is_nemo_line(words: list[str]) -> bool:
    """NeMo-Run overrides (`trainer.*`, `model.*`, `data.*` ...) and no Megatron-LM flag, or
    the command `nemo llm pretrain` itself (a recipe without overrides: `nemo llm pretrain -y
    --factory llama3_8b`)."""
    known = megatron_flags()
    if any(w.partition("=")[0] in known for w in words if w.startswith("--")):
        return False
    command = any(words[i : i + 3] == ["nemo", "llm", "pretrain"] for i in range(len(words)))
    return command or any(KEY.match(w.partition("=")[0]) for w in words)


def _parse(words: list[str], where: str) -> NemoLine:
    line = NemoLine(where)
    i = 0
    while i < len(words):
        w = words[i]
        name, eq, value = w.partition("=")
        if name in FACTORY:
            if not eq:
                i += 1
                value = words[i] if i < len(words) else ""
            line.factory = value
        elif KEY.match(name):
            line.values[name] = value_of(value) if eq else True
        elif eq and (why := _unread(name)) is not None:
            raise InputError(f"{where}: {w}: {why}")
        elif w in ("finetune", "validate", "ptq", "import", "export"):
            raise InputError(
                f"{where}: nemo llm {w}: planner reads `nemo llm pretrain` lines (fine-tuning "
                "adapters and inference are not modelled)"
            )
        elif w not in CLI and not w.endswith("/nemo"):
            line.unknown.append(w)
        i += 1
    return line


VALUED = (
    "data.micro_batch_size",
    "data.global_batch_size",
    "data.seq_length",
    "trainer.num_nodes",
    "trainer.devices",
    "trainer.strategy.tensor_model_parallel_size",
    "trainer.strategy.pipeline_model_parallel_size",
    "trainer.strategy.context_parallel_size",
    "trainer.strategy.expert_model_parallel_size",
)
"""Keys NeMo needs a value for: given None, NeMo fails (its _validate_config asserts the batch
and sequence, the strategy's sizes are numbers), where planner kept the recipe's."""


def _unread(name: str) -> str | None:
    """Why an override NeMo-Run would apply, or refuse, is not read (None: not an override):
    a whole root swapped for a factory (`model=llama3_70b`, `trainer=...`: parse_factory), an
    operator override (`data.seq_length*=2`: `+= -= *= /= |= &=`, nemo_run cli_parser.py), a
    dotted key under no root of `llm.pretrain` (NeMo-Run raises "No parameter named ...")."""
    if name in ("model", "trainer", "data", "optim"):  # (log= and resume= change no memory)
        return (
            f"the whole {name} swapped for a factory's (NeMo-Run parse_factory), which planner "
            "does not read: name the recipe with --factory, and give its overrides key by key"
        )
    if name[-1:] in "+-*/|&" and KEY.match(name[:-1]):
        return (
            "NeMo-Run's operator override (+= -= *= /= |= &=) is not read: give the value "
            f"({name[:-1]}=...)"
        )
    if "." in name and name.replace(".", "").replace("_", "").isalnum():
        root = name.split(".")[0]
        return (
            f"no parameter {root!r} of llm.pretrain (NeMo-Run refuses it; its roots are "
            f"{', '.join(ROOTS)})"
        )
    return None


def _recipe(line: NemoLine, nemo_model: str | None) -> Recipe:
    named = nemo_model or line.factory
    if line.factory and nemo_model and line.factory != nemo_model:
        raise InputError(
            f"{line.where}: --factory {line.factory}: the line's recipe differs from "
            f"--nemo-model {nemo_model}"
        )
    known = ", ".join(sorted(RECIPES))
    if not named:
        raise InputError(
            f"{line.where}: NeMo `nemo llm pretrain` overrides name no model: the recipe does "
            f"(`--factory NAME` on the line, or planner check --nemo-model NAME; planner knows "
            f"{known})"
        )
    if "(" in named:
        raise InputError(
            f"{line.where}: --factory {named}: factory arguments are not read; give them as "
            "overrides (trainer.num_nodes=..., trainer.strategy.tensor_model_parallel_size=...)"
        )
    if named not in RECIPES:
        close = difflib.get_close_matches(named, RECIPES, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(
            f"{line.where}: --factory {named}: not a NeMo recipe planner maps to a zoo model"
            f"{hint}; planner knows {known}"
        )
    return RECIPES[named]


def read(
    words: list[str],
    gpu: str,
    num_gpus: int,
    where: str,
    vocab_size: int | None = None,
    nemo_model: str | None = None,
) -> NemoReading:
    """The plan document of a `nemo llm pretrain` line on `num_gpus` x `gpu`."""
    line = _parse(words, where)
    for key in VALUED:
        if key in line.values and line.values[key] is None:
            raise line.fail(key, "NeMo needs a value here (llm.api._validate_config, the strategy)")
    recipe = _recipe(line, nemo_model)
    notes = [
        f"model: NeMo recipe {recipe.factory} ({recipe.config}; {NEMO_SOURCE}) as zoo {recipe.zoo}"
    ]
    missing = list(recipe.not_modelled)
    ignored = classify(line.values, line.where, missing, notes)
    _gpu_count(line, recipe, num_gpus, notes)
    model = _model(line, recipe, vocab_size, notes)
    parallel = parallel_table(line, recipe, notes)
    _cp_positions(line, model, parallel["cp"])
    training = training_table(line, recipe, model, notes)
    missing += mxfp8_gather_note(line, training, parallel)
    doc = {
        "model": model,
        "cluster": {"gpu": gpu, "num_gpus": num_gpus},
        "training": training,
        "parallel": parallel,
    }
    return NemoReading(doc, tuple(ignored), tuple(line.unknown), tuple(notes), tuple(missing))


def _gpu_count(line: NemoLine, recipe: Recipe, num_gpus: int, notes: list[str]) -> None:
    nodes = line.get("trainer.num_nodes")
    devices = line.get("trainer.devices")
    for key, value in (("trainer.num_nodes", nodes), ("trainer.devices", devices)):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise line.fail(key, "expected a positive integer")
    if nodes is None and devices is None:
        default = recipe.num_nodes * GPUS_PER_NODE
        if default != num_gpus:
            notes.append(
                f"GPU count: --num-gpus {num_gpus} (the recipe's own is {recipe.num_nodes} "
                f"node(s) x {GPUS_PER_NODE}; the line sets neither trainer.num_nodes nor "
                "trainer.devices)"
            )
        return
    total = (nodes or recipe.num_nodes) * (devices or GPUS_PER_NODE)
    if total != num_gpus:
        raise InputError(
            f"{line.where}: trainer.num_nodes x trainer.devices = {total} GPUs, but --num-gpus "
            f"is {num_gpus}"
        )


def _model(
    line: NemoLine, recipe: Recipe, vocab_size: int | None, notes: list[str]
) -> dict[str, Any]:
    arch = catalog.get_model(recipe.zoo)
    model = arch.model_dump(exclude_defaults=True, exclude={"display_name", *recipe.derived})
    model["name"] = arch.name
    changed = []
    for key, name in ARCH_KEYS.items():
        if key not in line.values:
            continue
        value = line.get(key)
        if value is None:  # TransformerConfig's own default where it derives one
            value = _config_default(line, key, name, model)
        model[name] = value
        changed.append(f"{name}={value}")
    shared = line.flag("model.config.share_embeddings_and_output_weights")
    if shared is not None:
        model["untie_embeddings_and_output_weights"] = not shared
        changed.append(f"share_embeddings_and_output_weights={shared}")
    freq = line.get("model.config.moe_layer_freq")
    if freq is not None:
        model["moe_layer_freq"] = layer_pattern(
            str(freq), f"{line.where}: model.config.moe_layer_freq"
        )
        changed.append("moe_layer_freq")
    if _positions(line, recipe, model, notes):
        changed.append(f"max_position_embeddings={model['max_position_embeddings']} (seq_length)")
    _vocabulary(line, recipe, model, vocab_size, notes)
    for name in ("vocab_size", "make_vocab_size_divisible_by", "max_position_embeddings"):
        if model.get(name, getattr(arch, name)) != getattr(arch, name) and name not in _named(
            changed
        ):
            changed.append(f"{name}={model[name]}")
    if changed:  # a zoo model's name beside fields that change it is refused (plan_resolve)
        model["name"] = f"{arch.name}+overrides"
        model["source"] = f"{arch.source}; changed by the line: {', '.join(changed)}"
    return model


SEQ, MAX_POSITIONS = "model.config.seq_length", "model.config.max_position_embeddings"
HAS_MAX_POSITIONS = ("MixtralConfig8x7B", "MixtralConfig8x22B")
"""The recipe configs with a max_position_embeddings field (MixtralConfig's, NeMo 8cfedd72's GPT
model mixtral.py:52, :106, :121), which only their Hugging Face conversion reads (:226, :372):
NeMo builds the model from seq_length."""


def _positions(line: NemoLine, recipe: Recipe, model: dict[str, Any], notes: list[str]) -> bool:
    """The position table's length: GPTConfig.configure_model hands its seq_length to
    Megatron-Core's GPTModel as max_sequence_length (NeMo GPT model base.py:399), the rows of
    a learned table (gpt_model.py:177, language_model_embedding.py:72 @d98e8a64): the line's
    model.config.seq_length, else the recipe config's (`Recipe.config_seq_length`), never the
    zoo model's max_position_embeddings. Whether the line set it."""
    given = SEQ in line.values
    seq = line.get(SEQ) if given else recipe.config_seq_length
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise line.fail(SEQ, "expected a positive integer (GPTConfig.seq_length)")
    if seq > MAX_SIZE:  # the bound ModelArch puts on every field, here named by the line's key
        raise line.fail(SEQ, f"must be at most 2^53 = {MAX_SIZE:,} (planner's bound on a size)")
    model["max_position_embeddings"] = seq
    if MAX_POSITIONS not in line.values:
        return given
    if recipe.config not in HAS_MAX_POSITIONS:
        raise line.fail(
            MAX_POSITIONS,
            f"not a field of {recipe.config} (NeMo-Run refuses it: No parameter named "
            "max_position_embeddings); NeMo sizes the position table by model.config.seq_length "
            "(NeMo GPT model base.py:399)",
        )
    own = line.get(MAX_POSITIONS)
    if isinstance(own, bool) or not isinstance(own, int):
        why = f"expected an integer (MixtralConfig's field is an int, {NEMO_SOURCE} mixtral.py:52)"
        raise line.fail(MAX_POSITIONS, why)
    notes.append(
        f"{MAX_POSITIONS}={own!r}: {recipe.config}'s own field "
        f"(mixtral.py:52), read only by its Hugging Face conversion; NeMo builds the model from "
        f"{SEQ} ({seq})"
    )
    return given


def _cp_positions(line: NemoLine, model: dict[str, Any], cp: int) -> None:
    """NeMo's llm.api._validate_config asserts the model config's seq_length a multiple of 2 x
    context_parallel_size under context parallelism (api.py:1385-1389, NeMo 8cfedd72)."""
    seq = model["max_position_embeddings"]
    if cp > 1 and seq % (2 * cp):
        why = "NeMo asserts it a multiple of 2 x context_parallel_size"
        raise InputError(
            f"{line.where}: {SEQ}={seq}: {why} ({2 * cp}; llm.api._validate_config, "
            "api.py:1385-1389)"
        )


def _named(changed: list[str]) -> set[str]:
    """The fields named in `_model`'s list of changes ("name=value" or "name")."""
    return {c.split("=", 1)[0] for c in changed}


def _config_default(line: NemoLine, key: str, name: str, model: dict[str, Any]) -> Any:
    """What TransformerConfig.__post_init__ makes of a shape field given None: ffn_hidden_size
    4 x hidden_size, num_query_groups the attention heads (multi-head attention), kv_channels
    hidden_size / heads; any other field None is refused (NeMo's validation, or the model's
    shape, needs a value)."""
    hidden, heads = model.get("hidden_size"), model.get("num_attention_heads")
    derived = {
        "ffn_hidden_size": 4 * hidden if isinstance(hidden, int) else None,
        "num_query_groups": heads,
        "kv_channels": hidden // heads if isinstance(hidden, int) and heads else None,
    }
    value = derived.get(name)
    if value is None:
        raise line.fail(key, "planner needs a value here (None is not read)")
    return value


def _vocabulary(
    line: NemoLine, recipe: Recipe, model: dict[str, Any], vocab_size: int | None, notes: list[str]
) -> None:
    if line.get("model.config.vocab_size") is not None or recipe.vocab_in_config:
        model["make_vocab_size_divisible_by"] = 1  # GPTConfig uses a set vocab_size as it is
        why = (
            "the line's model.config.vocab_size"
            if "model.config.vocab_size" in line.values
            else f"{recipe.config}.vocab_size"
        )
        unused = f" (--vocab-size {vocab_size} not used)" if vocab_size else ""
        size = model["vocab_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise line.fail("model.config.vocab_size", "expected a positive integer")
        notes.append(f"vocabulary: {size:,}, {why}, unpadded{unused}")
        return
    tokenizer = line.get("data.tokenizer")
    if vocab_size is not None:
        model["vocab_size"] = vocab_size
        notes.append(f"vocabulary: {vocab_size:,} (--vocab-size), padded as NeMo pads")
        return
    if tokenizer is not None:
        raise line.fail(
            "data.tokenizer",
            "planner does not open tokenizers: give its vocabulary with --vocab-size N",
        )
    size, what = PUBLIC_VOCAB["GPT2BPETokenizer"]
    model["vocab_size"] = size
    notes.append(
        f"vocabulary: {size:,}, {what}: MockDataModule's default tokenizer, which "
        f"{recipe.config} takes (give --vocab-size for another tokenizer)"
    )
