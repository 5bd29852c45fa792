"""Edits to a job as its own input says it: a Megatron-LM line's flags, a NeMo line's overrides,
a torchtitan TOML's keys; applied to what the reader reads, so the edited input can be read
again (`planner check`'s fix list states each change so, and keeps only those that, re-read,
give the change: `planner.cli.advice_input`).

A Megatron-LM flag set is its run of words replaced (every earlier occurrence dropped, the new
one appended: argparse keeps a flag's last values, so the result reads the same wherever bash
put it); a switch is a flag with no values; a removed flag loses every occurrence with its
values. A NeMo override `key=value` likewise (NeMo-Run applies overrides in order). A TOML key
is set or deleted in its table (the dotted section name as `planner.emit.torchtitan.sections`
writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.inputs.megatron_line import flag_runs
from planner.inputs.plan_writer import toml_value


@dataclass(frozen=True)
class Edit:
    """One setting of an input: `key` a Megatron-LM flag (`--tensor-model-parallel-size`), a NeMo
    key (`trainer.strategy.tensor_model_parallel_size`) or a TOML key (`parallelism.
    pipeline_parallel_degree`); `values` its words (a flag's; one for a NeMo key), or a TOML
    value; None removes it."""

    key: str
    values: tuple[str, ...] | None = ()
    value: Any = None
    """A TOML key's new value (`values` then unused)."""

    @property
    def removes(self) -> bool:
        return self.values is None


def edit_flags(words: list[str], edits: list[Edit]) -> list[str]:
    """The words with each edited flag's runs dropped and each set one appended (`Edit`)."""
    keys = {e.key for e in edits}
    head = next((i for i, w in enumerate(words) if _is_flag(w)), len(words))
    out = list(words[:head])  # the script and what precedes the first flag
    for run in flag_runs(words):
        if run.flag in keys:
            continue
        out.append(f"{run.flag}={run.values[0]}" if run.explicit else run.flag)
        out.extend(run.values[1:] if run.explicit else run.values)
    for e in edits:
        if e.values is not None:
            out += [e.key, *e.values]
    return out


def _is_flag(word: str) -> bool:
    """A word `flag_runs` starts a run at."""
    return word.startswith("--") and " " not in word.partition("=")[0]


def edit_overrides(words: list[str], edits: list[Edit]) -> list[str]:
    """A NeMo line's words with each edited `key=value` override dropped and each set one
    appended."""
    keys = {e.key for e in edits}
    out = [w for w in words if w.partition("=")[0] not in keys]
    for e in edits:
        if e.values is not None:
            out.append(f"{e.key}={e.values[0]}")
    return out


def edit_toml(doc: dict[str, Any], edits: list[Edit]) -> dict[str, Any]:
    """A copy of a TOML document with each `section.key` edit set or deleted (its tables by
    dotted name: `quantize.linear.float8.recipe_name` is in table quantize.linear.float8)."""
    out = _copy(doc)
    for e in edits:
        section, _, key = e.key.rpartition(".")
        table = out
        for part in section.split("."):
            table = table.setdefault(part, {})
        if e.removes:
            table.pop(key, None)
        else:
            table[key] = e.value
    return out


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in doc.items()}


def toml_text(doc: dict[str, Any], prefix: str = "") -> str:
    """A TOML document written back (plain values first, then each table by dotted name)."""
    plain = [(k, v) for k, v in doc.items() if not isinstance(v, dict)]
    text = f"[{prefix}]\n" if prefix and plain else ""
    text += "".join(f"{_key(k)} = {toml_value(v)}\n" for k, v in plain)
    for k, v in doc.items():
        if isinstance(v, dict):
            text += toml_text(v, f"{prefix}.{_key(k)}" if prefix else _key(k))
    return text


def _key(k: str) -> str:
    """A bare TOML key, or a quoted one where it holds other characters."""
    bare = k and all(c.isalnum() or c in "_-" for c in k)
    return k if bare else toml_value(k)
