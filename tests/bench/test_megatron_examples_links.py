"""benchmarks/megatron_examples.py reads a script that is a symbolic link (git mode 120000, its
blob the target path relative to the link's folder) as the file it names, from the same commit,
as a checkout runs it (Megatron-LM d98e8a64's
examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base.sh is one).

Oracle: the file system of a checkout of a small repository made here: `Path.read_text` follows
the same links. Before the fix the benchmark read the link's blob, the target path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import megatron_examples


def _repo(root: Path) -> None:
    (root / "examples" / "conf").mkdir(parents=True)
    (root / "examples" / "real.sh").write_text("MODEL_ARGS='--num-layers 2'\n")
    os.symlink("../real.sh", root / "examples" / "conf" / "link.sh")  # relative to conf/
    os.symlink("link2.sh", root / "examples" / "conf" / "loop.sh")
    os.symlink("loop.sh", root / "examples" / "conf" / "link2.sh")
    os.symlink("/etc/hostname", root / "examples" / "outside.sh")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(root), *args], check=True)


def test_a_link_reads_as_the_file_it_names(tmp_path: Path) -> None:
    _repo(tmp_path)
    gitdir = str(tmp_path)
    link = "examples/conf/link.sh"
    assert megatron_examples.repo_files(gitdir)(link) == (tmp_path / link).read_text()
    assert megatron_examples.show(gitdir, link) == (tmp_path / link).read_text()
    assert megatron_examples.show(gitdir, "examples/real.sh") == "MODEL_ARGS='--num-layers 2'\n"
    # a loop (the file system refuses it too) and a target outside the repository: nothing
    assert megatron_examples.show(gitdir, "examples/conf/loop.sh") is None
    assert megatron_examples.show(gitdir, "examples/outside.sh") is None
    assert megatron_examples.show(gitdir, "examples/none.sh") is None
