"""Megatron-LM's parser flag by flag, read statically from its source: how many words each option
takes, the type argparse converts them with, and the choices it accepts.

    python benchmarks/megatron_flag_table.py [--mirror GITDIR] [--write]

GITDIR: a Megatron-LM git directory holding COMMIT (default: the local mirror). Nothing is
imported from it (no torch): arguments.py and the config dataclasses are parsed with `ast`, and
the parser pretrain_gpt.py builds is rebuilt as Megatron-LM builds it (COMMIT):
megatron/training/arguments.py parse_args -> add_megatron_arguments -> each _add_*_args, whose
`add_argument` calls are read as written and whose `ArgumentGroupFactory(Config, exclude=...)`
groups are generated as megatron/training/argument_utils.py `_build_argparse_kwargs_from_field`
and `_extract_type` do (a bool field: store_true, or store_false as --no-/--disable- where its
default is not False; Optional[X] / X | None: X; list[X]: nargs '+'; Literal: the type of its
values, with them as choices; an Enum: its member names; `argparse_meta` wins), then
megatron/post_training/arguments.py add_modelopt_args. Printed: a count by arity and type, and
the custom type callables. With --write, planner/inputs/megatron_flags.txt is rewritten, its
option strings checked equal to the ones the file lists now (dumped from the imported parser).
"""

from __future__ import annotations

import argparse
import ast
import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "planner" / "inputs" / "megatron_flags.txt"
MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"

ARGUMENTS = "megatron/training/arguments.py"
MODELOPT = "megatron/post_training/arguments.py"
ENUMS = "megatron/core/transformer/enums.py"
CONFIGS = {
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "RNGConfig": "megatron/training/config/common_config.py",
    "ProfilingConfig": "megatron/training/config/common_config.py",
    "DistributedInitConfig": "megatron/training/config/common_config.py",
    "TrainingConfig": "megatron/training/config/training_config.py",
    "ValidationConfig": "megatron/training/config/training_config.py",
    "SchedulerConfig": "megatron/training/config/training_config.py",
    "LoggerConfig": "megatron/training/config/training_config.py",
    "CheckpointConfig": "megatron/training/config/training_config.py",
    "TokenizerConfig": "megatron/training/config/training_config.py",
    "RerunStateMachineConfig": "megatron/training/config/resilience_config.py",
    "StragglerDetectionConfig": "megatron/training/config/resilience_config.py",
    "FaultInjectorConfig": "megatron/core/fault_injector.py",
}
"""Where each config class ArgumentGroupFactory is given is defined (arguments.py imports)."""

CUSTOM = ("tuple_type", "moe_freq_type", "la_freq_type", "no_rope_freq_type")
"""arguments.py's own type callables (tuple_type :377, moe_freq_type :327, la_freq_type :352,
no_rope_freq_type :304), which planner reproduces by name (`megatron_argparse`)."""

KITCHEN = "HAVE_KITCHEN"
"""arguments.py:3752: --kitchen-config-file and --kitchen-recipe-number (a mutually exclusive
pair) are added only where NVIDIA's internal kitchen package imports; left out, as from the
dumped parser."""

CUDA_GRAPH_TYPE = "_parse_cuda_graph_modules_arg"
"""arguments.py:256: a word of a fixed set, else a CudaGraphModule member's name."""


@dataclass
class Spec:
    names: list[str]
    nargs: str  # '0', '1' (argparse's None), '?', '+', '*', or a count
    type: str  # str, int, float, bool, enum, or the name of a custom callable
    choices: tuple[str, ...] | None
    where: str


