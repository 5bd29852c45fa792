"""planner.emit.torchrun: the bash script is valid (bash -n, shellcheck), and run with a stub
`torchrun` first on PATH it hands torchrun every argument intact, hostile job names included,
without running anything hidden in them. The stub records its argv NUL-separated, so the oracle
is the exact list of words the emitter meant (planner.emit.megatron.arguments plus the script's
own), compared word for word.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest
from megatron_plans import make_plan
from paths import PLANS
from shell_check import check_script

from planner.emit import torchrun
from planner.emit.common import RDZV_PORT, nodes
from planner.emit.megatron import arguments
from planner.emit.prediction import predict
from planner.inputs import megatron_args
from planner.inputs.plan import Plan, load_plan, parse_plan

GOLDEN_PLANS = sorted(PLANS.glob("launch-*.toml"))

# Each {d} is the test's temporary directory: a name that ran anything would leave a file there.
HOSTILE = [
    'a b"c$(touch {d}/pwned1)`touch {d}/pwned2`',
    "x'; touch {d}/pwned3; echo '",
    "two\nlines $(touch {d}/pwned4) ; touch {d}/pwned5",
    "$HOME ${{PATH}} \\ * ? [a] ~ # ! & | ; < > {{a,b}}",
    "--nnodes 1 -- ünïcødé ✓ \u2028 tab\there \x1b[31m",
    "-smoke",
]


def stub_bin(tmp: Path) -> Path:
    """A directory with a `torchrun` that records argv (NUL-separated) and one env variable."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "torchrun"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'printf \'%s\\0\' "$@" > "$ARGV_OUT"\n'
        'printf \'%s\' "${CUDA_DEVICE_MAX_CONNECTIONS-<unset>}" > "$ARGV_OUT.cdmc"\n'
    )
    stub.chmod(0o755)
    return bin_dir


def run_script(
    script: Path, tmp: Path, extra_env: dict[str, str | None] | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": f"{stub_bin(tmp)}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp),
        "ARGV_OUT": str(tmp / "argv"),
        "MEGATRON_DIR": "/opt/mlm dir",
        "MASTER_ADDR": "localhost",  # what a multi-node script requires of its caller
        **(extra_env or {}),
    }
    env = {k: v for k, v in env.items() if v is not None}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=60)


def recorded(tmp: Path) -> list[str]:
    data = (tmp / "argv").read_bytes()
    assert data.endswith(b"\0")
    return data[:-1].decode("utf-8").split("\0")


def expected_argv(plan: Plan, job_name: str, data: list[str]) -> list[str]:
    n = nodes(plan)
    values = {'"$TRAIN_ITERS"': "1000", '"$LR"': "3e-4", '"$MIN_LR"': "3e-5"}
    values['"$WARMUP_ITERS"'] = "100"
    training_extra = [values.get(w, w) for a in torchrun.TRAINING_EXTRA for w in a]
    args = arguments(plan)
    return [
        *("--nnodes", str(n.nnodes), "--nproc-per-node", str(n.nproc_per_node)),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{RDZV_PORT}"),
        f"--rdzv-id={job_name}",
        "/opt/mlm dir/pretrain_gpt.py",
        *(w for a in args.model for w in a),
        *(w for a in args.parallel for w in a),
        *(w for a in args.training for w in a),
        *training_extra,
        *data,
        *("--save", f"checkpoints/{job_name}", "--load", f"checkpoints/{job_name}"),
        # the default interval is Daly's optimum for the plan (planner.ops.resilience)
        *("--save-interval", str(predict(plan).checkpoint_interval_steps)),
    ]


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_bash_n_and_shellcheck_clean(path: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(load_plan(path), path.stem))
    check_script(script)


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_job_names_reach_torchrun_intact(index: int, tmp_path: Path) -> None:
    name = HOSTILE[index].format(d=tmp_path)
    plan = load_plan(PLANS / "launch-mixtral-8x7b.toml")
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(plan, name))
    check_script(script)
    res = run_script(script, tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    mock = ["--mock-data", "--tokenizer-type", "NullTokenizer"]
    assert recorded(tmp_path) == expected_argv(plan, name, mock)
    assert not list(tmp_path.glob("pwned*")), "a job name ran a command"
    # torchrun reads its options with argparse (torch/distributed/run.py, --rdzv-id a str): a
    # separate word starting with "-" would be taken for the next option and argparse would exit
    parser = argparse.ArgumentParser(exit_on_error=False)
    for flag in ("--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id"):
        parser.add_argument(flag)
    known, _ = parser.parse_known_args(recorded(tmp_path)[:9])
    assert known.rdzv_id == name


def test_data_and_tokenizer_paths_with_spaces(tmp_path: Path) -> None:
    plan = load_plan(PLANS / "launch-llama3.1-405b.toml")
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(plan, "j"))
    extra = {"DATA_PATH": "/data/my corpus_text_document", "TOKENIZER_MODEL": "/tok $(x)"}
    res = run_script(script, tmp_path, extra)
    assert res.returncode == 0, res.stderr.decode()
    data = ["--data-path", "/data/my corpus_text_document", "--split", "99,1,0"]
    data += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/tok $(x)"]
    assert recorded(tmp_path) == expected_argv(plan, "j", data)


