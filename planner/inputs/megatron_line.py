"""A Megatron-LM command line or launch script as flags and their values.

The text is read as bash would run it (`planner.inputs.shell_run`: its variables, arrays,
default expansions, conditions on known values and functions; the commands it launches, not its
`echo` lines), and each `--flag` collects the words up to the next one (`--flag=value` too; a
flag given twice keeps its last values, as argparse does). `Line` hands the values to the
reader (`megatron_args`), records which flags it looked at, and refuses a value that is still a
shell variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NamedTuple, TypeVar

from planner.inputs import shell_run
from planner.inputs.errors import InputError, named
from planner.inputs.megatron_flags import READ, flag_specs
from planner.inputs.shell_expand import not_known

T = TypeVar("T")


def tokens(text: str) -> list[str]:
    """The words of the commands a script launches (`planner.inputs.shell_run`), in order."""
    return script(text)[0]


def local_files(path: str) -> str | None:
    """A sourced file's text from the local disk (relative paths from the working directory,
    as bash takes them), None where there is no regular file of at most 1 MB to read."""
    file = Path(path).expanduser()
    try:
        if not file.is_file() or file.stat().st_size > 1 << 20:
            return None
        return file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class Launch:
    """What a script launches (`launch`): its words, its environment, and the GPU count its
    launcher asks for."""

    words: list[str]
    """Each launched command from its Python script on (`_script_args`), in order; a file
    that launches nothing with a flag: the flags its variables hold (`_held_flags`)."""
    env: dict[str, str]
    """What it assigns (`NAME=value`, `export NAME=value`, ...; arrays left out) and the
    `NAME=value` words before a command (`env NAME=value ...` too), the later setting winning."""
    world: tuple[int, str] | None
    """torchrun's (or `python -m torch.distributed.run`'s) --nproc-per-node times --nnodes (1
    where not given) before the first Python script it launches, and how it says so; None
    where no launcher says it with integers."""
    scripts: tuple[tuple[str, ...], ...] = ()
    """Each launched command that runs a Python script, from the script on, in order: where
    there are several, `read_words` picks the one to read."""
    stopped: str | None = None
    """Where bash stops before the file's end, after what it launched (`shell_run.Run.stopped`),
    for a note."""


def launch(
    text: str,
    path: str | None = None,
    files: shell_run.Files | None = None,
    where: str | None = None,
) -> Launch:
    """The script read once (`planner.inputs.shell_run`): `path` its own (its `$0`), `files`
    what reads the files it sources (none followed without). Where bash stops before the
    file's end (`planner.inputs.shell_stop`: a syntax error, `${X:?}`, a loop planner cannot see
    end) having launched no flags, an error naming the file (`where`) and the line: the file
    launches nothing there is to read (without `where`, a job's container: `Launch.stopped`)."""
    run = shell_run.commands(text, path, files)
    words = [w for cmd in run.commands for w in _script_args(cmd)]
    if not any(w.startswith("--") for w in words):  # a file of settings (MODEL_ARGS="--...")
        words = _held_flags(run.env) or words
    stopped = None if run.stopped is None else str(run.stopped)
    if where is not None and stopped is not None and not any(w.startswith("--") for w in words):
        raise InputError(
            f"{where}: {stopped}; nothing with flags is launched before it, so there is no run "
            "to read"
        )
    env = {k: v for k, v in run.env.items() if isinstance(v, str)}
    env.update(run.command_env)
    scripts = tuple(
        tuple(_script_args(c))
        for c in run.commands
        if _script_at(c) is not None and not c[0].startswith("-")
    )
    return Launch(words, env, _world_size(run.commands), scripts, stopped)


def read_words(launched: Launch, where: str) -> tuple[list[str], str | None]:
    """The words of a launch to read as one training run, and a note of what was left out.
    A file that launches several Python scripts (a checkpoint conversion, then training, then
    an evaluation) is read by its training command's flags alone (a pretrain_*.py or a
    train.py: `is_training`), or, with none, by the one command it launches; the same command
    launched again is one. Several with different flags are refused: their flags merged would
    describe no run (the last value of each flag winning, from whichever command)."""
    if len(set(launched.scripts)) <= 1:
        return launched.words, None
    training = [c for c in launched.scripts if is_training(c[0])]
    pool = list(dict.fromkeys(training or launched.scripts))
    if len(pool) > 1:
        names = ", ".join(PurePosixPath(c[0]).name for c in pool)
        kind = "training commands" if training else "Python commands"
        raise InputError(
            f"{where}: the file launches {len(pool)} {kind} with different flags ({names}): "
            "planner reads one run; keep the one to check"
        )
    left = dict.fromkeys(PurePosixPath(c[0]).name for c in launched.scripts if c not in pool)
    note = (
        f"read {PurePosixPath(pool[0][0]).name}'s flags alone; the file also launches "
        f"{', '.join(left)} (no training script)"
    )
    return list(pool[0]), note


PLANNER_ARGS = re.compile(r"# planner \S+: megatron-args launch file for job ")
"""The first line of planner's own megatron-args file (`planner.emit.prediction.header`, written
by `planner.emit.megatron.render`)."""

ENVIRONMENT_LINE = re.compile(r"# environment\b[^:]*: (.*)")
"""Its header's environment line (`planner.emit.megatron.ENVIRONMENT`): `NAME=value` words and
`(unset NAME)`."""


def planner_environment(text: str) -> dict[str, str] | None:
    """The environment planner's own megatron-args file names in its header (`PLANNER_ARGS`):
    what its prediction assumes and what planner's torchrun, slurm and k8s launch files export
    (`planner.emit.common.environment`), the `(unset NAME)` ones left out. None for any other
    file (a comment of the user's is not read)."""
    lines = text.splitlines()
    if not lines or not PLANNER_ARGS.match(lines[0]):
        return None
    for line in lines:
        if not line.startswith("#"):
            break
        found = ENVIRONMENT_LINE.fullmatch(line)
        if found is not None:
            words = re.sub(r"\(unset [^)]*\)", " ", found.group(1)).split()
            pairs = (w.partition("=") for w in words)
            return {k: v for k, eq, v in pairs if eq and re.fullmatch(r"[A-Za-z_]\w*", k)}
    return None


def script(text: str) -> tuple[list[str], dict[str, str]]:
    """A script's `Launch` words and environment, nothing sourced."""
    read = launch(text)
    return read.words, read.env


def _world_size(commands: list[list[str]]) -> tuple[int, str] | None:
    """`Launch.world` of the launched commands."""
    for command in commands:
        script_at = _script_at(command)
        if script_at is None or command[0].startswith("-"):
            continue
        opts = flags_of(command[:script_at])
        per = opts.get("--nproc_per_node") or opts.get("--nproc-per-node")
        nodes = opts.get("--nnodes") or ["1"]
        if not per or not per[0].isdecimal() or not nodes[0].isdecimal():
            continue
        p, n = int(per[0]), int(nodes[0])
        if p > 0 and n > 0:
            return p * n, f"--nproc-per-node {p} x --nnodes {n}"
    return None


LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
"""Modules `python -m` runs that launch the script named after them (torchrun's)."""


def _script_at(command: list[str]) -> int | None:
    """The index of the Python script a command runs, if any: a `.py` word, or the module of
    `-m module` (`python -m torch.distributed.run ... -m examples.mimo.pretrain_mimo`) other
    than a launcher's (LAUNCHER_MODULES)."""
    for i, w in enumerate(command):
        if w.endswith(".py") and not w.startswith("-"):
            return i
        module = command[i + 1] if w == "-m" and i + 1 < len(command) else None
        if module is not None and module not in LAUNCHER_MODULES and not module.startswith("-"):
            return i + 1
    return None


def _script_args(command: list[str]) -> list[str]:
    """A launched command from its Python script on (`torchrun ... pretrain_gpt.py --flags`,
    `nsys profile ... python pretrain_gpt.py ...`): the launcher's and profiler's own options
    are not the script's; the whole command where it names no script or is itself flags
    (`--num-layers ...`, a file of them). A module run with `-m` is spelt as its file
    (`examples.mimo.pretrain_mimo` -> examples/mimo/pretrain_mimo.py), as Python finds it."""
    at = _script_at(command)
    if at is None or command[0].startswith("-"):
        return command
    script = command[at]
    if not script.endswith(".py"):
        script = script.replace(".", "/") + ".py"
    return [script, *command[at + 1 :]]


def _held_flags(env: dict[str, shell_run.Value]) -> list[str]:
    """The words of the variables that hold flags, in the order they were set: what a file
    that only sets them (a model's configuration, sourced by a launch script) says."""
    out: list[str] = []
    for value in env.values():
        words = value.split() if isinstance(value, str) else [w for v in value for w in v.split()]
        if any(w.startswith("--") for w in words):
            out += words
    return out


class Run(NamedTuple):
    """One --flag of a line and the words that follow it (`flag_runs`)."""

    flag: str
    values: list[str]
    explicit: bool = False
    """Whether the first value was given after '=' (`--flag=value`): argparse hands the option
    that word alone, and only that word (a switch exits on it)."""


def flag_runs(words: list[str]) -> list[Run]:
    """Each --flag of the words, in order, with the values that follow it (up to the next
    --flag); --a=b is split too (`Run.explicit`), and --a= holds one empty value (argparse's
    explicit argument ''). A flag given twice is here twice. A word whose name (before '=')
    holds a space (`'--x y'`, one quoted word) is a value: argparse takes it for one, no option
    string matching it (CPython 3.12 `_parse_optional`: "if it contains a space, it was meant to
    be a positional")."""
    out: list[Run] = []
    for w in words:
        name, eq, value = w.partition("=")
        if w.startswith("--") and " " not in name:
            out.append(Run(name, [value] if eq else [], bool(eq)))
        elif out:
            out[-1].values.append(w)
    return out


def flags_of(words: list[str]) -> dict[str, list[str]]:
    """--flag -> the values that follow it (`flag_runs`). A flag given twice keeps its last
    values, as argparse does."""
    return {run.flag: run.values for run in flag_runs(words)}


class Line:
    """The flags of one command line; records which ones the reader looked at."""

    def __init__(self, flags: dict[str, list[str]], where: str) -> None:
        self.flags = flags
        self.where = where
        self.used: set[str] = set()

    def _use(self, flag: str) -> None:
        assert flag in READ, f"{flag} is read but not listed in megatron_flags.READ"
        self.used.add(flag)

    def has(self, flag: str) -> bool:
        """Whether the flag is given. Words after it that are still a shell variable or a
        command's output (`$(...)`, backquotes) are an error, whatever the flag takes: bash may
        expand them to more flags (`$(parallel_args 2)`, `$(cat args.txt)`), which the reader
        cannot know. A switch's words that are all shell variables the file does not set are
        left (noted: `megatron_choices.held_notes`): it takes none of them, whatever they expand
        to; a command's output there is still refused."""
        self._use(flag)
        values = self.flags.get(flag, ())
        switch = (spec := flag_specs().get(flag)) is not None and spec.nargs == "0"
        if switch and all("$" in v and "`" not in v and "$(" not in v for v in values):
            return flag in self.flags
        for v in values:
            if "$" in v or "`" in v:
                raise InputError(f"{self.where}: {flag}: {v!r} follows it, {not_known(v)}")
        return flag in self.flags

    def words(self, flag: str) -> list[str] | None:
        """The values of a flag (None when absent); a value that is still a shell variable, a
        command's output or arithmetic planner does not evaluate is an error, which says which
        (`shell_expand.not_known`): the reader cannot know it."""
        self._use(flag)
        if flag not in self.flags:
            return None
        values = self.flags[flag]
        for v in values:
            if "$" in v or "`" in v:
                raise InputError(f"{self.where}: {flag}: {v!r} is {not_known(v)}")
        return values

    def text(self, flag: str) -> str | None:
        values = self.words(flag)
        if values is None:
            return None
        if not values:
            raise InputError(f"{self.where}: {flag}: expected a value (got nothing)")
        return values[0]

    def integer(self, flag: str) -> int | None:
        return self._convert(flag, int, "an integer")

    def number(self, flag: str) -> float | None:
        return self._convert(flag, float, "a number")

    def _convert(self, flag: str, kind: Callable[[str], T], what: str) -> T | None:
        value = self.text(flag)
        if value is None:
            return None
        try:
            return kind(value)
        except ValueError:
            raise InputError(f"{self.where}: {flag}: expected {what} (got {value!r})") from None

    def raw(self, flag: str) -> str | None:
        """A value the reader only quotes in messages (a path; shell variables allowed)."""
        self._use(flag)
        values = self.flags.get(flag)
        return values[0] if values else None


def no_flags(words: list[str]) -> str:
    """Why a text with no --flag at all cannot be read."""
    nemo = r"^(trainer|model|data|optim|log|resume|recipe)(\.\w+)+(=|$)|^[A-Za-z_]\w*(\.\w+)+="
    if any(re.match(nemo, w) for w in words):  # not a script's name (pretrain_gpt.py)
        return (
            "no Megatron-LM flags: NeMo-style `key=value` overrides (trainer.*, model.*) are "
            "not Megatron-LM arguments"
        )
    return "no Megatron-LM flags (--num-layers, --hidden-size, ...) found"


_NOT_TRAINING = re.compile(r"generat|inference|server|eval")
"""The names of Megatron-LM's entry points that run a trained model (tools/
run_text_generation_server.py, examples' run_text_generation.py and generate_samples_gpt.py,
the inference examples): flags of their own (--out-seq-length, ...) are theirs, not misspelt
training flags."""


def is_training(script: str) -> bool:
    """Whether a Python script is one of Megatron-LM's training entry points (pretrain_*.py, an
    example's train.py)."""
    name = PurePosixPath(script).name
    return name.startswith("pretrain_") or name == "train.py"


def entry_note(words: list[str]) -> str | None:
    """What the line runs where that is not one of Megatron-LM's training scripts
    (`is_training`): its flags are still read as a training run's."""
    scripts = [PurePosixPath(w).name for w in words if w.endswith(".py")]
    if not scripts or any(is_training(s) for s in scripts):
        return None
    what = "runs a trained model" if runs_trained_model(words) else "is no pretrain_*.py"
    return f"{scripts[-1]} {what}: its model read as if it trained (training's memory and time)"


def runs_trained_model(words: list[str]) -> bool:
    """Whether every Python script the line names is a generation / inference entry point (its
    model's flags are read as a training line's, its own listed as not Megatron-LM's)."""
    scripts = [PurePosixPath(w).name for w in words if w.endswith(".py")]
    return bool(scripts) and all(_NOT_TRAINING.search(s) for s in scripts)


def flags_named(message: str, where: str, names: dict[str, str] | None) -> str:
    """An error about the plan read from a command line, naming the line's own word beside the
    plan field (`FILE: --pipeline-model-parallel-size (parallel.pp): ...`): `names` plan field ->
    word (`megatron_fields.flag_of_field` for Megatron-LM's flags, `KEY_OF_FIELD` for a NeMo
    line's keys); None leaves the message as it is."""
    return named(message, where, names or {})
