"""Megatron-LM's test configurations (`tests/functional_tests/test_cases/<family>/<case>/
model_config.yaml`: a `MODEL_ARGS` mapping of flags, an `ENV_VARS` mapping) as the words its
runner passes to the training script.

The runner (Megatron-LM d98e8a64, `tests/functional_tests/shell_test_utils/_run_training.sh`)
prints each `MODEL_ARGS` entry as `key: value` with yq (aliases and `<<` merges expanded, a YAML
`true` printed `true`, an entry whose value is the empty string dropped), trims the value with
xargs (which also removes its quotes and joins its words with one space), then builds the line:
`true` -> the bare flag; a value wrapped in `( )` -> one word; wrapped in `[ ]` -> its words,
brackets stripped; holding a space, `|`, `(` or `)` -> one word; else one word. A NeMo test's
mapping (`trainer.devices: 8`: keys that are no `--flag`) becomes `key=value` words, `true` the
bare key. The `ENV_VARS` are the environment (`${NAME}` in a value takes one's value, as the
benchmark of these tests does); other placeholders (`${DATA_PATH}`) stay as they are, paths
planner does not read. The training script is the CI recipes' for the case's family folder
(`SCRIPTS`), or the mode's (`MODE_SCRIPTS`); the GPU count is the recipe's, not in the file.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Launch

if TYPE_CHECKING:
    from yaml.nodes import MappingNode, Node

CONFIG_FILE = "model_config.yaml"
"""A test case folder's configuration (tests/functional_tests/test_cases/<family>/<case>/)."""
_CONFIG = re.compile(r"^MODEL_ARGS[ \t]*:", re.MULTILINE)

SCRIPTS = {
    "bert": "pretrain_bert.py",
    "t5": "pretrain_t5.py",
    "hybrid": "pretrain_hybrid.py",
    "nemotron": "pretrain_hybrid.py",
    "multimodal-llava": "pretrain_vlm.py",
    "mimo": "examples/mimo/train.py",
}
"""Training script by the case's family folder, as Megatron-LM d98e8a64's CI recipes
(`tests/test_utils/recipes/{h100,gb200}/*.yaml`) run them; every other family (gpt, moe,
mixtral, ...) runs pretrain_gpt.py."""
DEFAULT_SCRIPT = "pretrain_gpt.py"
MODE_SCRIPTS = {
    "inference": "examples/inference/advanced/gpt_dynamic_inference.py",
    "rl": "train_rl.py",
}
"""Entry point by the file's `MODE` (the recipes' most frequent one for it): an inference test
runs a trained model, whose own flags are not misspelt training flags."""

_MERGE = "tag:yaml.org,2002:merge"
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def is_config(text: str) -> bool:
    """Whether the text is such a configuration (a top-level `MODEL_ARGS:` key), not a script."""
    return _CONFIG.search(text) is not None


@dataclass(frozen=True)
class Config:
    """A configuration read: what it launches (no GPU count: the recipe's) and how it was read."""

    launch: Launch
    note: str
    assumed: bool = False
    """The entry point is planner's guess (the file does not say which: `_script`): a flag its
    parser lacks is then listed, not refused (`megatron_startup.refuse_unparsed`)."""


def read(text: str, where: str) -> Config:
    """The words `MODEL_ARGS` makes, after the training script, and `ENV_VARS` as the
    environment."""
    top = dict(_entries(_mapping(_compose(text, where), where, "the file"), where))
    args = top.get("MODEL_ARGS")
    if args is None:
        raise InputError(f"{where}: MODEL_ARGS: expected a mapping of flags to values (got none)")
    env = {k: _value(v, where, f"ENV_VARS.{k}") or "" for k, v in _env_entries(top, where)}
    entries = [
        (k, _value(v, where, f"MODEL_ARGS.{k}"))
        for k, v in _entries(_mapping(args, where, "MODEL_ARGS"), where)
    ]
    if not entries:
        raise InputError(f"{where}: MODEL_ARGS: holds no flags")
    nemo = not any(k.startswith("-") for k, _ in entries)
    words: list[str] = []
    for key, value in entries:
        if value is not None:  # an empty string drops the entry, as yq's select does
            value = _PLACEHOLDER.sub(lambda m: env.get(m.group(1), m.group(0)), value)
            words += _nemo_words(key, value) if nemo else _flag_words(key, value, where)
    mode = top.get("MODE")
    script, why = _script(where, _value(mode, where, "MODE") if mode is not None else None)
    later = sorted(k for k in top if re.fullmatch(r"MODEL_ARGS_\d+", k))
    note = (
        "Megatron-LM test configuration: MODEL_ARGS as its runner (_run_training.sh) passes them"
        + ("" if nemo else f", after {script} ({why})")
        + (f"; {', '.join(later)} (a later run's) not read" if later else "")
    )
    launched = Launch(([] if nemo else [script]) + words, env, None)
    return Config(launched, note, why == ASSUMED)


