"""Megatron-LM's `--pipeline-model-parallel-layout`: which layers each virtual pipeline stage holds.

A layout lists the pp x vpp virtual stages in layer order, separated by "|"; stage k runs on
pipeline rank k % pp as its chunk k // pp. Each stage is a string of E (the embedding), t (one
decoder layer), m (one multi-token-prediction layer) and L (the output layer and loss); "x*n"
repeats a symbol, "(...)*n" a group, commas are ignored and a stage may be empty. DeepSeek-V3's
"Et*3|(tt|)*29,m|L" on pp 16 is 32 stages: the embedding and three layers, 29 stages of two,
the MTP layer alone, the loss alone. (Megatron-LM d98e8a64,
megatron/core/transformer/pipeline_parallel_layer_layout.py: `parse_str_to_list`,
`validate_layer_layout`.)

Here a layout is the tuple of its expanded stage strings, e.g. ("Ettt", "tt", ..., "m", "L").
`parse` reads the string, `problems` says what Megatron asserts about it, `stages_of` builds the
stages of an ordinary split (even or per-rank counts), `compact` writes a layout back as a string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import groupby

SYMBOLS = frozenset("EtmL")
"""E embedding, t decoder layer, m MTP layer, L output layer and loss."""


MAX_CHARS = 1 << 17
"""The most characters (symbols and |) a layout expands to: a model's layers and stages number
thousands at most; `parse` refuses a repeat that would pass this before making it (a fuzzer's
t*99999999999 asked for 100 GB)."""


def parse(text: str) -> tuple[str, ...] | None:
    """The expanded stages of a layout string, None when it holds anything but E, t, m, L, "|",
    commas and well-formed "*n" repeats (Megatron unrolls "(...)*n" first, then "x*n"), or
    expands past MAX_CHARS."""
    flat = text.replace(",", "").replace(" ", "")
    try:
        flat = re.sub(r"\(([^()]+)\)\*(\d+)", _repeat, flat)
        flat = re.sub(r"(.)\*(\d+)", _repeat, flat)
    except _TooLong:
        return None
    if set(flat) - SYMBOLS - {"|"} or len(flat) > MAX_CHARS:
        return None
    return tuple(flat.split("|"))


class _TooLong(Exception):
    """A repeat past MAX_CHARS (`_repeat`)."""


def _repeat(m: re.Match[str]) -> str:
    """A "*n" repeat unrolled, unless it would pass MAX_CHARS."""
    digits = m.group(2)
    if len(digits) > len(str(MAX_CHARS)):  # int() refuses 4,300 digits and more
        raise _TooLong
    times = int(digits)
    if times * len(m.group(1)) > MAX_CHARS:
        raise _TooLong
    return m.group(1) * times


def problems(stages: Sequence[str], pp: int, num_layers: int, mtp_layers: int) -> str | None:
    """The first of Megatron's checks the layout breaks (its wording, our counts), or None.

    The stage count is a multiple of pp (vpp = stages / pp); in layer order the first symbol is
    E and the last L, each exactly once; the decoder layers number num_layers and the MTP layers
    mtp_num_layers, all MTP layers after every decoder layer, in one stage that is the last chunk
    of its rank and not on pipeline rank 0."""
    if len(stages) % pp:
        return f"has {len(stages)} stages, not a multiple of pipeline_model_parallel_size ({pp})"
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        return "must start with the embedding (E), given exactly once"
    if not flat.endswith("L") or flat.count("L") != 1:
        return "must end with the loss (L), given exactly once"
    if flat.count("t") != num_layers:
        return f"holds {flat.count('t')} decoder layers (t) but num_layers is {num_layers}"
    if flat.count("m") != mtp_layers:
        return f"holds {flat.count('m')} MTP layers (m) but mtp_num_layers is {mtp_layers}"
    if mtp_layers:
        if "t" in flat[flat.index("m") :]:
            return "places a decoder layer (t) after an MTP layer (m)"
        holding = [k for k, s in enumerate(stages) if "m" in s]
        vpp = len(stages) // pp
        k = holding[0]
        if len(holding) > 1:
            return "splits the MTP layers over several stages; Megatron wants them in one"
        if k // pp != vpp - 1 or k % pp == 0:
            return (
                f"puts the MTP layers on stage {k} (rank {k % pp}, chunk {k // pp}); Megatron "
                f"wants them in a rank's last chunk ({vpp - 1}) and not on rank 0"
            )
    return None


def stages_of(
    chunk_layers: Sequence[Sequence[int]], mtp_layers: int, mtp_rank: int | None = None
) -> tuple[str, ...]:
    """The stages of an ordinary split: chunk_layers[r][c] decoder layers on rank r's chunk c,
    the embedding before the first, the loss after the last, the MTP layers before the loss (or
    in the last chunk of `mtp_rank`)."""
    pp, vpp = len(chunk_layers), len(chunk_layers[0])
    stages = ["t" * chunk_layers[k % pp][k // pp] for k in range(pp * vpp)]
    stages[0] = "E" + stages[0]
    mtp_stage = pp * vpp - 1 if mtp_rank is None else (vpp - 1) * pp + mtp_rank
    stages[mtp_stage] += "m" * mtp_layers
    stages[-1] += "L"
    return tuple(stages)


def compact(stages: Sequence[str]) -> str:
    """A layout as Megatron reads it, runs of equal stages folded and repeated symbols written
    "x*n": ("Et", "tt", "tt", "tmL") -> "Et|(t*2|)*2tmL"."""

    def stage(s: str) -> str:
        return "".join(c if n == 1 else f"{c}*{n}" for c, n in _runs(s))

    parts = [stage(s) for s in stages]
    out = ""
    for s, same in groupby(parts[:-1]):  # the last stage ends the string, without "|"
        run = len(list(same))
        out += f"({s}|)*{run}" if run > 1 and s else (s + "|") * run
    return out + parts[-1]


def _runs(s: str) -> list[tuple[str, int]]:
    return [(c, len(list(g))) for c, g in groupby(s)]
