"""planner.emit.slurm: the sbatch script is valid (bash -n, shellcheck), carries the #SBATCH
directives the issue names, and run with stub `scontrol`, `srun` and `torchrun` it starts torchrun
once per node with the c10d rendezvous on the first node and every argument intact.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from paths import PLANS
from shell_check import check_script

from planner.emit import slurm
from planner.emit.common import RDZV_PORT
from planner.emit.megatron import arguments
from planner.emit.prediction import predict
from planner.inputs.plan import load_plan

GOLDEN_PLANS = sorted(PLANS.glob("launch-*.toml"))
HOSTILE = "a b\"c$(touch {d}/pwned1)`touch {d}/pwned2`\nx'; touch {d}/pwned3"


def directives(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"^#SBATCH --([a-z-]+)(?:=(.*))?$", text, flags=re.M):
        out[m.group(1)] = m.group(2) or ""
    return out


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_bash_n_shellcheck_and_directives(path: Path, tmp_path: Path) -> None:
    plan = load_plan(path)
    text = slurm.render(plan, path.stem)
    script = tmp_path / "train.sbatch"
    script.write_text(text)
    check_script(script)
    d = directives(text)
    per = plan.job.cluster.gpus_per_node
    assert d["nodes"] == str(plan.job.cluster.num_gpus // per)
    assert d["ntasks-per-node"] == "1" and d["gpus-per-node"] == str(per)
    assert "exclusive" in d and d["time"] and d["job-name"] == path.stem
    # sbatch reads directives only before the first command
    first_command = min(
        i for i, ln in enumerate(text.splitlines()) if ln and not ln.startswith("#")
    )
    last_directive = max(i for i, ln in enumerate(text.splitlines()) if ln.startswith("#SBATCH"))
    assert last_directive < first_command


def test_srun_starts_torchrun_with_the_first_node_as_rendezvous(tmp_path: Path) -> None:
    name = HOSTILE.format(d=tmp_path)
    plan = load_plan(PLANS / "launch-deepseek-v3.toml")
    text = slurm.render(plan, name)
    # sbatch parses directives itself: only letters, digits, '.', '_', '-' get there
    assert re.fullmatch(r"a-b-c-touch-[A-Za-z0-9._-]+", directives(text)["job-name"])
    script = tmp_path / "train.sbatch"
    script.write_text(text)
    check_script(script)

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "scontrol": 'printf "node-a\\nnode-b\\n"\n',
        # srun: drop its own options, then run the command once (one task per node)
        "srun": 'while [[ "$1" == --* ]]; do shift; done\nprintf "%s\\n" "$1" > "$OUT.srun"\n'
        'exec "$@"\n',
        "torchrun": 'printf \'%s\\0\' "$@" > "$OUT"\n',
    }
    for stub, body in stubs.items():
        (bin_dir / stub).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / stub).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "OUT": str(tmp_path / "argv"),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_ID": "4242",
        "MEGATRON_DIR": "/mlm",
    }
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    assert (tmp_path / "argv.srun").read_text() == "torchrun\n"
    argv = (tmp_path / "argv").read_bytes()[:-1].decode().split("\0")
    assert argv[:9] == [
        *("--nnodes", "128", "--nproc-per-node", "8", "--rdzv-backend", "c10d"),
        *("--rdzv-endpoint", f"node-a:{RDZV_PORT}", "--rdzv-id=4242"),
    ]
    assert argv[9] == "/mlm/pretrain_gpt.py"
    flat = arguments(plan).flat()
    assert argv[10 : 10 + len(flat)] == flat
    assert argv[-6:] == [
        *("--save", f"checkpoints/{name}", "--load", f"checkpoints/{name}"),
        # the default interval is Daly's optimum for the plan (planner.ops.resilience)
        *("--save-interval", str(predict(plan).checkpoint_interval_steps)),
    ]
    assert not list(tmp_path.glob("pwned*")), "a job name ran a command"
