"""Read a Megatron-LM training log (what its ranks print on stdout) into runs: each run's
printed arguments, its iteration lines and its memory reports, every value with its line.

Formats (NVIDIA/Megatron-LM d98e8a64):
- arguments: `megatron/training/arguments.py` `_print_args`, called at the end of
  `validate_args` on rank 0: a line `---...--- arguments ---...---`, then one line per argument,
  `'  {} {} {}'.format(name, '.' * (48 - len(name)), value)` sorted case-insensitively, then
  `---...--- end of arguments ---...---`. Values are Python's `str()` of the validated value
  (`None`, `True`, `['core_attn']`, `torch.float32`, `AttnBackend.auto`).
- iterations: `megatron/training/training.py` `training_log`, printed by the last rank every
  `--log-interval` iterations and after the first: `[timestamp] iteration {:8d}/{:8d} |`
  followed by `name: value |` fields, among them `elapsed time per iteration (ms): {:.1f}`
  (averaged over the interval), `throughput per GPU (TFLOP/s/GPU): {:.1f}` (with
  `--log-throughput`) and `global batch size: {:5d}`.
- memory: `megatron/training/utils/common_utils.py` `report_memory`, printed by data-parallel
  rank 0 of each model-parallel group: `[Rank N] (after K iterations) memory (MB) | allocated:
  X | max allocated: Y | reserved: Z | max reserved: W`.
- vocabulary: `megatron/core/tokenizers/utils/build_tokenizer.py` `vocab_size_with_padding`
  (:141-145), on rank 0 when the tokenizer is built, after the arguments block:
  ` > padded vocab (size: {orig_vocab_size}) with {after - orig_vocab_size} dummy tokens (new
  size: {after})` (megatron/training/vocab_utils.py :36 prints the same words).

Launchers prefix lines (`srun --label` writes `0: `, torchrun `[default0]:`); every pattern is
searched anywhere in a line, after terminal colour codes are removed. Lines end at newlines only
(a progress bar's carriage returns stay inside its line, so line numbers are `grep -n`'s). A
last line without its newline (a job still writing, or killed mid-line) is not read, said in
`MegatronLog.notes`; so is a memory report another rank's output tore (two `[Rank N]` on one line:
its figures may be the other rank's). A file may hold several runs (a job that restarted, or logs
concatenated): each arguments block starts a new run. A log without arguments blocks (the last
rank's own file, which `--plan` completes) shows a restart only in its iteration numbers: every
start logs its first iteration (`training_log`'s `is_first_iteration`, training.py :3539), so a
line whose iteration does not increase (a restart from an earlier checkpoint, or from scratch) or,
once two lines past a run's first show its `--log-interval` (their gcd), one off that interval (a
restart from the checkpoint of the last line: `iteration 21` after `20`) starts a new run
(`planner.calibration.measured` measures the runs of one job on the one with the most iteration
lines): each restart's first two lines time its start-up, as the first run's do, and would enter
the median if the runs were one. Lines of other programs are skipped, and device names they print
(`nvidia-smi`, `torch.cuda.get_device_name`) are kept, so that a log of another GPU than the one
given can be refused. A `nan` or `inf` on an iteration or memory line, a figure past what a
training step can measure (an iteration time under MIN_ELAPSED_MS or over MAX_ELAPSED_MS, a day;
memory under MIN_MEMORY_MIB or over MAX_MEMORY_MIB, 16 TiB), an arguments block without its end, or
an iteration line cut short (before its newline) are errors naming the line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

from planner.inputs.errors import InputError, abbreviated

_ARGS_START = re.compile(r"-{3,} arguments -{3,}")
_ARGS_END = re.compile(r"-{3,} end of arguments -{3,}")
_ARG = re.compile(r"\s([A-Za-z_]\w*) (?:\.+ |\s)(.*)$")
_DOTTED_ARG = re.compile(r"\s([A-Za-z_]\w*) \.+ (.*)$")
"""An argument line with its dots (names under 48 characters): found first, so that a logging
prefix of words and spaces (`| INFO     | `) is not read as an argument (`_ARG` also takes the
longest names, which print no dots)."""
_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)((?:\s*\|[^|]*)+)")
_PADDED_VOCAB = re.compile(
    r"> padded vocab \(size: (\d+)\) with (\d+) dummy tokens \(new size: (\d+)\)"
)
_DEVICE = re.compile(r"\b(?:NVIDIA|AMD Instinct)[ -]([A-Z]{1,2}\d{2,3}[A-Z]?)\b")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""A terminal control sequence (colour, cursor): removed before a line is read."""

ELAPSED = "elapsed time per iteration (ms)"
THROUGHPUT = "throughput per GPU (TFLOP/s/GPU)"
BATCH = "global batch size"
MEMORY_FIELDS = ("allocated", "max allocated", "reserved", "max reserved")


