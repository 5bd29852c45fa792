"""Read an existing Megatron-LM command line or launch script into a plan document.

Teams gate the launch scripts they already have: `planner check --megatron-args train.sh --gpu
h100-sxm-80gb --num-gpus 1024`. The text becomes flags (`megatron_line`: shell splitting,
`NAME=value` substitution), and the flags that decide memory become a plan document for
`planner.inputs.plan.parse_plan`: the model shape in `megatron_model` (`megatron_values` for
per-layer patterns), the vocabulary here (`megatron_vocab` for the tokenizer's size), batch,
precision, attention kernels and optimizer dtypes in `megatron_training`, the layout in
`megatron_layout`. Flag names and meanings: Megatron-LM d98e8a64
(`megatron/training/arguments.py`, the config dataclasses; `megatron_flags.txt` lists every flag
its parser accepts).

Megatron-LM flags the reader does not read do not change memory or layout; they are ignored
and listed (`Reading.ignored`); those that change memory in ways planner does not model are
named in `Reading.not_modelled`. Words after the script that are not Megatron-LM flags (a
fork's, an inference script's) are listed too (`Reading.unknown`; a launcher's options before
the script are not read, `megatron_line.launch`), except on Megatron-LM's own training entry
points, whose parser exits on them (`megatron_startup.ENTRY_POINTS`), and unless they look like
a misspelt flag the reader reads, which is an error (`megatron_flags.typo_of`) on a training
line; a line that
launches only a generation / inference entry point keeps its own flags
(`megatron_line.runs_trained_model`). T5's encoder-decoder lines are read by `megatron_t5`;
hybrid Mamba stacks by `megatron_hybrid`; gated delta nets by `megatron_gdn`, DeepSeek sparse
attention by `megatron_dsa`. A NeMo 2 `nemo llm pretrain` line (NeMo-Run `key=value` overrides,
no Megatron-LM flag) goes to `nemo_args`. A Megatron-LM test configuration (a functional test's
`model_config.yaml`: MODEL_ARGS and ENV_VARS) becomes its runner's words in `megatron_yaml`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.inputs import (
    catalog,
    launch_files,
    megatron_args_memory,
    megatron_asserts,
    megatron_dsa,
    megatron_gdn,
    megatron_t5,
    megatron_training,
    megatron_yaml,
    nemo_args,
    sbatch,
)
from planner.inputs import megatron_layout as layout
from planner.inputs.errors import InputError
from planner.inputs.files import is_file, read_file, read_text
from planner.inputs.megatron_choices import held_notes, refuse_choices, refuse_stray_words
from planner.inputs.megatron_fields import flag_of_field
from planner.inputs.megatron_flags import (
    NOT_MODELLED,
    NOT_MODELLED_DEFAULTS,
    REFUSED,
    megatron_flags,
    typo_of,
)
from planner.inputs.megatron_line import (
    Launch,
    Line,
    entry_note,
    flag_runs,
    flags_of,
    launch,
    local_files,
    no_flags,
    planner_environment,
    read_words,
    runs_trained_model,
    tokens,
)
from planner.inputs.megatron_model import model_table
from planner.inputs.megatron_startup import micro_batch_note, refuse_unparsed
from planner.inputs.megatron_vocab import VocabFlags, script_of, vocabulary
from planner.inputs.shell_run import Files

__all__ = ["Reading", "load", "read", "source", "to_plan", "tokens"]


@dataclass(frozen=True)
class Reading:
    """A command line read: the plan document and what was not read."""

    doc: dict[str, Any]
    ignored: tuple[str, ...] = ()
    """Megatron-LM flags that do not change memory or layout."""
    unknown: tuple[str, ...] = ()
    """Words shaped like flags that Megatron-LM's parser lacks (a fork's, another script's)."""
    notes: tuple[str, ...] = ()
    """How the line was read where it says less than a plan (the vocabulary's source, a batch
    schedule) or where planner's value is the same in memory (fp16 as bf16, YaRN as RoPE)."""
    not_modelled: tuple[str, ...] = ()
    """What the line asks for that planner does not model, and which way that errs."""
    kind: str = "Megatron-LM flags"
    """What the line's settings are, in messages: Megatron-LM flags or NeMo overrides."""
    field_names: dict[str, str] | None = None
    """The line's words for the plan fields errors name (`megatron_line.flags_named`):
    Megatron-LM's flags (`megatron_fields.flag_of_field`), a NeMo line's keys
    (`megatron_fields.KEY_OF_FIELD`); None: planner's field names alone."""


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
    num_gpus: int | None,
    where: str = "<megatron-args>",
    vocab_size: int | None = None,
    nemo_model: str | None = None,
    files: Files | None = None,
    edit: Callable[[list[str]], list[str]] | None = None,
) -> Reading:
    """Megatron-LM arguments as a plan document, with what was ignored and assumed.
    `num_gpus` None: the GPU count the script's launcher asks for (`megatron_line.Launch`),
    noted. `files`: what reads the files the script sources (`where` then its path, its `$0`).
    `vocab_size`: the tokenizer's vocabulary where the line does not imply it
    (`planner check --vocab-size`). A NeMo 2 `nemo llm pretrain` line (NeMo-Run overrides) is
    read by `nemo_args`, its model named by the line's `--factory` or by `nemo_model`. `edit`:
    what changes each launched command's words before they are read (`planner.inputs.
    line_edits`: a fix of `planner check`'s, read back)."""
    launch_files.refuse_bridge(text, where)
    with _shallow(where):
        config = megatron_yaml.read(text, where) if megatron_yaml.is_config(text) else None
        if config:
            launched = config.launch
        elif launch_files.is_job(text):  # `launch --target k8s`: its containers' words
            launched = launch_files.read_job(text, where)
        else:
            launched = launch(text, where if files else None, files, where)
    if edit is not None:
        scripts = tuple(tuple(edit(list(c))) for c in launched.scripts)
        launched = replace(launched, words=edit(launched.words), scripts=scripts)
    header_env = planner_environment(text)
    if header_env:  # planner's megatron-args file: its header's environment, as launched
        launched = replace(launched, env={**header_env, **launched.env})
    guessed = config is not None and config.assumed  # its entry point planner's guess
    if num_gpus is not None:
        reading = _read(launched, gpu, num_gpus, where, vocab_size, nemo_model, guessed)
    elif launched.world is None:
        why = (
            "a test configuration does not hold its GPU count (its CI recipe does: Megatron-LM's "
            "runner starts 8 processes a node, 4 on a GB200 tray)"
            if config
            else "the file launches no torchrun with --nproc-per-node (and --nnodes) in numbers"
        )
        raise InputError(f"{where}: --num-gpus: {why}: give --num-gpus N")
    else:
        count, how = launched.world
        reading = _read(launched, gpu, count, where, vocab_size, nemo_model, guessed)
        note = f"GPU count {count:,}: the launcher's {how}"
        reading = replace(reading, notes=(note, *reading.notes))
    if config is not None:
        reading = replace(reading, notes=(config.note, *reading.notes))
    segment = sbatch.domain_used(text, gpu, where)  # a Slurm script's #SBATCH --segment
    if segment is not None:
        reading.doc["cluster"]["gpus_per_domain_used"] = segment[0]
        reading = replace(reading, notes=(segment[1], *reading.notes))
    if header_env:
        reading = replace(reading, notes=(_environment_note(header_env), *reading.notes))
    if launched.stopped is not None:  # bash stops there, after what is read (shell_stop)
        note = f"{launched.stopped}; the commands launched before it are read"
        reading = replace(reading, notes=(note, *reading.notes))
    return reading