def _compose(text: str, where: str) -> Node:
    import yaml  # only where a configuration is read: the command line starts without it

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{where}: not valid YAML{at}: {problem}") from None
    if node is None:
        raise InputError(f"{where}: an empty YAML file")
    return node


def _mapping(node: Node, where: str, what: str) -> MappingNode:
    from yaml.nodes import MappingNode

    if not isinstance(node, MappingNode):
        raise InputError(f"{where}: {what}: expected a mapping (key: value lines)")
    return node


def _entries(
    node: MappingNode, where: str, within: frozenset[int] = frozenset()
) -> list[tuple[str, Node]]:
    """The mapping's (key, value) pairs in order, duplicates kept (the later one wins where a
    flag is read twice, as argparse takes it), `<<` merges expanded where no key of the mapping's
    own overrides them (yq's explode); `within`: the mappings being expanded (a merge of one of
    them is a cycle)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if id(node) in within:
        raise InputError(
            f"{where}: '<<': a mapping merges itself (line {node.start_mark.line + 1})"
        )
    within |= {id(node)}
    own = {k.value for k, _ in node.value if isinstance(k, ScalarNode) and k.tag != _MERGE}
    out: list[tuple[str, Node]] = []
    for key, value in node.value:
        if key.tag == _MERGE:
            merged = value.value if isinstance(value, SequenceNode) else [value]
            for m in merged:
                if not isinstance(m, MappingNode):
                    raise InputError(f"{where}: '<<': merges a mapping (an &anchor's), not this")
                out += [(k, v) for k, v in _entries(m, where, within) if k not in own]
        elif isinstance(key, ScalarNode):
            out.append((key.value, value))
        else:
            raise InputError(
                f"{where}: a key that is not a plain word (line {key.start_mark.line + 1})"
            )
    return out


def _env_entries(top: dict[str, Node], where: str) -> list[tuple[str, Node]]:
    env = top.get("ENV_VARS")
    return [] if env is None else _entries(_mapping(env, where, "ENV_VARS"), where)


def _value(node: Node, where: str, field: str) -> str | None:
    """A value as yq prints it: a YAML true `true`, a null `null`, a number or word its own
    text; None for the empty string (whose entry the runner drops)."""
    from yaml.nodes import ScalarNode

    if not isinstance(node, ScalarNode):
        raise InputError(
            f"{where}: {field}: a YAML list or mapping, which the runner does not pass as a "
            'flag\'s value; write the words as one string ("[a b c]" gives three)'
        )
    text = str(node.value)
    if node.style is None and text in _TRUE:
        return "true"
    if node.style is None and text in _NULL:
        return "null"
    if "\n" in text.strip():
        raise InputError(f"{where}: {field}: a value over several lines (the runner reads one)")
    return text or None


def _flag_words(key: str, value: str, where: str) -> list[str]:
    """One MODEL_ARGS entry's words (the runner's cases, in its order)."""
    try:
        value = " ".join(shlex.split(value))  # xargs: trims, drops quotes, one space between
    except ValueError:
        raise InputError(
            f"{where}: MODEL_ARGS.{key}: {value!r}: an unmatched quote (the runner's xargs "
            "stops on it)"
        ) from None
    if value == "true":
        return [key]
    if value in _FALSE:  # a switch given a value: Megatron's argparse stops on the stray word
        raise InputError(
            f"{where}: MODEL_ARGS.{key}: {value}: the runner passes `{key} {value}`, which "
            "Megatron-LM's parser refuses (a switch takes no value): leave the entry out"
        )
    if re.fullmatch(r"\([^)]+\)", value):
        return [key, value]
    if re.fullmatch(r"\[[^\]]+\]", value):
        return [key, *value[1:-1].split()]
    return [key, value]


def _nemo_words(key: str, value: str) -> list[str]:
    """A NeMo test's entry: `key=value`, the bare key for true."""
    return [key] if value == "true" else [f"{key}={value}"]


def _script(where: str, mode: str | None) -> tuple[str, str]:
    """The entry point the CI runs the configuration with, and why."""
    if mode in MODE_SCRIPTS:
        return MODE_SCRIPTS[mode], f"MODE {mode}"
    parts = PurePath(where).parts
    if len(parts) >= 3 and parts[-1].endswith((".yaml", ".yml")):
        family = parts[-3]
        if family in SCRIPTS:
            return SCRIPTS[family], f"the CI's script for the {family} family"
        if "test_cases" in parts[:-3]:
            return DEFAULT_SCRIPT, f"the CI's script for the {family} family"
    return DEFAULT_SCRIPT, ASSUMED


ASSUMED = "assumed: the file does not name its script"
