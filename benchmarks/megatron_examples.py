"""Megatron-LM's own example launch scripts through `planner check --megatron-args`: how many
read, and why the others do not.

    python benchmarks/megatron_examples.py GITDIR [--gpu G] [--vocab-size V]

GITDIR: a Megatron-LM clone or its git directory (bare mirrors too); every `examples/**/*.sh`
at its HEAD is read from git (nothing is copied into this repository). Each script is checked
as a user would check it: at the GPU count its torchrun asks for (--nproc-per-node x --nnodes),
as `check` takes it where --num-gpus is not given; a script whose launcher says none at 8, 64,
256 and 1,024 GPUs ("fits" at the first count where it fits, else "does not fit" at the first
that reads, else the refusal); with `--vocab-size` for the tokenizer files planner cannot
open (default 128,256, Llama 3's; a script that sets its own vocabulary keeps it); what a
script sources is read from the same commit, and a script or sourced file that is a symbolic
link as the file it names. Printed: each script's verdict (with its layout and peak, or the
refusal's first line), the count of each, and the refusals grouped by their message's gist.

Read means exit 0 or 1 at some count: the launch script became a plan. A refusal is right where
the script itself cannot run as written (a positional parameter without default, a layout its
GPU count does not divide, flags of another entry point); the rest are the reader's to fix.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import launch
from planner.inputs.plan import parse_plan
from planner.model import memory
from planner.search.rules import check_plan

COUNTS = (8, 64, 256, 1024)
"""GPU counts each script is tried at, smallest first."""


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", gitdir, *args], capture_output=True, text=True, check=True
    ).stdout


def scripts(gitdir: str) -> list[str]:
    """The example launch scripts at HEAD."""
    names = git(gitdir, "ls-tree", "-r", "--name-only", "HEAD", "--", "examples").splitlines()
    return sorted(n for n in names if n.endswith(".sh"))


LINK_HOPS = 40
"""The most symbolic links followed from one path (Linux's MAXSYMLINKS, a loop's end)."""


def show(gitdir: str, name: str) -> str | None:
    """The text of the file at `name` in HEAD, following symbolic links (git mode 120000, whose
    blob is the target path, relative to the link's folder) within the same commit; None for a
    path not there, outside the repository, or a link loop."""
    for _ in range(LINK_HOPS):
        name = os.path.normpath(name)
        if name.startswith(("/", "..")):
            return None
        entry = git(gitdir, "ls-tree", "HEAD", "--", name).split(maxsplit=3)
        if len(entry) < 4 or entry[1] != "blob":
            return None
        text = git(gitdir, "cat-file", "blob", entry[2])
        if entry[0] != "120000":
            return text
        name = os.path.join(os.path.dirname(name), text)
    return None


def repo_files(gitdir: str) -> Callable[[str], str | None]:
    """What a script sources, read from the same commit (paths from the repository's root, as
    the examples are run from it; `show`); None for a path outside it or not there."""
    return lambda path: show(gitdir, path)


def verdict(
    text: str, where: str, gpu: str, vocab: int, files: Callable[[str], str | None]
) -> tuple[str, str]:
    """("fits" | "does not fit" | "refused", detail) at the count the script's torchrun asks
    for (`megatron_line.Launch.world`) where it says one, else: fits at the first of COUNTS where
    it fits, else does not fit at the first that reads, else the first count's refusal."""
    first_error, first_read = "", ""
    own = launch(text, where, files).world
    for n in (own[0],) if own is not None else COUNTS:
        try:
            reading = megatron_args.read(text, gpu, n, where, vocab, files=files)
            plan = check_plan(parse_plan(reading.doc, Path(where)))
            job, layout = plan.job, plan.require_layout()
        except InputError as e:
            first_error = first_error or str(e).removeprefix(f"{where}: ")
            continue
        rep = memory.estimate(job, layout)
        peak = f"{layout.describe()} on {n}: peak {rep.peak / 2**30:.1f} GiB"
        if rep.fits:
            return "fits", peak
        first_read = first_read or peak
    return ("does not fit", first_read) if first_read else ("refused", first_error)


def gist(message: str) -> str:
    """A refusal's kind: its message with quoted values and numbers blanked."""
    text = re.sub(r"'[^']*'", "'...'", message)
    text = re.sub(r"\([^)]*\)", "(...)", text)
    return re.sub(r"\d+", "N", text)[:110]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gitdir", help="a Megatron-LM clone or git directory")
    ap.add_argument("--gpu", default="h100-sxm-80gb", help="catalog GPU (default H100)")
    ap.add_argument("--vocab-size", type=int, default=128_256, help="for tokenizer files")
    args = ap.parse_args()
    head = git(args.gitdir, "rev-parse", "HEAD").strip()
    print(f"Megatron-LM {head[:8]}: examples/**/*.sh through check --megatron-args ({args.gpu})")
    tally: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    files = repo_files(args.gitdir)
    for name in scripts(args.gitdir):
        text = show(args.gitdir, name) or ""  # a link to a file not there: nothing to read
        what, detail = verdict(text, name, args.gpu, args.vocab_size, files)
        tally[what] += 1
        if what == "refused":
            refusals[gist(detail)] += 1
        print(f"  {what:12s} {name[len('examples/') :][:70]:70s} {detail[:100]}")
    total = sum(tally.values())
    read = tally["fits"] + tally["does not fit"]
    print(
        f"\n{total} scripts: {read} read ({tally['fits']} fit, {tally['does not fit']} do not), "
        f"{tally['refused']} refused"
    )
    print("refusals by kind:")
    for kind, n in refusals.most_common():
        print(f"  {n:4d}  {kind}")


if __name__ == "__main__":
    main()