def _environment_note(env: dict[str, str]) -> str:
    """What a reading of planner's own megatron-args file says of the environment it applied
    (`megatron_line.planner_environment`)."""
    pairs = " ".join(f"{k}={v}" for k, v in env.items())
    return (
        f"environment read from the file's planner header: {pairs} (the environment its "
        "prediction assumes, which planner's torchrun, slurm and k8s files export; a job "
        "launched without it differs)"
    )


def _read(
    launched: Launch,
    gpu: str,
    num_gpus: int,
    where: str,
    vocab_size: int | None,
    nemo_model: str | None,
    guessed: bool = False,
) -> Reading:
    """`read` of the script's launched words and environment at `num_gpus`; `guessed`: the
    entry point is planner's guess (`megatron_yaml.Config.assumed`)."""
    words, picked = read_words(launched, where)
    env = launched.env
    if nemo_args.is_nemo_line(words):
        r = nemo_args.read(words, gpu, num_gpus, where, vocab_size, nemo_model)
        return Reading(
            r.doc,
            r.ignored,
            r.unknown,
            r.notes,
            r.not_modelled,
            "NeMo overrides",
            nemo_args.KEY_OF_FIELD,
        )
    if nemo_model is not None:
        holds = "holds Megatron-LM flags" if flags_of(words) else "holds no such overrides"
        raise InputError(
            f"{where}: --nemo-model {nemo_model}: only for NeMo `nemo llm pretrain` lines "
            f"(key=value overrides); this one {holds}"
        )
    flags = flags_of(words)
    if not flags:
        raise InputError(f"{where}: {no_flags(words)}")
    if "--yaml-cfg" in flags:  # megatron/training/arguments.py parse_args -> yaml_arguments
        raise InputError(
            f"{where}: --yaml-cfg {' '.join(flags['--yaml-cfg'])}: Megatron-LM then takes every "
            "argument from that file (its experimental load_yaml ignores the command line's), "
            "which planner does not read: give the flags on the line"
        )
    runs_model = runs_trained_model(words)
    known = megatron_flags()
    unknown = []
    for flag in flags:
        if flag in known or flag == megatron_gdn.OLD_FLAG:  # a development branch's, read
            continue
        typo = typo_of(flag)
        if typo is not None and not runs_model:
            raise InputError(
                f"{where}: {flag}: not a Megatron-LM flag (did you mean {typo}?); Megatron-LM "
                "rejects it, and it would change the layout"
            )
        unknown.append(flag)
    try:
        refuse_choices(flags, where)
        refuse_stray_words(flag_runs(words), where)
    except InputError as e:
        raise InputError(f"{e}{_other_parser(words, runs_model)}") from None
    refuse_unparsed(words, unknown, not runs_model, where, named=not guessed)
    line = Line(flags, where)
    notes = [n for n in (picked, entry_note(words)) if n is not None]
    notes.extend(held_notes(flag_runs(words)))
    missing: list[str] = []
    model = model_table(line, notes, missing)
    parallel = layout.parallel(line, model["num_layers"], num_gpus, missing)
    vpp = megatron_asserts.virtual_size(parallel)  # a layout's or hybrid pattern's too
    megatron_asserts.refuse(line, model["position_embedding_type"], vpp, trains=not runs_model)
    training = megatron_training.training_table(line, parallel, num_gpus, notes, missing)
    training.update(megatron_dsa.training_fields(line, notes))
    megatron_training.environment_fields(env, training, where)
    megatron_args_memory.vision(line, model, parallel, training)
    megatron_t5.t5_fields(line, model, training, notes)
    missing += megatron_args_memory.mimo(line, training)
    missing += megatron_args_memory.deterministic_note(line, _blackwell(gpu))
    missing += megatron_args_memory.deterministic_sinks_note(line, model)
    missing += megatron_args_memory.mxfp8_gather_note(line, training, parallel)
    notes.extend(micro_batch_note(line, not runs_model))
    if "max_position_embeddings" not in model:
        model["max_position_embeddings"] = training["seq_length"]
        notes.extend(max_position_note(line))
    vocab = vocabulary(
        VocabFlags(
            tokenizer_type=line.raw("--tokenizer-type"),
            tokenizer_model=line.raw("--tokenizer-model"),
            vocab_file=line.raw("--vocab-file"),
            vocab_size=line.integer("--vocab-size"),
            padded_vocab_size=line.integer("--padded-vocab-size"),
            script=script_of(words),
            tiktoken_pattern=line.raw("--tiktoken-pattern"),
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
    refused = next((f for f in REFUSED if f in flags), None)
    if refused is not None:
        raise InputError(f"{line.where}: {refused}: planner does not model it: {REFUSED[refused]}")
    for flag, what in NOT_MODELLED.items():
        if flag in flags and (flags[flag] or [""])[0] not in NOT_MODELLED_DEFAULTS.get(flag, ()):
            line.used.add(flag)
            missing.append(f"{flag}: {what}")
    ignored = sorted(f for f in flags if f in known and f not in line.used)
    doc = {
        "model": model,
        "cluster": {"gpu": gpu, "num_gpus": num_gpus},
        "training": training,
        "parallel": parallel,
    }
    return Reading(
        doc,
        tuple(ignored),
        tuple(unknown),
        tuple(notes),
        tuple(missing),
        field_names=flag_of_field(),
    )


def _other_parser(words: list[str], runs_model: bool) -> str:
    """What a refusal of a line's words adds where its script is no Megatron-LM entry point
    (tools/checkpoint/checkpoint_inspector.py, a click command): its own parser may take them."""
    scripts = [Path(w).name for w in words if w.endswith(".py")]
    if runs_model or entry_note(words) is None:
        return ""
    return (
        f" ({scripts[-1]} is no Megatron-LM training entry point: its own parser decides; "
        "planner reads a training line's flags)"
    )


def max_position_note(line: Line) -> list[str]:
    """What a line without --max-position-embeddings is told: Megatron-LM requires the flag
    (d98e8a64 validate_args: `_check_arg_is_not_none(args, 'max_position_embeddings')`) unless
    the checkpoint's saved arguments supply it (--use-checkpoint-args, read before the check)."""
    if line.has("--use-checkpoint-args"):
        return []
    return [
        "--max-position-embeddings: not given, read as --seq-length; Megatron-LM requires it "
        "(validate_args stops at start-up without it): add it to the line"
    ]


def _blackwell(gpu: str) -> bool:
    """Whether the catalog GPU is a Blackwell part (False for a name the plan will refuse)."""
    try:
        return catalog.get_gpu(gpu).is_blackwell
    except InputError:
        return False


@contextmanager
def _shallow(where: str) -> Iterator[None]:
    """Reading a script (or a test configuration) nested beyond Python's recursion (thousands
    of `(`, `${` or `[`: none nests so) is bad input, not a traceback."""
    try:
        yield
    except RecursionError:
        raise InputError(f"{where}: the file nests too deeply to read") from None


def load(
    path: str,
    gpu: str,
    num_gpus: int | None,
    vocab_size: int | None = None,
    nemo_model: str | None = None,
) -> tuple[Reading, str]:
    """Read a file (or '-' for standard input) of Megatron-LM arguments (or a NeMo 2 line, or
    a test configuration; a test case's folder reads its model_config.yaml);
    also returns how messages name the source. `num_gpus` None: the script's launcher's
    (`read`)."""
    text, where, files = source(path)
    return read(text, gpu, num_gpus, where, vocab_size, nemo_model, files), where


def source(path: str) -> tuple[str, str, Files | None]:
    """What `load` reads: the file's text (standard input's for '-', a test case folder's
    model_config.yaml), how messages name it, and what reads the files it sources."""
    if path != "-" and is_file(Path(path) / megatron_yaml.CONFIG_FILE):
        path = str(Path(path) / megatron_yaml.CONFIG_FILE)  # a test case's folder: its config
    where = "<stdin>" if path == "-" else path
    text = read_text(sys.stdin, where) if path == "-" else read_file(Path(path))
    return text, where, None if path == "-" else local_files  # what it sources, from the disk
