"""`planner check`'s fixes said in the checked input's own terms, each one verified there.

A change (`planner.search.advice.Change`) names plan-file fields. For a check of a Megatron-LM
line, a functional test's YAML, a NeMo line or a torchtitan TOML, each change is also said as
the edits of that input (`planner.inputs.line_edits.Edit`), and kept as said only where the
input so edited, read again as `check` reads it, runs the change: the same global batch, the
same memory verdict, the peak within `PEAK_TOLERANCE` and the step within `STEP_TOLERANCE`. A
change that fails that round trip gives way to the setting's next value that holds (up to
`TRIES` values of a setting, in the advice's order: `advice.memory_choices`); where none holds,
the first is said "(plan file only)" and is not counted as making this input fit
(`planner.cli.render.print_changes` lists it apart).

The edits come from planner's own writing of the job (`planner.cli.input_edits`); each
edit set is tried first without its removals (the plainest that holds is said).
A torchtitan Python configuration is not rewritten: its changes are said in plan-file terms, as
for a plan file (its fields carry torchtitan's names one to one; a QA pass applied its tp, cp and
micro-batch changes by hand and found them right).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.cli import input_edits
from planner.inputs import megatron_args, megatron_yaml, torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.files import parse_toml
from planner.inputs.layout import Layout
from planner.inputs.line_edits import Edit, edit_flags, edit_overrides, edit_toml, toml_text
from planner.inputs.megatron_line import flags_of
from planner.inputs.plan import Job, Plan, parse_plan
from planner.inputs.plan_writer import toml_value
from planner.model import cost, host_memory, memory
from planner.search.advice import Change, by_cost
from planner.search.rules import check_plan

PEAK_TOLERANCE = 0.05 * 2**30
"""Bytes the re-read peak may differ by: half the 0.1 GiB check prints peaks to."""
STEP_TOLERANCE = 0.005
"""The re-read step time's allowed relative difference (0.5%: below what check's figures
show to three digits)."""
PLAN_ONLY = "plan file only"
TRIES = 3
"""Values of one setting tried on the input, best first, before it is said plan file only."""


@dataclass(frozen=True)
class Said:
    """A change as the input says it: `text` its edits, or why it is plan file only."""

    text: str
    verified: bool
    edits: tuple[Edit, ...] = ()
    kind: str = ""
    """The input's kind (`Source.kind`)."""


@dataclass
class Source:
    """A checked input that can be edited and read again."""

    kind: str
    """"line" (Megatron-LM), "yaml" (a test configuration), "nemo", "toml"."""
    plan: Plan
    headroom: float
    reread: Callable[[list[Edit]], Plan]
    held: dict[str, Any]
    """The settings the input gives: a line's flags (their words), a TOML's `section.key`s."""


def megatron_source(
    path: str, gpu: str, num_gpus: int | None, vocab: int | None, nemo_model: str | None
) -> tuple[megatron_args.Reading, str, Callable[[Plan, float], Source]]:
    """`megatron_args.load` of a line, YAML or NeMo line, and what makes its `Source` once its
    plan is checked (the text read once: standard input is not read twice)."""
    text, where, files = megatron_args.source(path)
    seen: list[list[str]] = []

    def capture(words: list[str]) -> list[str]:
        seen.append(words)
        return words

    reading = megatron_args.read(text, gpu, num_gpus, where, vocab, nemo_model, files, capture)
    held: dict[str, Any] = {}
    nemo = reading.kind == "NeMo overrides"
    for words in seen:
        if nemo:
            held.update(w.partition("=")[::2] for w in words if "=" in w)
        else:
            held.update(flags_of(words))
    kind = "nemo" if nemo else "yaml" if megatron_yaml.is_config(text) else "line"

    def reread(edits: list[Edit]) -> Plan:
        def apply(words: list[str]) -> list[str]:
            return edit_overrides(words, edits) if nemo else edit_flags(words, edits)

        back = megatron_args.read(text, gpu, num_gpus, where, vocab, nemo_model, files, apply)
        return check_plan(parse_plan(back.doc, Path(where)))

    def make(plan: Plan, headroom: float) -> Source:
        return Source(kind, plan, headroom, reread, held)

    return reading, where, make


def titan_source(
    path: Path, gpu: str | None, num_gpus: int | None, plan: Plan, headroom: float
) -> Source | None:
    """The `Source` of a torchtitan TOML; None for a Python configuration (said as a plan
    file's: module docstring)."""
    if path.name.partition(":")[0].endswith(".py"):
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    doc = parse_toml(text, str(path))
    comments = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))

    def reread(edits: list[Edit]) -> Plan:
        edited = comments + toml_text(edit_toml(doc, edits))
        return check_plan(torchtitan_config.load(path, gpu, num_gpus, edited))

    return Source("toml", plan, headroom, reread, input_edits.flat(doc))


def say_all(
    source: Source | None,
    choices: list[list[Change]],
    step: Callable[[Job, Layout], float] | None = None,
) -> tuple[list[Change], dict[int, Said]]:
    """The change listed for each setting and each as the input says it (by `id`; nothing for
    a plan file). `choices`: each setting's changes, best first (`advice.memory_choices`); the
    first is listed unless it fails the round trip and one of the next (`TRIES` in all) holds,
    which is listed in its place (the list ordered again by `advice.by_cost`, with `step` the
    cost check orders by)."""
    if source is None:
        return [ranked[0] for ranked in choices], {}
    listed, said = [], {}
    for ranked in choices:
        first = say(source, ranked[0])
        pick, how = ranked[0], first
        tried = []
        for other in ranked[1:TRIES] if not first.verified else ():
            back = say(source, other)
            if back.verified:
                pick, how = other, back
                break
            tried.append(other.describe())
        if not how.verified and tried:
            how = replace(how, text=f"{how.text}; tried next, not said either: {', '.join(tried)}")
        listed.append(pick)
        said[id(pick)] = how
    return by_cost(source.plan.job, listed, step), said


