"""A torchtitan Python configuration read back into a plan document: `planner check
--torchtitan-config planner_job.py` (torchtitan since its move from TOML job configs, 9810191b;
names of pytorch/torchtitan b5bcd76c, `planner.emit.torchtitan_module.HEAD_COMMIT`).

What is read is the form torchtitan documents and `planner launch --target torchtitan-module`
writes (torchtitan/config/README.md at b5bcd76c; benchmarks/data/torchtitan_head_config.md): one
function that starts from a model's baseline, `config = llama3_70b()`, sets fields,
`config.parallelism = ParallelismConfig(...)` or `config.training.max_context_length = 8192`, and
returns it; or, as the baselines themselves do, returns `Trainer.Config(...)`, or another config
function's result (relative imports resolve within a torchtitan tree: its own config_registry files
read, `benchmarks/torchtitan_baselines.py`). The function is read, not run (no torch, no
torchtitan): each right-hand side is a literal, arithmetic on literals, a name bound to one
earlier, or a call, which stands for the configuration record it builds (its keyword arguments, the
rest at torchtitan's defaults, `DEFAULTS`), as `planner.inputs.torchtitan_values` reads them. A
field the function leaves alone is the baseline's (`BASELINES`, each with its config_registry
lines) or torchtitan's default. What the plan needs but the function computes in a way that is not
read (a loop, a helper's result, an attribute of a call) exits 2 naming its line; what the plan
does not need is not looked at. A section the plan reads
(`SECTION_CLASSES`) is its class's record built with keyword arguments, or
`dataclasses.replace(config.<section>, ...)` (its fields set one by one), else exits 2 naming the
line; a field of another whole record (`config.loss.num_chunks = 4`) is set in it, or in
torchtitan's default one (`config.checkpoint.interval = 100`). A name Trainer.Config, a section
or a record's class lacks (`SECTION_FIELDS`, `RECORD_FIELDS`: set, or given as a keyword), a
field set on a None (`config.activation_checkpoint = None`), and a `.Config` or section class
given positions (kw_only dataclasses) exit 2 naming the line, as torchtitan raises (its slotted
dataclasses). A baseline is the function imported, whatever its local name, from
its own model's config_registry.

The values become the tables of a torchtitan TOML (`planner.inputs.torchtitan_config`, which
turns them into a plan as for a TOML): tokens per micro-batch per DP rank over the context length
is the micro-batch, with pipelining times `num_pp_microbatches` the per-rank batch; tokens per
step over the context length the global batch (-1: the per-rank batch x dp); the float8
converter's recipe the FP8 recipe (its filter_fqns without "router.gate" in an MoE model is
said: planner times the gate in bf16); Float8GroupedExpertsConverter beside it `[torchtitan]
float8_experts` (refused with DeepEP, which b5bcd76c raises on); `moe_comm_backend='deepep'` the
flex dispatcher; None,
SelectiveAC and FullAC the recompute; compile of the "model" component planner's compile, of
the "loss" its compile_loss.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.files import read_file
from planner.inputs.torchtitan_baselines import (
    BASELINES,
    DEFAULTS,
    SECTION_CLASSES,
    SECTION_FIELDS,
    TRAINER_FIELDS,
    Fields,
    Record,
    record_fields,
)
from planner.inputs.torchtitan_records import FACTORIES
from planner.inputs.torchtitan_tables import Document
from planner.inputs.torchtitan_values import Expressions, dotted_name


class Reader(Expressions):
    """One module's config function, read into `Fields` (`fields`); its right-hand sides'
    values are `Expressions.value`."""

    def __init__(self, path: Path, tree: ast.Module, source: str) -> None:
        super().__init__(path, source)
        self.tree = tree
        self.functions: dict[str, ast.FunctionDef] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                origin = self._origin(node)
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{origin}.{alias.name}"
            elif isinstance(node, ast.Import):  # `import dataclasses`, `import a.b as c`
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.imports[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node

    def _origin(self, node: ast.ImportFrom) -> str:
        """The module imported from; a relative import resolved within a torchtitan tree
        (`from . import model_registry` in torchtitan/models/llama3/config_registry.py), else
        left relative ("." and the module)."""
        if not node.level:
            return node.module or ""
        parts = self.path.resolve().parent.parts
        package = (
            parts[len(parts) - parts[::-1].index("torchtitan") - 1 :]
            if ("torchtitan" in parts)
            else ()
        )
        base = list(package[: len(package) - node.level + 1]) if package else ["."]
        return ".".join([*base, *([node.module] if node.module else [])])

    def config_function(self, name: str | None) -> ast.FunctionDef:
        """The function named, else the module's only one (or the one called planner_job)."""
        if name is not None:
            if name not in self.functions:
                known = ", ".join(self.functions) or "none"
                raise InputError(f"{self.path}: no function {name!r} (functions: {known})")
            return self.functions[name]
        if len(self.functions) == 1:
            return next(iter(self.functions.values()))
        if "planner_job" in self.functions:
            return self.functions["planner_job"]
        known = ", ".join(self.functions) or "none"
        raise InputError(
            f"{self.path}: which config function? give FILE:FUNCTION (functions: {known})"
        )

    def run(self, fn: ast.FunctionDef, depth: int = 0) -> Fields:
        """The fields the function's returned configuration holds."""
        if depth > 8:
            raise self.fail(fn, "config functions call each other too deep")
        names: dict[str, Any] = {}
        config: str | None = None
        values: Fields = {}
        for stmt in fn.body:
            if isinstance(stmt, ast.Assert) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            ):
                continue  # the docstring; an assert changes nothing it passes
            if isinstance(stmt, ast.Return):
                if isinstance(stmt.value, ast.Call):  # return Trainer.Config(...), or f()
                    base = self._baseline(stmt.value, depth)
                    return base if base is not None else self._built(stmt.value, names)
                if config is None or not (
                    isinstance(stmt.value, ast.Name) and stmt.value.id == config
                ):
                    raise self.fail(stmt, "the function must return the configuration it built")
                return values
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                raise self.fail(stmt, f"planner reads assignments only: {self.text(stmt)}")
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                base = self._baseline(stmt.value, depth)
                if (
                    base is None
                    and isinstance(stmt.value, ast.Call)
                    and _trainer_config(stmt.value)
                ):
                    base = self._built(stmt.value, names)  # config = Trainer.Config(...)
                if base is not None:
                    config, values = target.id, dict(base)
                else:
                    names[target.id] = self.value(stmt.value, names)
                continue
            path = self._path(target, config)
            if path is None:
                raise self.fail(stmt, f"not a field of the configuration: {self.text(target)}")
            self._assign(stmt, path, values, names)
        raise self.fail(fn, "the function returns no configuration")

    def _assign(
        self, stmt: ast.Assign, path: tuple[str, ...], values: Fields, names: dict[str, Any]
    ) -> None:
        """`config.<path> = value` into `values`: a Trainer.Config field (slots: another name
        raises AttributeError there); a section (`SECTION_CLASSES`) as its class's record or
        `dataclasses.replace(config.<section>, ...)`, read as its fields set one by one; a field
        of another record set (`config.loss.num_chunks = 4`) into that record."""
        if path[0] not in TRAINER_FIELDS:
            raise self.fail(
                stmt,
                f"config.{path[0]}: torchtitan b5bcd76c's Trainer.Config has no such field "
                "(trainer.py:69-116, slotted)",
            )
        updates = self._replace(stmt.value, path, config_of(stmt.targets[0]))
        if updates is not None:
            for key, node in updates.items():
                self._assign_value(stmt, (*path, key), self.value(node, names), values)
            return
        value = self.value(stmt.value, names)
        if len(path) == 1:
            value = self._section(stmt.value, path[0], value)
        self._assign_value(stmt, path, value, values)

    def _assign_value(
        self, stmt: ast.Assign, path: tuple[str, ...], value: Any, values: Fields
    ) -> None:
        """`config.<path> = value` into `values`: a field of a record held whole set in the
        record there, else in torchtitan's default one (`DEFAULTS`: config.checkpoint's,
        config.activation_checkpoint's); a name its class lacks, or a field of a None, exits 2
        naming the line, as torchtitan's slotted dataclasses raise AttributeError."""
        key = path[:1]
        outer = values[key] if key in values else DEFAULTS.get(key)
        if len(path) > 1:
            if outer is None and key in values:
                raise self.fail(
                    stmt,
                    f"config.{'.'.join(path)}: config.{path[0]} is None here, and torchtitan "
                    "raises AttributeError setting a field of it",
                )
            self._known_field(stmt, key, path[1], outer, attribute=True)
        if len(path) == 2 and path[0] not in SECTION_CLASSES and isinstance(outer, Record):
            if path[0] == "model_spec":
                raise self.fail(
                    stmt,
                    f"config.model_spec.{path[1]}: planner reads the model_registry(flavor, ...) "
                    "call whole: give it there",
                )
            kwargs = {**outer.kwargs, path[1]: value}
            values[path[:1]] = Record(outer.callee, outer.args, kwargs, outer.line, outer.text)
            return
        for key in [k for k in values if k[: len(path)] == path]:
            del values[key]  # a whole record replaces what was set inside it
        values[path] = value

    def _section(self, node: ast.expr, section: str, value: Any) -> Any:
        """A section's value as its class's record, else exit 2 naming the line: a helper's
        result, `**kwargs`, an attribute, anything else is not read exactly. A record's
        keyword arguments are fields of its class (`_known_keywords`)."""
        cls = SECTION_CLASSES.get(section)
        if cls is not None and not (
            isinstance(value, Record) and f".{value.callee}".endswith(f".{cls}")
        ):
            raise self.fail(
                node,
                f"config.{section}: planner reads {cls}(...) with keyword arguments, or "
                f"dataclasses.replace(config.{section}, ...), and does not evaluate "
                f"{self.text(node)}",
            )
        if isinstance(value, Record):
            self._known_keywords(node, (section,), value)
        return value

    def _known_keywords(self, node: ast.AST, path: tuple[str, ...], record: Record) -> None:
        """A record's keyword arguments, and those of the records given in them
        (`loss_fn=CrossEntropyLoss.Config(...)`), are fields of its class where the reader
        knows it (`_known_field`): torchtitan's kw_only dataclasses raise TypeError on another."""
        for name, value in record.kwargs.items():
            self._known_field(node, path, name, record)
            if isinstance(value, Record):
                self._known_keywords(node, (*path, name), value)
            elif isinstance(value, (list, tuple)):  # converters=[Float8LinearConverter.Config()]
                for i, item in enumerate(value):
                    if isinstance(item, Record):
                        self._known_keywords(node, (*path, f"{name}[{i}]"), item)

    def _known_field(
        self, node: ast.AST, path: tuple[str, ...], name: str, holder: Any, attribute: bool = False
    ) -> None:
        """`name` set in (or, not `attribute`, given as a keyword to) `config.<path>`, whose value
        is `holder`: a field of the section (`SECTION_FIELDS`, configs.py) or of the record's
        class (`record_fields`; set on a factory's result, of the class it returns,
        `FACTORIES`), else exit 2 naming the line. A record of a class the reader does not know
        (a user's), or a value not read, is not looked into."""
        known = None
        if len(path) == 1 and path[0] in SECTION_FIELDS:
            known = SECTION_FIELDS[path[0]], "configs.py"
        elif isinstance(holder, Record):
            callee = holder.callee
            if attribute:
                callee = FACTORIES.get(callee.split(".")[-1], callee)
            known = record_fields(callee)
            if known is not None:
                known = known[0], f"{callee}, {known[1]}"
        if known is not None and name not in known[0]:
            raise self.fail(
                node,
                f"config.{'.'.join((*path, name))}: torchtitan b5bcd76c has no such field "
                f"({known[1]})",
            )

    def _replace(
        self, node: ast.expr, path: tuple[str, ...], config: str | None
    ) -> dict[str, ast.expr] | None:
        """`dataclasses.replace(config.<path>, k=v, ...)`: its keyword arguments by name (the
        fields it sets over the record's own); None for any other value. The record replaced
        must be the one assigned to, and the arguments named."""
        if not isinstance(node, ast.Call):
            return None
        callee = dotted_name(node.func) or ""
        head, _, name = callee.rpartition(".")
        origin = f"{self.imports.get(head, head)}.{name}" if head else self.imports.get(name, "")
        if origin != "dataclasses.replace":
            return None
        own = ".".join([config or "", *path])
        if (
            len(node.args) != 1
            or dotted_name(node.args[0]) != own
            or any(k.arg is None for k in node.keywords)
        ):
            raise self.fail(
                node,
                f"planner reads dataclasses.replace({own}, name=value, ...) only (got "
                f"{self.text(node)})",
            )
        return {str(k.arg): k.value for k in node.keywords}

    def _built(self, node: ast.Call, names: dict[str, Any]) -> Fields:
        """The fields of `Trainer.Config(...)`: its keyword arguments, whole records."""
        if not _trainer_config(node):
            raise self.fail(node, f"expected Trainer.Config(...): {self.text(node)}")
        rec = self.value(node, names)
        if not isinstance(rec, Record):  # Trainer.Config(**kwargs)
            raise self.fail(node, f"planner does not evaluate {self.text(node)}")
        out: Fields = {}
        for arg in node.keywords:
            key = str(arg.arg)
            if key not in TRAINER_FIELDS:
                raise self.fail(
                    arg.value,
                    f"config.{key}: torchtitan b5bcd76c's Trainer.Config has no such field "
                    "(trainer.py:69-116)",
                )
            out[(key,)] = self._section(arg.value, key, rec.kwargs[key])
        return out

    def _baseline(self, node: ast.expr, depth: int) -> Fields | None:
        """`llama3_70b()` (a baseline, or a config function of this module): its fields."""
        if not isinstance(node, ast.Call):
            return None
        dotted = dotted_name(node.func) or ""
        head, _, name = dotted.rpartition(".")
        if not head and name in self.functions:
            return self.run(self.functions[name], depth + 1)
        # `llama3_70b()` imported by name, or `config_registry.llama3_70b()` by its module
        origin = f"{self.imports.get(head, head)}.{name}" if head else self.imports.get(name, "")
        if ".config_registry." not in origin:
            return None
        module, _, function = origin.rpartition(".")  # the function imported, not its alias
        base = BASELINES.get(function)
        if base is None or node.args or node.keywords:
            known = ", ".join(BASELINES)
            raise self.fail(node, f"planner knows the baselines {known} (got {origin})")
        own = f"torchtitan.models.{base.model}.config_registry"
        if module.startswith("torchtitan.") and module != own:
            raise self.fail(node, f"{module} has no {function} (it is {own}'s): got {origin}")
        self.model = base.model
        return dict(base.fields)

    def _path(self, node: ast.expr, config: str | None) -> tuple[str, ...] | None:
        """`config.a.b` as ("a", "b"); None for anything else."""
        head, *parts = (dotted_name(node) or "").split(".")
        return tuple(parts) if config is not None and head == config and parts else None


