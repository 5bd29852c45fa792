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
rest at torchtitan's defaults, `DEFAULTS`). A field the function leaves alone is the baseline's
(`BASELINES`, each with its config_registry lines) or torchtitan's default. What the plan needs but
the function computes in a way that is not read (a loop, a helper's result, an attribute of a call)
exits 2 naming its line; what the plan does not need is not looked at.

The values become the tables of a torchtitan TOML (`planner.inputs.torchtitan_config`, which
turns them into a plan as for a TOML): tokens per micro-batch per DP rank over the context length
is the micro-batch, with pipelining times `num_pp_microbatches` the per-rank batch; tokens per
step over the context length the global batch (-1: the per-rank batch x dp); the float8
converter's recipe the FP8 recipe; `moe_comm_backend='deepep'` the flex dispatcher; None,
SelectiveAC and FullAC the recompute; compile of the "model" component planner's compile.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan_baselines import BASELINES, Fields, Record, Unread, lookup


class Reader:
    """One module's config function, read into `Fields` (`fields`)."""

    def __init__(self, path: Path, tree: ast.Module, source: str) -> None:
        self.path, self.tree, self.source = path, tree, source
        self.imports: dict[str, str] = {}  # local name -> dotted origin
        self.functions: dict[str, ast.FunctionDef] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                origin = self._origin(node)
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{origin}.{alias.name}"
            elif isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
        self.model: str | None = None  # torchtitan's model module, from the baseline or imports

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

    def fail(self, node: ast.AST, why: str) -> InputError:
        line = getattr(node, "lineno", 0)
        return InputError(f"{self.path}:{line}: {why}")

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
                raise self.fail(stmt, f"planner reads assignments only: {self._text(stmt)}")
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
                raise self.fail(stmt, f"not a field of the configuration: {self._text(target)}")
            for key in [k for k in values if k[: len(path)] == path]:
                del values[key]  # a whole record replaces what was set inside it
            values[path] = self.value(stmt.value, names)
        raise self.fail(fn, "the function returns no configuration")

    def _built(self, node: ast.Call, names: dict[str, Any]) -> Fields:
        """The fields of `Trainer.Config(...)`: its keyword arguments, whole records."""
        if not _trainer_config(node):
            raise self.fail(node, f"expected Trainer.Config(...): {self._text(node)}")
        rec = self.value(node, names)
        if not isinstance(rec, Record):  # Trainer.Config(**kwargs)
            raise self.fail(node, f"planner does not evaluate {self._text(node)}")
        return {(key,): v for key, v in rec.kwargs.items()}

    def _baseline(self, node: ast.expr, depth: int) -> Fields | None:
        """`llama3_70b()` (a baseline, or a config function of this module): its fields."""
        if not isinstance(node, ast.Call):
            return None
        dotted = _dotted(node.func) or ""
        head, _, name = dotted.rpartition(".")
        if not head and name in self.functions:
            return self.run(self.functions[name], depth + 1)
        # `llama3_70b()` imported by name, or `config_registry.llama3_70b()` by its module
        origin = f"{self.imports.get(head, head)}.{name}" if head else self.imports.get(name, "")
        if ".config_registry." not in origin:
            return None
        base = BASELINES.get(name)
        if base is None or node.args or node.keywords:
            known = ", ".join(BASELINES)
            raise self.fail(node, f"planner knows the baselines {known} (got {origin})")
        self.model = base.model
        return dict(base.fields)

    def _path(self, node: ast.expr, config: str | None) -> tuple[str, ...] | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if config is None or not isinstance(node, ast.Name) or node.id != config or not parts:
            return None
        return tuple(reversed(parts))

    def value(self, node: ast.expr, names: dict[str, Any]) -> Any:
        """The node's value: a literal, a Record, or Unread."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, names) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand, names)
            return -inner if _number(inner) else self._unread(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)):
            a, b = self.value(node.left, names), self.value(node.right, names)
            if not (_number(a) and _number(b)):
                return self._unread(node)
            if isinstance(node.op, ast.Mult):
                return a * b
            return a + b if isinstance(node.op, ast.Add) else a - b
        if isinstance(node, ast.Call):
            callee = _dotted(node.func)
            if callee is None or any(k.arg is None for k in node.keywords):
                return self._unread(node)
            if callee.split(".")[0] == "model_registry":
                origin = self.imports.get("model_registry", "")
                if origin.startswith("torchtitan.models."):
                    self.model = origin.split(".")[2]
            args = tuple(self.value(a, names) for a in node.args)
            kwargs = {str(k.arg): self.value(k.value, names) for k in node.keywords}
            return Record(callee, args, kwargs, node.lineno, self._text(node))
        return self._unread(node)

    def _unread(self, node: ast.AST) -> Unread:
        return Unread(getattr(node, "lineno", 0), self._text(node))

    def _text(self, node: ast.AST) -> str:
        return (ast.get_source_segment(self.source, node) or ast.dump(node))[:120]


def _trainer_config(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func) == "Trainer.Config"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class Document:
    """The TOML tables (`planner.inputs.torchtitan_config`'s) a read function's fields make."""

    def __init__(self, where: str, values: Fields, model: str | None) -> None:
        self.where, self.values, self.model = where, values, model

    def need(self, path: tuple[str, ...], kind: type | tuple[type, ...]) -> Any:
        v = lookup(self.values, path)
        name = "config." + ".".join(path)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(v, Unread) or (isinstance(v, Record) and Record not in kinds and v.line):
            raise InputError(f"{self.where}:{v.line}: {name}: planner does not evaluate {v.text}")
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            raise InputError(f"{self.where}: {name}: expected {_kinds(kind)} (got {spelled(v)})")
        return v

    def tables(self) -> dict[str, Any]:
        spec = self.need(("model_spec",), Record)
        flavor = spec.args[0] if spec.args else spec.kwargs.get("flavor")
        if spec.callee != "model_registry" or not isinstance(flavor, str) or self.model is None:
            raise InputError(
                f"{self.where}: config.model_spec: expected torchtitan.models.<model>'s "
                f"model_registry(flavor, ...) (got {spelled(spec.callee)})"
            )
        model: dict[str, Any] = {"name": self.model, "flavor": flavor}
        par = {k: self.need(("parallelism", k), int) for k in _DEGREES}
        text_keys = ("fsdp_reshard_after_forward", "pipeline_parallel_schedule")
        par.update({k: self.need(("parallelism", k), str) for k in text_keys})
        if self.need(("parallelism", "context_parallel_load_balancer"), (str, type(None))) is None:
            par["context_parallel_load_balancer"] = None
        tables: dict[str, Any] = {"model": model, "parallelism": par}
        self._converters(spec, tables)
        self._batch(par, tables)
        self._checkpointing(tables)
        enable = self.need(("compile", "enable"), bool)
        components = self.need(("compile", "components"), list)
        tables["compile"] = {"enable": enable and "model" in components}
        par["enable_async_tensor_parallel"] = enable and self.need(
            ("compile", "enable_async_tensor_parallel"), bool
        )
        tables["debug"] = {"deterministic": self.need(("debug", "deterministic"), bool)}
        tables["loss"] = {"num_chunks": self._loss_chunks()}
        self._graphs(par)
        return tables

    def _graphs(self, par: dict[str, Any]) -> None:
        """torchtitan b5bcd76c captures the step in CUDA graphs unless told not to
        (training.disable_cuda_graphs, default False, configs.py:75-85), and its Trainer.Config
        refuses them with pipelining (trainer.py:172-176) and with expert parallelism over the
        standard or DeepEP dispatcher (trainer.py:178-199): such a configuration does not run."""
        if self.need(("training", "disable_cuda_graphs"), bool):
            return
        pp, ep = par["pipeline_parallel_degree"], par["expert_parallel_degree"]
        what = f"pipeline parallelism ({pp})" if pp > 1 else ""
        if not what and ep > 1:  # the backend is standard or deepep (the others exit before)
            what = f"expert parallelism ({ep}) over {par['expert_parallel_comm_backend']}"
        if what:
            raise InputError(
                f"{self.where}: config.training.disable_cuda_graphs: False (the default) with "
                f"{what}: torchtitan refuses CUDA graphs there (trainer.py:172-199 at "
                "b5bcd76c); set it True"
            )

    def _loss_chunks(self) -> int:
        """ChunkedLossWrapper's num_chunks (default 8), 1 for a plain CrossEntropyLoss."""
        loss = self.need(("loss",), Record)
        if loss.callee.endswith("ChunkedLossWrapper.Config"):
            chunks = loss.kwargs.get("num_chunks", 8)
            if isinstance(chunks, int) and not isinstance(chunks, bool) and chunks >= 1:
                return chunks
            raise InputError(
                f"{self.where}:{loss.line}: config.loss: num_chunks: expected a positive int "
                f"(got {spelled(chunks)})"
            )
        if loss.callee.endswith("CrossEntropyLoss.Config"):
            return 1
        why = (
            " (torchtitan's abstract default: set config.loss)" if "BaseLoss" in loss.callee else ""
        )
        raise InputError(
            f"{self.where}: config.loss: planner models ChunkedLossWrapper and CrossEntropyLoss "
            f"(got {loss.callee}{why})"
        )

    def _converters(self, spec: Record, tables: dict[str, Any]) -> None:
        """The float8 converter as the TOML's float8 tables; the MoE dispatcher."""
        for conv in spec.kwargs.get("converters") or []:
            name = conv.callee if isinstance(conv, Record) else spelled(conv)
            if not (isinstance(conv, Record) and name.endswith("Float8LinearConverter.Config")):
                raise InputError(
                    f"{self.where}: config.model_spec: converters: planner reads torchtitan's "
                    f"Float8LinearConverter (got {name})"
                )
            tables["model"]["converters"] = ["float8"]
            recipe = conv.kwargs.get("recipe_name", "rowwise")
            tables["quantize"] = {"linear": {"float8": {"recipe_name": recipe}}}
        backend = spec.kwargs.get("moe_comm_backend") or "standard"
        if backend not in ("standard", "deepep"):
            raise InputError(
                f"{self.where}: config.model_spec: moe_comm_backend: planner models torchtitan's "
                f"standard and deepep (got {spelled(backend)})"
            )
        tables["parallelism"]["expert_parallel_comm_backend"] = backend

    def _batch(self, par: dict[str, Any], tables: dict[str, Any]) -> None:
        """Tokens per micro-batch per DP rank and per step, over the context length."""
        tokens = self.need(("training", "num_tokens_per_microbatch_per_dp_rank"), int)
        seq = self.need(("training", "max_context_length"), int)
        step = self.need(("training", "num_tokens_per_train_step"), int)
        if seq < 1 or tokens % seq or (step != -1 and step % seq):
            raise InputError(
                f"{self.where}: config.training: planner plans whole sequences: "
                f"num_tokens_per_microbatch_per_dp_rank {tokens} and num_tokens_per_train_step "
                f"{step} must be multiples of max_context_length {seq}"
            )
        mbs = tokens // seq
        local = mbs
        if par["pipeline_parallel_degree"] > 1:
            local *= self.need(("parallelism", "num_pp_microbatches"), int)
            par["pipeline_parallel_microbatch_size"] = mbs
            parts = self.need(("parallelism", "module_fqns_per_model_part"), (list, type(None)))
            if parts is not None:
                par["module_fqns_per_model_part"] = [
                    ["output" if m == "lm_head" else m for m in part]
                    if isinstance(part, list)
                    else part
                    for part in parts
                ]
        tables["training"] = {
            "seq_len": seq,
            "local_batch_size": local,
            "global_batch_size": -1 if step == -1 else step // seq,
        }

    def _checkpointing(self, tables: dict[str, Any]) -> None:
        ac = self.need(("activation_checkpoint",), (Record, type(None)))
        modes = {"SelectiveAC.Config": "selective", "FullAC.Config": "full"}
        mode = "none" if ac is None else None
        if ac is not None:
            mode = next((m for c, m in modes.items() if ac.callee.endswith(c)), None)
        if mode is None:
            raise InputError(
                f"{self.where}: config.activation_checkpoint: planner models None, "
                f"SelectiveAC.Config() and FullAC.Config() (got {ac.callee if ac else ac})"
            )
        tables["activation_checkpoint"] = {"mode": mode, "selective_ac_option": "op"}


_DEGREES = (
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
)


def _kinds(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)


def tables(path: Path, function: str | None = None) -> tuple[dict[str, Any], str]:
    """The TOML tables the module's config function makes, and the module's text."""
    where = str(path)
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=where)
    except OSError as e:
        raise InputError(f"{where}: cannot read: {e.strerror or e}") from None
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{where}: not a Python module: {e}") from None
    reader = Reader(path, tree, source)
    try:
        values = reader.run(reader.config_function(function))
    except RecursionError:
        raise InputError(f"{where}: expressions nested too deep to read") from None
    return Document(where, values, reader.model).tables(), source
