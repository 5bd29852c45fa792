"""torchtitan's configuration classes and functions, as names and fields, for the test of the
Python configuration `planner launch --target torchtitan-module` writes.

    python benchmarks/torchtitan_schema.py GITDIR > tests/data/torchtitan_config_schema.json

GITDIR: a pytorch/torchtitan clone or its git directory (bare mirrors too); the files below are
read from git at HEAD with Python's ast (nothing imported, nothing copied). For each module: its
top-level names (a class, a function, a variable, or where an import takes it from), each class's
bases and annotated fields (nested classes by dotted name, `Trainer.Config`), and each
function's parameters. tests/emit/test_emit_torchtitan_module.py resolves the emitted module's
imports, attribute paths, keyword arguments and Literal values against it.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys

FILES = (
    "torchtitan/config/__init__.py",
    "torchtitan/config/configs.py",
    "torchtitan/config/configurable.py",
    "torchtitan/trainer.py",
    "torchtitan/distributed/activation_checkpoint.py",
    "torchtitan/components/checkpointer/__init__.py",
    "torchtitan/components/checkpointer/base.py",
    "torchtitan/components/checkpointer/dcp.py",
    "torchtitan/components/optimizer/__init__.py",
    "torchtitan/components/optimizer/optimizer.py",
    "torchtitan/components/optimizer/lr_scheduler.py",
    "torchtitan/components/quantization/__init__.py",
    "torchtitan/components/quantization/float8.py",
    "torchtitan/components/quantization/mx.py",
    "torchtitan/components/loss.py",
    "torchtitan/components/validate.py",
    "torchtitan/tools/profiler.py",
    "torchtitan/models/common/config_utils.py",
    "torchtitan/models/deepseek_v3/mtp.py",
    *(
        f"torchtitan/models/{m}/{f}"
        for m in ("llama3", "qwen3", "deepseek_v3", "gpt_oss")
        for f in ("__init__.py", "config_registry.py")
    ),
)
"""The modules an emitted configuration imports from, and those their classes derive from."""


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", gitdir, *args], capture_output=True, text=True, check=True
    ).stdout


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _origin(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads (relative ones resolved against `module`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _class(node: ast.ClassDef, prefix: str, out: dict[str, dict[str, object]]) -> None:
    name = f"{prefix}{node.name}"
    fields = {
        s.target.id: ast.unparse(s.annotation)
        for s in node.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    }
    out[name] = {"bases": [ast.unparse(b) for b in node.bases], "fields": fields}
    for s in node.body:
        if isinstance(s, ast.ClassDef):
            _class(s, f"{name}.", out)


def describe(path: str, text: str) -> dict[str, object]:
    module = module_name(path)
    tree = ast.parse(text)
    names: dict[str, str] = {}
    classes: dict[str, dict[str, object]] = {}
    functions: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            origin = _origin(module, path.endswith("__init__.py"), node)
            for a in node.names:
                names[a.asname or a.name] = f"{origin}:{a.name}"
        elif isinstance(node, ast.ClassDef):
            names[node.name] = "class"
            _class(node, "", classes)
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = "function"
            args = node.args
            functions[node.name] = [
                a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
            ]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names.setdefault(t.id, "variable")
    return {"names": names, "classes": classes, "functions": functions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gitdir")
    args = ap.parse_args()
    commit = git(args.gitdir, "rev-parse", "HEAD").strip()
    modules = {module_name(p): describe(p, git(args.gitdir, "show", f"HEAD:{p}")) for p in FILES}
    doc = {
        "source": "pytorch/torchtitan",
        "commit": commit,
        "files": list(FILES),
        "how": "benchmarks/torchtitan_schema.py: Python's ast over each file at that commit",
        "modules": modules,
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
