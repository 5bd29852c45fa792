"""Check the baselines `planner check --torchtitan-config FILE.py` assumes against torchtitan's own
source: each config_registry function of a torchtitan clone (`git show COMMIT:path`) is read by
planner.inputs.torchtitan_module as a user's module would be, and what it makes is compared with
what a module that only calls the baseline makes from planner.inputs.torchtitan_baselines
(the values entered by hand, with their lines). Then every config function of those registries is
read for 64 H100 (the GPU count is the command line's), and what planner does not read is
counted by reason.

    python benchmarks/torchtitan_baselines.py GITDIR [--commit b5bcd76c]

Prints one line per baseline (agree / differ, with both), the count that agree, and the other
registry functions' verdicts. Exit 0 when every baseline agrees.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.emit.torchtitan_module import HEAD_COMMIT
from planner.inputs import torchtitan_config, torchtitan_module
from planner.inputs.errors import InputError
from planner.inputs.torchtitan_baselines import BASELINES

GPUS = 64
"""The GPU count each registry function is read for (the command line's, not the file's)."""


def _checkout(git: str, commit: str, rel: str, root: Path) -> Path:
    """The registry file at `root/rel` (its package path kept: relative imports resolve)."""
    out = root / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    show = ["git", "-C", git, "show", f"{commit}:{rel}"]
    out.write_text(subprocess.run(show, capture_output=True, text=True, check=True).stdout)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("git", help="a torchtitan clone (a bare mirror will do)")
    ap.add_argument("--commit", default=HEAD_COMMIT)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp())
    files = {b.source.split(":")[0] for b in BASELINES.values()}
    paths = {rel: _checkout(args.git, args.commit, rel, root) for rel in sorted(files)}
    agree = 0
    for name, base in BASELINES.items():
        rel = base.source.split(":")[0]
        source, _ = torchtitan_module.tables(paths[rel], name)
        user = paths[rel].parent / f"uses_{name}.py"
        user.write_text(
            f"from torchtitan.models.{base.model}.config_registry import {name}\n\n\n"
            f"def job():\n    config = {name}()\n    return config\n"
        )
        ours, _ = torchtitan_module.tables(user, "job")
        same = source == ours
        agree += same
        print(f"{name:20s} {base.source:58s} {'agree' if same else 'DIFFER'}")
        if not same:
            print(f"    from the source: {source}\n    planner's:       {ours}")
    print(f"baselines: {agree} of {len(BASELINES)} agree with torchtitan {args.commit[:8]}")
    verdicts: Counter[str] = Counter()
    for rel, path in paths.items():
        functions = [
            n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
        ]
        for fn in functions:
            try:
                torchtitan_config.read(Path(f"{path}:{fn}"), "h100-sxm-80gb", GPUS)
                verdicts["read"] += 1
                print(f"  {rel}:{fn}: read")
            except InputError as e:
                why = str(e).split(f"{fn}: ", 1)[-1].split(": ", 1)[-1].splitlines()[0]
                verdicts[why.split(" (")[0][:70]] += 1
                print(f"  {rel}:{fn}: {why[:120]}")
    print("registry functions:", ", ".join(f"{k}: {v}" for k, v in verdicts.most_common()))
    return 0 if agree == len(BASELINES) else 1


if __name__ == "__main__":
    raise SystemExit(main())