def json_keys(said: Said | None) -> dict[str, Any]:
    """check --json's keys of a change (none for a plan file): `in_input`, its edits of the
    input as text (where plan file only, why), `input_edits` ({"key", "value"}: a flag's words,
    a NeMo override's value, a TOML value; {"key", "remove": true}), `plan_file_only`."""
    if said is None:
        return {}
    edits = [
        {"key": e.key, "remove": True} if e.removes else _json_edit(said.kind, e)
        for e in said.edits
    ]
    return {"in_input": said.text, "input_edits": edits, "plan_file_only": not said.verified}


def verified(said: dict[int, Said], c: Change) -> bool:
    """Whether the change reads back from the input (a plan file's: always)."""
    return id(c) not in said or said[id(c)].verified


def suffix(said: dict[int, Said], c: Change) -> str:
    """The change in the input's terms, as a suffix of check's line for it."""
    s = said.get(id(c))
    if s is None:
        return ""
    return f"; {s.text}" if s.verified else f" ({PLAN_ONLY}: {s.text})"


def _json_edit(kind: str, e: Edit) -> dict[str, Any]:
    """A set edit in JSON: a flag's words (a list), a NeMo override's value, a TOML value."""
    if kind == "nemo":
        return {"key": e.key, "value": (e.values or ("",))[0]}
    return {"key": e.key, "value": list(e.values or ()) if e.value is None else e.value}


def say(source: Source, c: Change) -> Said:
    """The change's edits of the input, verified by reading it again (`Said`)."""
    new = replace(source.plan, job=c.job or source.plan.job, layout=c.layout)
    try:
        tries = input_edits.edit_sets(source.kind, source.plan, new, source.held)
    except (InputError, ValueError) as e:  # planner cannot write the job in these terms
        return Said(f"planner cannot write it so: {_first(e)}", False)
    why = "no setting of this input says it"
    plainest = []  # each set first without its removals (flags planner leaves out that do
    for edits in tries:  # nothing there: the overlaps at dp 1), then as it is
        plainest += [[e for e in edits if not e.removes], edits]
    for n, edits in enumerate(plainest):
        if not edits or edits in plainest[:n]:
            continue
        try:
            back = source.reread(edits)
        except InputError as e:
            why = f"{_text(source.kind, edits)} is refused: {_first(e)}"
            continue
        if _same(new.job, c.layout, back, source.headroom):
            return Said(_text(source.kind, edits), True, tuple(edits), source.kind)
        why = f"{_text(source.kind, edits)} reads back as another job ({_brief(back)})"
    return Said(why, False)


def _first(e: Exception) -> str:
    """An error's first line, without the input's name before its first ': '."""
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return line.split(": ", 1)[-1]


def _brief(back: Plan) -> str:
    lay = back.require_layout()
    return f"{lay.describe()}, global batch {back.job.global_batch_size}"


def _same(job: Job, lay: Layout, back: Plan, headroom: float) -> bool:
    """Whether the re-read plan runs as the change: its global batch, memory verdict (GPU and
    host), peak within PEAK_TOLERANCE and step within STEP_TOLERANCE."""
    blay = back.require_layout()
    if back.job.global_batch_size != job.global_batch_size:
        return False
    want, got = memory.estimate(job, lay, headroom), memory.estimate(back.job, blay, headroom)
    if want.fits != got.fits or abs(want.peak - got.peak) > PEAK_TOLERANCE:
        return False
    if host_memory.estimate(job, lay).fits != host_memory.estimate(back.job, blay).fits:
        return False
    step, back_step = cost.estimate(job, lay).step_time_s, cost.estimate(back.job, blay).step_time_s
    return abs(step - back_step) <= STEP_TOLERANCE * step


def _text(kind: str, edits: list[Edit]) -> str:
    """The edits as the input says them."""
    if kind == "toml":
        by: dict[str, list[str]] = {}
        for e in edits:
            section, _, key = e.key.rpartition(".")
            by.setdefault(section, []).append(
                f"remove {key}" if e.removes else f"{key} = {toml_value(e.value)}"
            )
        return "in the TOML: " + "; ".join(f"[{s}] {', '.join(ks)}" for s, ks in by.items())
    sets = [e for e in edits if not e.removes]
    gone = [e.key for e in edits if e.removes]
    if kind == "yaml":
        words = [f"{e.key}: {_yaml_value(e.values or ())}" for e in sets]
        parts, where = [", ".join(words)], "in MODEL_ARGS: "
    elif kind == "nemo":
        parts, where = (
            [" ".join(f"{e.key}={(e.values or ('',))[0]}" for e in sets)],
            "on the line: ",
        )
    else:
        parts = [" ".join(" ".join((e.key, *(e.values or ()))) for e in sets)]
        where = "on the line: "
    if gone:
        parts.append("remove " + " ".join(gone))
    return where + "; ".join(p for p in parts if p)


def _yaml_value(words: tuple[str, ...]) -> str:
    """A MODEL_ARGS value the test runner turns into these words (`megatron_yaml`: `true` a
    switch, `[a b]` several words)."""
    if not words:
        return "true"
    return words[0] if len(words) == 1 else f"[{' '.join(words)}]"