@dataclass(frozen=True)
class Iteration:
    """One `training_log` line."""

    line: int
    iteration: int
    elapsed_ms: float
    tflops_per_gpu: float | None
    global_batch: int | None


@dataclass(frozen=True)
class MemoryReport:
    """One `report_memory` line, in MiB (Megatron's "MB" is 2^20 bytes)."""

    line: int
    rank: int
    after: int
    allocated_mib: float
    max_allocated_mib: float
    reserved_mib: float
    max_reserved_mib: float


@dataclass(frozen=True)
class PaddedVocab:
    """The ` > padded vocab` line: the tokenizer's size and Megatron's padded_vocab_size."""

    line: int
    size: int
    padded: int


@dataclass
class LogRun:
    """One run in a log file: its arguments block (if printed) and what followed it."""

    path: Path
    args_line: int | None = None
    args: dict[str, str] = field(default_factory=dict)
    arg_lines: dict[str, int] = field(default_factory=dict)
    iterations: list[Iteration] = field(default_factory=list)
    memory: list[MemoryReport] = field(default_factory=list)
    vocab: PaddedVocab | None = None
    """The run's ` > padded vocab` line, if it printed one."""

    def where(self, line: int | None = None) -> str:
        return f"{self.path}:{line}" if line is not None else str(self.path)


@dataclass
class MegatronLog:
    """A log file read: its runs and the device names other programs printed in it."""

    path: Path
    runs: list[LogRun]
    devices: list[tuple[int, str]]
    """(line, device family as printed, e.g. 'H100', 'A100', 'MI300X')."""
    notes: list[str] = field(default_factory=list)
    """Lines not read, and why (a last line cut short, a torn memory report)."""


MIN_ELAPSED_MS = 1e-3
"""The shortest iteration time a log can measure, 1 us: one kernel launch takes a few (a smaller
positive figure, such as 1e-320, is no measurement, and its reciprocal overflows)."""

MIN_MEMORY_MIB = 1.0
"""The least memory a training rank's report can hold: its weights alone are more than 1 MiB."""

MAX_ELAPSED_MS = 86_400_000.0
"""The longest iteration time a log is taken to measure, one day (86,400,000 ms): the longest
steps of the largest runs take minutes; a day per step is no training run (and 1e308 ms, which
`float` reads, makes the fit's squares overflow to inf and nan)."""

MAX_MEMORY_MIB = float(1 << 24)
"""The most memory (MiB) a memory report is taken to hold, 16 TiB: over 50 times the largest
catalog GPU's capacity (288 GB); a GPU's allocator cannot report more than the GPU holds. The
GPU's own capacity is checked once the run's GPU is known (`planner.calibration.measured`)."""

MAX_COUNT_DIGITS = 18
"""Digits of a rank, an iteration or a GPU count in a log (10^18 is past any of them; Python's
int() refuses 4,300 digits with an error of its own)."""


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        raise InputError(f"{where}: {what}: not a number ({text.strip()!r})") from None
    if math.isnan(value) or text.strip().lower().lstrip("+-") in ("inf", "infinity"):
        raise InputError(
            f"{where}: {what}: {text.strip()} (a nan or inf on this line; its timing and "
            "memory cannot be trusted: drop the line or the run)"
        )
    if not math.isfinite(value):
        raise InputError(f"{where}: {what}: {abbreviated(text.strip())} (out of range)")
    return value


def count(text: str, what: str, where: str) -> int:
    """A count printed in the log (digits only), refused past MAX_COUNT_DIGITS digits."""
    if len(text) > MAX_COUNT_DIGITS:
        raise InputError(f"{where}: {what}: {abbreviated(text)} (more digits than any count)")
    return int(text)


def _fields(text: str) -> dict[str, str]:
    out = {}
    for part in text.split("|"):
        name, sep, value = part.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


def _iteration(m: re.Match[str], line: int, where: str) -> Iteration:
    fields = _fields(m.group(3))
    for name, value in fields.items():
        if value.lower().lstrip("+-") in ("nan", "inf"):
            _number(value, name, where)
    if ELAPSED not in fields or ELAPSED in m.group(3).rsplit("|", 1)[-1]:
        # missing, or the line's last field without the ' |' training_log ends each with: the
        # value may be cut (`(ms): 2` of 2059.2)
        raise InputError(
            f"{where}: iteration line without a whole '{ELAPSED}' field (a line cut short: "
            "truncated log?)"
        )
    elapsed = _number(fields[ELAPSED], ELAPSED, where)
    if elapsed < MIN_ELAPSED_MS:
        raise InputError(
            f"{where}: {ELAPSED}: {fields[ELAPSED]} (must be at least {MIN_ELAPSED_MS} ms)"
        )
    if elapsed > MAX_ELAPSED_MS:
        raise InputError(
            f"{where}: {ELAPSED}: {abbreviated(fields[ELAPSED])} (more than a day, "
            f"{MAX_ELAPSED_MS:,.0f} ms, per iteration: not a training step)"
        )
    tflops = _number(fields[THROUGHPUT], THROUGHPUT, where) if THROUGHPUT in fields else None
    batch = fields.get(BATCH)
    return Iteration(
        line=line,
        iteration=count(m.group(1), "iteration", where),
        elapsed_ms=elapsed,
        tflops_per_gpu=tflops,
        global_batch=int(_number(batch, BATCH, where)) if batch is not None else None,
    )


