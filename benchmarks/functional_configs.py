"""Megatron-LM's functional-test configuration files, as given, through
`planner check --megatron-args model_config.yaml`.

    python benchmarks/functional_configs.py GITDIR

GITDIR: a Megatron-LM clone or its git directory (bare mirrors too); each usable case's
`tests/functional_tests/test_cases/<family>/<case>/model_config.yaml` (digest of
"<family>/<case>" starting 5-9 or a-f; the held-out cases' files are not opened) is read from git
at HEAD, nothing copied. Two figures:

- words: the words `planner.inputs.megatron_yaml` makes from the file against the ones stored in
  benchmarks/data/megatron_functional_tests/command_lines.json (extracted with yq and a copy of
  the runner's word loop under bash: an independent oracle), after the training script its CI
  recipes name (when they name one alone; the configuration's is inferred from its folder);
- verdicts: the file through what `check --megatron-args` does (`megatron_args.read` of the
  YAML text), at the GPU count of the case's first CI recipe row (else DEFAULT's, grown to what
  the layout needs, as benchmarks/functional_tests.py does): read (exit 0 or 1), exit 2, or a
  crash, and whether that verdict is the one functional_tests.py's word list gets.

The stored data is from d98e8a64; a different HEAD is said, and its files may differ.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_platforms import DEFAULT, targets
from benchmarks.functional_tests import (
    command_line,
    evaluate,
    evaluate_text,
    load_cases,
    vocab_given,
)
from planner.inputs import megatron_yaml
from planner.inputs.errors import InputError

STORED_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", gitdir, *args], capture_output=True, text=True, check=True
    ).stdout


def usable(path: str) -> bool:
    """A case whose digest allows calibration (5-9, a-f): its file may be opened."""
    family, case = path.split("/")[3:5]
    return hashlib.sha256(f"{family}/{case}".encode()).hexdigest()[0] in "56789abcdef"


def first_target(case: dict[str, Any]) -> tuple[str, int | None]:
    """The GPU and count of the case's first target (`functional_platforms.targets`; a count
    of 0 there: DEFAULT's, grown to what the layout needs)."""
    t = targets(case)[0]
    return t.gpu, t.num_gpus or None


def _braced(word: str) -> str:
    """`$NAME` as `${NAME}`: the stored words spell every placeholder braced (a path's; the
    runner's envsubst fills both alike)."""
    return re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", r"${\1}", word)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gitdir")
    args = ap.parse_args()
    head = git(args.gitdir, "rev-parse", "HEAD").strip()
    if head != STORED_COMMIT:
        print(f"note: HEAD {head[:12]}, the stored words are from {STORED_COMMIT[:12]}")
    names = git(args.gitdir, "ls-tree", "-r", "--name-only", "HEAD", "--", "tests/functional_tests")
    paths = sorted(
        p for p in names.splitlines() if p.endswith("/model_config.yaml") and p.count("/") == 5
    )
    cases = {c["config_path"]: c for c in load_cases()}
    words_ok, scripts_ok, differs, verdicts, agree = 0, 0, [], Counter[str](), 0
    for path in filter(usable, paths):
        text = git(args.gitdir, "show", f"HEAD:{path}")
        case = cases.get(path)
        try:
            got = megatron_yaml.read(text, path).launch.words
        except InputError as e:
            got = [f"<exit 2: {e}>"]
        if case is not None:
            want = command_line(case)
            # the recipe's script (a NeMo line's `nemo llm pretrain ...` head): not in the file
            head = 1 if want and want[0].endswith(".py") else 0
            if case.get("nemo_style_args"):
                head = next(i for i, w in enumerate(want) if "." in w.partition("=")[0])
            got_args = got[1:] if got[:1] and got[0].endswith(".py") else got
            scripts_ok += head == 0 or want[0] == got[0]
            if [_braced(w) for w in want[head:]] == [_braced(w) for w in got_args]:
                words_ok += 1
            else:
                at = next(
                    (
                        i
                        for i, (a, b) in enumerate(zip(want[head:], got_args, strict=False))
                        if a != b
                    ),
                    min(len(want) - head, len(got_args)),
                )
                differs.append(
                    f"  {path}: from word {at}\n    want {shlex.join(want[head + at :])[:200]}"
                    f"\n    got  {shlex.join(got_args[at:])[:200]}"
                )
        gpu, count = first_target(case) if case else (DEFAULT[0], None)
        nemo = next(
            (r["nemo_model"] for r in (case or {}).get("recipe_runs", []) if r.get("nemo_model")),
            None,
        )  # the recipe's, as --nemo-model gives it
        v = evaluate_text(text, gpu, count, path, vocab_given(got), nemo)
        verdicts["read" if v.read else str(v.code)] += 1
        if case is not None:
            agree += evaluate(command_line(case), gpu, count, path).read == v.read
        if not v.read:
            print(f"  {path}: {v.describe()}")
    total = sum(verdicts.values())
    print(f"\nusable cases' model_config.yaml at HEAD: {total}")
    print(f"  flags equal to the stored runner words: {words_ok} of {len(cases)} stored cases")
    print(f"  training script the one its CI recipes name: {scripts_ok} of {len(cases)}")
    for d in differs:
        print(d)
    print(
        "  verdicts (exit code where not read): "
        + ", ".join(f"{k} {n}" for k, n in verdicts.most_common())
    )
    print(f"  read / not read as functional_tests.py's words: {agree} of {len(cases)} agree")


if __name__ == "__main__":
    main()