def config_of(target: ast.expr) -> str | None:
    """The name an assignment's `config.a.b` target starts from."""
    head = (dotted_name(target) or "").split(".")[0]
    return head or None


def _trainer_config(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and dotted_name(node.func) == "Trainer.Config"


def tables(path: Path, function: str | None = None) -> tuple[dict[str, Any], str]:
    """The TOML tables the module's config function makes, and the module's text."""
    doc, source, _ = read(path, function)
    return doc, source


def read(
    path: Path, function: str | None = None
) -> tuple[dict[str, Any], str, list[tuple[str, str]]]:
    """`tables`, and the notes on what is read otherwise than the module says ((field,
    message))."""
    where = str(path)
    deep = InputError(f"{where}: expressions nested too deep to read")
    source = read_file(path)  # at most files.MAX_INPUT_CHARS, a regular file or a device
    try:
        tree = ast.parse(source, filename=where)
    except (SyntaxError, ValueError) as e:
        raise InputError(f"{where}: not a Python module: {e}") from None
    except (RecursionError, MemoryError):  # ast.parse's own depth limit (a 20,000-term sum)
        raise deep from None
    reader = Reader(path, tree, source)
    try:
        values = reader.run(reader.config_function(function))
    except RecursionError:
        raise deep from None
    document = Document(where, values, reader.model)
    return document.tables(), source, document.notes