def test_real_data_without_a_tokenizer_stops_before_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(load_plan(PLANS / "launch-llama3.1-405b.toml"), "j"))
    res = run_script(script, tmp_path, {"DATA_PATH": "/data/x"})
    assert res.returncode != 0
    assert b"TOKENIZER_MODEL" in res.stderr
    assert not (tmp_path / "argv").exists()


def make(model: str, gpu: str, n: int, parallel: dict[str, object]) -> Plan:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": n},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "parallel": parallel,
    }
    return parse_plan(doc)


@pytest.mark.parametrize(
    ("gpu", "parallel", "seen"),
    [
        ("h100-sxm-80gb", {"tp": 2}, "1"),  # TP > 1 before Blackwell: asserted "1"
        # where 1 is not required, 32 as Megatron-Bridge's recipes set it (bridge_recipes.md)
        ("h100-sxm-80gb", {"tp": 1}, "32"),
        ("h100-sxm-80gb", {"tp": 2, "zero_stage": 3}, "32"),  # FSDP: must not be 1
        ("b200-sxm-180gb", {"tp": 2}, "32"),  # Blackwell: 1 no longer needed
        ("mi300x-192gb", {"tp": 2}, "1"),  # the assert reads the env on ROCm too
        ("mi300x-192gb", {"tp": 1}, "<unset>"),  # AMD: only where Megatron asserts
        ("mi300x-192gb", {"tp": 2, "zero_stage": 3}, "<unset>"),  # FSDP on AMD: cleared
    ],
)
def test_cuda_device_max_connections(
    gpu: str, parallel: dict[str, object], seen: str, tmp_path: Path
) -> None:
    plan = make("llama3.1-8b", gpu, 8, parallel)
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(plan, "j"))
    check_script(script)
    # start from "1" when FSDP must clear or replace it, from unset otherwise
    extra = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if parallel.get("zero_stage") == 3 else {}
    res = run_script(script, tmp_path, extra)
    assert res.returncode == 0, res.stderr.decode()
    assert (tmp_path / "argv.cdmc").read_text() == seen


def test_amd_and_multi_node_environment() -> None:
    text = torchrun.render(make("llama3.1-8b", "mi300x-192gb", 16, {"tp": 8}), "j")
    assert "export HSA_NO_SCRATCH_RECLAIM=1" in text
    assert "export NCCL_IB_TIMEOUT=19" in text
    single = torchrun.render(make("llama3.1-8b", "h100-sxm-80gb", 8, {"tp": 8}), "j")
    assert "NCCL_IB_TIMEOUT" not in single and "--nnodes 1" in single


def test_every_pool_gets_what_its_gpu_asserts() -> None:
    """A Blackwell pool before a Hopper one at tp 2: every pool's script set the first pool's 32,
    which Megatron's validate_args refuses on the Hopper ranks (TP > 1 before Blackwell needs
    "1"); "1" runs on Blackwell too. The pools listed the other way round gave "1" already."""
    pools = [
        {"name": "bw", "gpu": "b200-sxm-180gb", "num_gpus": 8},
        {"name": "hop", "gpu": "h100-sxm-80gb", "num_gpus": 8},
    ]
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"pools": pools},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "parallel": {"tp": 2, "pp": 2, "dp": 4, "pipeline_model_parallel_layout": "Et*20|t*12L"},
    }
    for order in (pools, pools[::-1]):
        plan = parse_plan({**doc, "cluster": {"pools": order}})
        for _, text in torchrun.pool_files(plan, "j"):
            assert "export CUDA_DEVICE_MAX_CONNECTIONS=1 " in text


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_planner_reads_the_script_back(path: Path) -> None:
    """`planner check --megatron-args train.sh` on the script gives the plan's layout back."""
    plan = load_plan(path)
    cluster = plan.job.cluster
    doc = megatron_args.to_plan(torchrun.render(plan, "j"), cluster.gpu.name, cluster.num_gpus)
    back = parse_plan(doc)
    assert plan.layout is not None and back.layout is not None
    assert back.layout.stage_layers(plan.job.arch.num_layers) == plan.layout.stage_layers(
        plan.job.arch.num_layers
    )
    split = (plan.job.arch.num_layers, plan.job.arch.mtp_num_layers)
    assert back.layout.with_(etp=None).split_as_stages(*split) == plan.layout.with_(
        etp=None
    ).split_as_stages(*split)


def test_a_multi_node_script_needs_master_addr(tmp_path: Path) -> None:
    """Left at localhost, each of a multi-node job's nodes would wait for a rendezvous of its
    own until torchrun timed out: the script stops before torchrun, naming MASTER_ADDR. One
    node keeps localhost."""
    multi = load_plan(PLANS / "launch-mixtral-8x7b.toml")
    assert nodes(multi).nnodes > 1
    script = tmp_path / "train.sh"
    script.write_text(torchrun.render(multi, "j"))
    res = run_script(script, tmp_path, {"MASTER_ADDR": None})
    assert res.returncode != 0 and b"MASTER_ADDR" in res.stderr
    assert not (tmp_path / "argv").exists()  # torchrun never ran
    assert 'MASTER_ADDR="${MASTER_ADDR:-localhost}"' in torchrun.render(
        make_plan("llama3.1-8b", 8, {"tp": 8}), "j"
    )