class Source:
    """The mirror's files at COMMIT, parsed once."""

    def __init__(self, gitdir: str) -> None:
        self.gitdir = gitdir
        self.trees: dict[str, ast.Module] = {}

    def tree(self, path: str) -> ast.Module:
        if path not in self.trees:
            text = subprocess.run(
                ["git", "--git-dir", self.gitdir, "show", f"{COMMIT}:{path}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            self.trees[path] = ast.parse(text)
        return self.trees[path]

    def classes(self, path: str) -> dict[str, ast.ClassDef]:
        return {c.name: c for c in self.tree(path).body if isinstance(c, ast.ClassDef)}

    def enum_names(self, name: str) -> tuple[str, ...] | None:
        """The member names of an Enum (enums.py's, or signal.Signals from this Python on
        Linux, as Megatron-LM runs), None for any other name."""
        if name == "signal.Signals":
            return tuple(sorted(signal.Signals.__members__))
        cls = self.classes(ENUMS).get(name)
        if cls is None or not any("Enum" in ast.unparse(b) for b in cls.bases):
            return None
        return tuple(
            t.id
            for st in cls.body
            if isinstance(st, ast.Assign)
            for t in st.targets
            if isinstance(t, ast.Name) and not t.id.startswith("_")
        )


def _nargs(kw: dict[str, ast.expr]) -> str:
    action = ast.unparse(kw["action"]).strip("'\"") if "action" in kw else None
    if action is not None:
        zero = ("store_true", "store_false", "store_const", "count")
        if action in zero or action == "argparse.BooleanOptionalAction":
            return "0"
        if action not in ("store", "append"):
            raise SystemExit(f"unknown action {action}")
    if "nargs" not in kw:
        return "1"
    return str(ast.literal_eval(kw["nargs"]))


def _hand_written(src: Source, path: str, call: ast.Call) -> Spec:
    """One `add_argument` call of arguments.py (or the modelopt file)."""
    names = [ast.literal_eval(a) for a in call.args]
    kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if len(kw) != len(call.keywords):
        raise SystemExit(f"{path}:{call.lineno}: **kwargs")
    if "BooleanOptionalAction" in ast.unparse(kw.get("action", ast.Constant(None))):
        names += ["--no-" + n[2:] for n in names if n.startswith("--")]  # argparse :881
    kind = ast.unparse(kw["type"]) if "type" in kw else "str"
    nargs = _nargs(kw)
    if nargs == "0":
        kind = "-"  # no word to convert (BooleanOptionalAction's type=bool is never called)
    choices = None
    if "choices" in kw:
        choices = tuple(str(c) for c in ast.literal_eval(kw["choices"]))
    if kind == CUDA_GRAPH_TYPE:
        choices = _cuda_graph_words(src)
    elif kind not in ("-", "str", "int", "float", "bool", *CUSTOM):
        raise SystemExit(f"{path}:{call.lineno}: unknown type {kind}")
    return Spec(names, nargs, kind, choices, f"{path[9:]}:{call.lineno}")


def _cuda_graph_words(src: Source) -> tuple[str, ...]:
    """The words _parse_cuda_graph_modules_arg returns for: its set literal, then the names
    of the Enum it looks the word up in (arguments.py:256)."""
    func = next(
        f
        for f in src.tree(ARGUMENTS).body
        if isinstance(f, ast.FunctionDef) and f.name == CUDA_GRAPH_TYPE
    )
    words = next(n for n in ast.walk(func) if isinstance(n, ast.Set))
    enum = next(n for n in ast.walk(func) if isinstance(n, ast.Subscript))
    members = src.enum_names(ast.unparse(enum.value))
    assert members is not None
    return tuple(sorted(ast.literal_eval(words))) + members


def _field_type(src: Source, ann: ast.expr) -> tuple[str, str, tuple[str, ...] | None] | None:
    """(nargs, type, choices) as argument_utils.py `_extract_type` infers them; None where it
    raises TypeInferenceError (a Union, a Callable, a dict, a tuple)."""
    text = ast.unparse(ann)
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        members = [ann.left, ann.right]  # X | None: types.UnionType
        if ast.unparse(members[1]) != "None":
            return None
        return _field_type(src, members[0])
    if isinstance(ann, ast.Subscript):
        head = ast.unparse(ann.value)
        args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if head == "Optional":
            inner = args[0]
            if isinstance(inner, ast.Subscript) and ast.unparse(inner.value) == "Union":
                return None  # Optional[Union[a, b]] is Union[a, b, None]: args[1] is b
            return _field_type(src, inner)
        if head == "Union":
            return _field_type(src, args[0]) if ast.unparse(args[1]) == "None" else None
        if head in ("list", "List"):
            inner_type = _field_type(src, args[0]) if len(args) == 1 else None
            return None if inner_type is None else ("+", inner_type[1], inner_type[2])
        if head == "Literal":
            values = [ast.literal_eval(a) for a in args]
            return "1", type(values[0]).__name__, tuple(str(v) for v in values)
        return None
    if text in ("int", "float", "str", "bool"):
        return "1", text, None
    members = src.enum_names(text)
    if members is not None:
        return "1", "enum", members
    return "1", f"?{text}", None  # a class argparse calls on the word (torch.dtype, ...)


def _fields(src: Source, name: str) -> list[tuple[str, ast.AnnAssign]]:
    """A config dataclass's fields with the file of the class that declares each, its base's
    first (dataclasses.fields order)."""
    cls = src.classes(CONFIGS[name])[name]
    out: dict[str, tuple[str, ast.AnnAssign]] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in CONFIGS:
            out.update({f.target.id: (p, f) for p, f in _fields(src, base.id)})  # type: ignore[union-attr]
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        if not ast.unparse(st.annotation).startswith("ClassVar"):
            out[st.target.id] = (CONFIGS[name], st)
    return list(out.values())


def _generated(src: Source, name: str, exclude: set[str]) -> list[Spec]:
    """The flags ArgumentGroupFactory(name, exclude) adds (argument_utils.py:160-231)."""
    specs = []
    for path, st in _fields(src, name):
        field = st.target.id  # type: ignore[union-attr]
        value, meta = st.value, {}
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "field":
            kws = {k.arg: k.value for k in value.keywords}
            if "init" in kws and ast.unparse(kws["init"]) == "False":
                continue
            value = kws.get("default")
            md = kws.get("metadata")
            if isinstance(md, ast.Dict):
                found = dict(zip(map(ast.literal_eval, md.keys), md.values, strict=True))  # type: ignore[arg-type]
                if "argparse_meta" in found:
                    node = found["argparse_meta"]
                    assert isinstance(node, ast.Dict)
                    meta = dict(zip(map(ast.literal_eval, node.keys), node.values, strict=True))  # type: ignore[arg-type]
        if field in exclude:
            continue
        where = f"{path[9:]}:{st.lineno}"
        names = ["--" + field.replace("_", "-")]
        inferred = _field_type(src, st.annotation)
        if inferred is None and not meta:
            raise SystemExit(f"{where}: {field}: argparse type not inferable, no argparse_meta")
        nargs, kind, choices = inferred or ("1", "str", None)
        if kind == "bool":
            nargs, kind = "0", "-"
            if value is None or ast.unparse(value) != "False":  # store_false (:191)
                names = [f"--no-{names[0][2:]}", f"--disable-{names[0][2:]}"]
        if "arg_names" in meta:
            names = ast.literal_eval(meta["arg_names"])
        if "nargs" in meta or "action" in meta:
            nargs = _nargs(meta)
        if "type" in meta:
            kind = ast.unparse(meta["type"])
        if "choices" in meta:
            choices = _meta_choices(src, meta["choices"])
        specs.append(Spec(names, nargs, kind, choices, where))
    return specs


def _meta_choices(src: Source, node: ast.expr) -> tuple[str, ...]:
    """A literal list, or `[s.name for s in SomeEnum]` (transformer_config.py)."""
    if isinstance(node, ast.ListComp):
        members = src.enum_names(ast.unparse(node.generators[0].iter))
        assert members is not None and ast.unparse(node.elt).endswith(".name")
        return members
    return tuple(str(c) for c in ast.literal_eval(node))


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _group_specs(src: Source, path: str, func: ast.FunctionDef) -> list[Spec]:
    """The flags one _add_*_args function adds, in order."""
    excludes: dict[str, set[str]] = {}
    specs: list[Spec] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    excludes[t.id] = set(ast.literal_eval(node.value))
    kitchen = {
        id(n)
        for branch in ast.walk(func)
        if isinstance(branch, ast.If) and ast.unparse(branch.test) == KITCHEN
        for n in ast.walk(branch)
    }
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and id(n) not in kitchen]
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        head = ast.unparse(call.func)
        if head.endswith(".add_argument"):
            specs.append(_hand_written(src, path, call))
        elif head == "ArgumentGroupFactory":
            name = ast.unparse(call.args[0])
            exclude: set[str] = set()
            for k in call.keywords:
                if isinstance(k.value, ast.Name):
                    exclude = excludes[k.value.id]
                else:
                    exclude = set(ast.literal_eval(k.value))
            specs += _generated(src, name, exclude)
    return specs


def parser_specs(gitdir: str) -> list[Spec]:
    """Every option of the parser pretrain_gpt.py builds, in the order it is added."""
    src = Source(gitdir)
    tree = src.tree(ARGUMENTS)
    order = [
        ast.unparse(n.value.func)
        for n in _function(tree, "add_megatron_arguments").body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
    ]
    specs = [s for name in order for s in _group_specs(src, ARGUMENTS, _function(tree, name))]
    modelopt = src.tree(MODELOPT)
    specs += _group_specs(src, MODELOPT, _function(modelopt, "add_modelopt_args"))
    return specs


HEADER = """\
# Megatron-LM command-line flags accepted by pretrain_gpt.py, one option string a line:
#   FLAG NARGS TYPE CHOICES SOURCE (tab-separated)
# Source: https://github.com/NVIDIA/Megatron-LM commit {commit}
# Written by benchmarks/megatron_flag_table.py --write, which reads that source statically (ast,
#   no torch): parse_args (megatron/training/arguments.py) -> add_megatron_arguments -> each
#   _add_*_args's add_argument calls, and the ArgumentGroupFactory groups generated from the
#   config dataclasses as megatron/training/argument_utils.py _build_argparse_kwargs_from_field
#   does; then megatron/post_training/arguments.py add_modelopt_args (its {modelopt} flags exist
#   only where nvidia-modelopt imports). The two kitchen flags (arguments.py:3752, only where
#   NVIDIA's internal kitchen package imports) are left out. The {count} option strings are the
#   ones dumped from the imported parser (Python 3.12.1, torch 2.13.0+cpu, '-h'/'--help' left
#   out): the script refuses to write another set.
# NARGS: 0 (store_true, store_false, BooleanOptionalAction, whose --no- form is listed too),
#   1 (argparse's nargs=None: one word), '+', '*', or a count.
# TYPE: what argparse calls on each word: str, bool (bool(word): never fails), int, float,
#   enum (the word must name a member: Enum[word]), one of arguments.py's callables
#   (tuple_type, moe_freq_type, la_freq_type, no_rope_freq_type,
#   _parse_cuda_graph_modules_arg), or '-' (no word).
# CHOICES: the values argparse accepts after conversion ('-': any), comma-separated; for enum
#   and _parse_cuda_graph_modules_arg the words they accept (signal.Signals' names from CPython
#   on Linux). SOURCE: file:line under megatron/.
# argparse is built with allow_abbrev=False: prefixes of these flags are rejected. No option
#   string looks like a negative number, so '-1' or '-0.5' is taken as a value.
"""


def render(specs: list[Spec]) -> str:
    rows = []
    for s in specs:
        choices = "-" if s.choices is None else ",".join(s.choices)
        assert all(c and "," not in c and not any(x.isspace() for x in c) for c in s.choices or ())
        rows += [f"{n}\t{s.nargs}\t{s.type}\t{choices}\t{s.where}" for n in s.names]
    names = [r.split("\t")[0] for r in rows]
    modelopt = sum(len(s.names) for s in specs if s.where.startswith("post_training"))
    head = HEADER.format(commit=COMMIT, count=len(names), modelopt=modelopt)
    return head + "".join(r + "\n" for r in sorted(rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=MIRROR, help="Megatron-LM git directory")
    ap.add_argument("--write", action="store_true", help=f"rewrite {TABLE.name}")
    args = ap.parse_args(argv)
    specs = parser_specs(args.mirror)
    text = render(specs)
    rows = [line.split("\t") for line in text.splitlines() if line.startswith("--")]
    names = [r[0] for r in rows]
    if len(names) != len(set(names)):
        raise SystemExit("an option string is added twice (argparse would raise a conflict)")
    if any(re.match(r"^-\d+$|^-\d*\.\d+$", n) for n in names):  # the header says none does
        raise SystemExit("an option string looks like a negative number")
    old = {ln.split()[0] for ln in TABLE.read_text().splitlines() if ln.startswith("--")}
    print(f"{len(names)} option strings of {len(specs)} actions")
    for label, key in (("nargs", 1), ("type", 2)):
        counts = Counter(r[key] for r in rows)
        print(f"  by {label}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"  with choices: {sum(r[3] != '-' for r in rows)}")
    for r in rows:
        if r[2] not in ("-", "str", "int", "float", "bool", "enum"):
            print(f"  {r[0]:45} {r[2]:32} {r[4]}")
    if set(names) != old:
        added, gone = sorted(set(names) - old), sorted(old - set(names))
        print(f"differs from {TABLE.name}: + {added} - {gone}")
        return 1
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