def _memory(m: re.Match[str], line: int, where: str) -> MemoryReport:
    fields = _fields(m.group(3))
    missing = [f for f in MEMORY_FIELDS if f not in fields]
    if missing:
        raise InputError(f"{where}: memory report without {', '.join(missing)} (cut short?)")
    mib = [_number(fields[f], f, where) for f in MEMORY_FIELDS]
    for name, value in zip(MEMORY_FIELDS, mib, strict=True):
        if value < MIN_MEMORY_MIB:  # a training rank always holds its weights
            raise InputError(
                f"{where}: {name}: {fields[name]} MiB (must be at least {MIN_MEMORY_MIB:g})"
            )
        if value > MAX_MEMORY_MIB:
            raise InputError(
                f"{where}: {name}: {abbreviated(fields[name])} MiB (more than "
                f"{MAX_MEMORY_MIB:,.0f} MiB, 16 TiB, far beyond any GPU's memory)"
            )
    rank, after = count(m.group(1), "Rank", where), count(m.group(2), "after", where)
    return MemoryReport(line, rank, after, *mib)


def parse(text: str, path: Path) -> MegatronLog:
    """The runs of a Megatron-LM log. Raises InputError naming the file and line of what
    cannot be read."""
    runs: list[LogRun] = []
    devices: list[tuple[int, str]] = []
    notes: list[str] = []
    current: LogRun | None = None
    in_args = False
    lines = text.split("\n")
    cut = lines.pop()  # after the last newline: "" in a whole file
    if _ITERATION.search(cut) or _MEMORY.search(cut) or _ARGS_START.search(cut):
        notes.append(f"{path}:{len(lines) + 1}: the last line has no newline (cut short): not read")
    for number, raw in enumerate(lines, start=1):
        where = f"{path}:{number}"
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        if in_args and current is not None:
            if _ARGS_END.search(raw):
                in_args = False
                continue
            if _ARGS_START.search(raw):
                break  # reported below: a block that never ended
            m = _DOTTED_ARG.search(raw) or _ARG.search(raw)
            if m:
                current.args[m.group(1)] = m.group(2).strip()
                current.arg_lines[m.group(1)] = number
            continue
        # each pattern's fixed text first: a log is mostly other programs' lines
        if "arguments" in raw and _ARGS_START.search(raw):
            current = LogRun(path, args_line=number)
            runs.append(current)
            in_args = True
            continue
        it = _ITERATION.search(raw) if "iteration" in raw else None
        mem = _MEMORY.search(raw) if not it and "memory (MB)" in raw else None
        if mem and raw.count("[Rank ") > 1:
            notes.append(f"{where}: a memory report torn by another rank's output: not read")
            continue
        if it or mem:
            if current is None:  # lines before any arguments block: a run of its own
                current = LogRun(path)
                runs.append(current)
            if it:
                step = _iteration(it, number, where)
                if current.args_line is None and _restarts(current.iterations, step.iteration):
                    current = LogRun(path)  # a restart that printed no arguments block
                    runs.append(current)
                current.iterations.append(step)
            elif mem:
                current.memory.append(_memory(mem, number, where))
            continue
        v = _PADDED_VOCAB.search(raw) if "padded vocab" in raw else None
        if v and current is not None and current.vocab is None:
            size, padded = (count(v.group(i), "padded vocab", where) for i in (1, 3))
            current.vocab = PaddedVocab(number, size, padded)
            continue
        d = _DEVICE.search(raw) if "NVIDIA" in raw or "AMD Instinct" in raw else None
        if d:
            devices.append((number, d.group(1)))
    if in_args and current is not None:
        raise InputError(
            f"{current.where(current.args_line)}: the arguments block that starts here has no "
            "'end of arguments' line (a truncated log?)"
        )
    if not runs:
        raise InputError(
            f"{path}: not a Megatron-LM training log: no '--- arguments ---' block, no "
            f"'iteration N/M | ... {ELAPSED}' line and no memory report"
        )
    return MegatronLog(path, runs, devices, notes)


def _restarts(previous: list[Iteration], iteration: int) -> bool:
    """Whether an iteration line after `previous` (a run without an arguments block) starts
    another run: its iteration does not increase, or it is off the run's log interval (the gcd
    of two or more lines after the run's first, itself off the interval after a restart)."""
    if not previous:
        return False
    if iteration <= previous[-1].iteration:
        return True
    aligned = [it.iteration for it in previous[1:]]
    return len(aligned) >= 2 and iteration % reduce(math.gcd, aligned) != 0
