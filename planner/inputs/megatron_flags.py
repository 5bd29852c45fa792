"""Megatron-LM's command-line flags as data, and what the reader makes of each one.

`megatron_flags.txt` (next to this module, shipped in the wheel) lists every option string
Megatron-LM's parser accepts (NVIDIA/Megatron-LM d98e8a64, the parser that pretrain_gpt.py
builds), each with the words it takes, their type and choices (`FlagSpec`; written by
benchmarks/megatron_flag_table.py, its header says how). It is read at the first use, not at
import; `megatron_choices` checks a line's words against it as argparse does.

A flag on a command line is one of:
- read: the reader (`megatron_args`) turns it into a plan field (`READ`, its table in
  `planner.inputs.megatron_read_flags`);
- a Megatron-LM flag the reader does not read: it does not change memory or layout, and is
  ignored (listed with `check --verbose`); those that do change memory or time in ways planner
  does not price say so in a note (`NOT_MODELLED`), or refuse the line (`REFUSED`; both tables
  in `planner.inputs.megatron_unread`);
- not a Megatron-LM flag (a launcher's, an inference script's): ignored and listed, unless it
  looks like a misspelt flag the reader reads (`typo_of`), which argparse would reject too
  (`allow_abbrev=False`) and which would change the layout if it were spelt right, or the line
  runs one of Megatron-LM's entry points whose parser is this table's
  (`megatron_startup.ENTRY_POINTS`), which exits on it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from planner.inputs.megatron_read_flags import FP8_WGRAD_FLAGS as FP8_WGRAD_FLAGS
from planner.inputs.megatron_read_flags import PRECISION_FLAGS as PRECISION_FLAGS
from planner.inputs.megatron_read_flags import READ as READ
from planner.inputs.megatron_unread import NOT_MODELLED as NOT_MODELLED
from planner.inputs.megatron_unread import NOT_MODELLED_DEFAULTS as NOT_MODELLED_DEFAULTS
from planner.inputs.megatron_unread import REFUSED as REFUSED

FLAGS_FILE = "megatron_flags.txt"


@dataclass(frozen=True)
class FlagSpec:
    """How Megatron-LM's parser takes one option string's words (a line of FLAGS_FILE, whose
    header says how each column is read from the source)."""

    nargs: str
    """'0' (a switch), '1' (argparse's nargs=None), '?', '+', '*', or a count."""
    type: str
    """What argparse calls on each word: str, bool, int, float, enum, one of arguments.py's own
    callables (tuple_type, ...), or '-' for a switch."""
    choices: tuple[str, ...] | None
    """The values accepted after conversion (an enum's member names), None for any."""
    where: str
    """The file and line (under megatron/) that adds it."""


TYPO_CUTOFF = 0.82
"""difflib similarity from which an unknown flag is taken for a misspelling of a flag the reader
reads. `--tensor-model-paralel-size` scores 0.98 against `--tensor-model-parallel-size`,
`--num-layer` 0.96 against `--num-layers`, `--tensor-parallel-size` 0.88, `--micro-batch` 0.84
against `--micro-batch-size`; the inference scripts' own flags in Megatron-LM's functional tests
score at most 0.80 (`--total-seq-length` against `--seq-length`) and must stay below it
(tests/inputs/test_megatron_flags.py)."""


@cache
def flag_specs() -> dict[str, FlagSpec]:
    """Every option string Megatron-LM's parser accepts, with how it takes its words (loaded
    once, at first use)."""
    text = resources.files("planner.inputs").joinpath(FLAGS_FILE).read_text(encoding="utf-8")
    specs = {}
    for line in text.splitlines():
        if line.startswith("--"):
            flag, nargs, kind, choices, where = line.split("\t")
            listed = None if choices == "-" else tuple(choices.split(","))
            specs[flag] = FlagSpec(nargs, kind, listed, where)
    return specs


@cache
def megatron_flags() -> frozenset[str]:
    """Every option string Megatron-LM's parser accepts (loaded once, at first use)."""
    return frozenset(flag_specs())


SCRIPT_FLAGS = frozenset(
    {"--dataloader-seq-length", "--disable-vision-class-token", "--dataloader-save"}
)
"""Flags of Megatron-LM's example scripts, not of its parser, never taken for a misspelling: the
two the reader reads as they are (pretrain_vlm.py's: `megatron_args_memory.vision`;
`--dataloader-seq-length` is 0.84 alike to `--decoder-seq-length`), and examples/multimodal's
`--dataloader-save` (multimodal_args.py:28 at d98e8a64, the Energon dataloader's state path;
alike to `--dataloader-type`), whose lines the multimodal check refuses by name."""


FORK_FLAGS = frozenset({"--patch-tokenizer-type", "--extra-vocab-size"})
"""Flags of Megatron-LM derivatives' own training scripts, never taken for a misspelling: Alibaba's
Pai-Megatron-Patch (its tokenizer, `--patch-tokenizer-type Qwen2Tokenizer`, and the rows it adds
to it, `--extra-vocab-size`; in its example scripts across models). They are listed as not
Megatron-LM flags: the vocabulary is then `--vocab-size`'s, the tokenizer's plus the extra rows."""


DEV_BRANCH_FLAGS = frozenset({"--offload-optimizer-states", "--use-separate-send-recv-groups"})
"""Flags of Megatron-LM's development branch that NVIDIA's Megatron-MoE-ModelZoo scripts
(e8650517, which say they run that branch: DeepSeek-V3's and Kimi-K2's GB200 lines offload the
optimizer states, Qwen3 235B's GB200 line separates the send and receive groups) pass to
pretrain_gpt.py, whose parser at d98e8a64 lacks them: listed as not Megatron-LM flags, not
refused as argparse at d98e8a64 would (`megatron_startup._refuse_unknown`), and not modelled."""


def typo_of(flag: str, read: Iterable[str] = READ) -> str | None:
    """The flag the reader reads that `flag` (not a Megatron-LM flag) is probably a misspelling
    of: the same flag with `_` for `-` or in other case, or one at least TYPO_CUTOFF alike; never
    one of SCRIPT_FLAGS or FORK_FLAGS."""
    if flag in SCRIPT_FLAGS or flag in FORK_FLAGS:
        return None
    names = sorted(read)
    normal = flag.replace("_", "-").lower()
    if normal in names:
        return normal
    close = difflib.get_close_matches(normal, names, n=1, cutoff=TYPO_CUTOFF)
    return close[0] if close else None
