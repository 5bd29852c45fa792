"""planner.emit.k8s: the PyTorchJob manifest is valid YAML (yaml.safe_load is the oracle), its
strings come back exactly as written (hostile job names and odd characters included), and the
torchrun arguments in it are the plan's Megatron-LM arguments word for word.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run
from paths import PLANS

from planner.emit import k8s
from planner.emit.common import nodes
from planner.emit.megatron import arguments
from planner.emit.prediction import predict
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan

GOLDEN_PLANS = sorted(PLANS.glob("launch-*.toml"))
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
"""A PyTorchJob's name: Kubeflow's training operator (v1.7-v1.9) asserts a DNS-1035 label
(pytorchjob_webhook.go validatePyTorchJob: NameIsDNS1035Label), which starts with a letter."""

ODD = [
    'a b"c$(touch /tmp/pwned)`backtick`',
    "x'; rm -rf ~; echo '",
    "two\nlines\r\n\ttab: # not a comment",
    "- [list] {map}: &anchor *alias !tag %dir @at `tick` | > ? ,",
    "ünïcødé ✓ 😀 \u2028\u2029\u0085\ufeff \x00\x07\x1b\x7f",
    "yes",
    "null",
    "0x10",
    "1e3",
    "",
    "\\",
    '"',
]


def container(doc: dict[str, Any]) -> dict[str, Any]:
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]
    c: dict[str, Any] = worker["template"]["spec"]["containers"][0]
    return c


@pytest.mark.parametrize("text", ODD)
def test_yaml_strings_round_trip(text: str) -> None:
    assert yaml.safe_load(k8s.yaml_str(text)) == text
    assert yaml.safe_load(k8s.to_yaml({text or "k": [text, {"v": text}]})) == {
        text or "k": [text, {"v": text}]
    }


def test_empty_collections_keep_their_kind() -> None:
    data: dict[str, Any] = {"a": [], "b": {}, "c": [[], {}, [1, []], {"d": []}]}
    assert yaml.safe_load(k8s.to_yaml(data)) == data


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_manifest_is_valid_yaml_with_the_plans_arguments(path: Path) -> None:
    plan = load_plan(path)
    doc = yaml.safe_load(k8s.render(plan, path.stem))
    assert doc == k8s.manifest(plan, path.stem, predict(plan))
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    n = nodes(plan)
    spec = doc["spec"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == n.nnodes
    assert spec["nprocPerNode"] == str(n.nproc_per_node)
    policy = spec["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d"
    assert policy["minReplicas"] == policy["maxReplicas"] == n.nnodes
    c = container(doc)
    assert c["name"] == "pytorch" and c["command"] == ["torchrun"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": n.nproc_per_node}
    args = c["args"]
    flat = arguments(plan).flat()
    start = args.index("$(MEGATRON_DIR)/pretrain_gpt.py") + 1
    assert args[start : start + len(flat)] == flat
    assert args[:6] == [
        *("--nnodes", str(n.nnodes), "--nproc-per-node", str(n.nproc_per_node)),
        *("--rdzv-backend", "c10d"),
    ]
    # every $(NAME) the arguments use is defined in the container's env
    names = {e["name"] for e in c["env"]}
    used = {m for a in args for m in re.findall(r"\$\((\w+)\)", a)}
    assert used <= names


@pytest.mark.parametrize("name", [n for n in ODD if re.search(r"[A-Za-z0-9]", n)])
def test_hostile_job_names_stay_data(name: str) -> None:
    plan = load_plan(PLANS / "launch-mixtral-8x7b.toml")
    if "\x00" in name:
        with pytest.raises(InputError, match="NUL"):
            from planner.emit.launch import render

            render(plan, "k8s", name)
        return
    text = k8s.render(plan, name)
    doc = yaml.safe_load(text)
    meta = doc["metadata"]
    assert DNS1035.fullmatch(meta["name"]) and len(meta["name"]) <= 42
    assert meta["annotations"]["planner/job-name"] == name
    # the header comment stays comments: only the manifest is data
    head = text.split("apiVersion:")[0]
    assert all(line.startswith("#") for line in head.splitlines())


def test_a_name_starting_with_a_digit_gets_a_letter_and_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'8b' or '2025 run' (a plan file named 70b.toml) was written as metadata.name '8b', which
    the training operator's webhook refuses; the name is now 'j-8b', and launch says so."""
    plan = load_plan(PLANS / "launch-mixtral-8x7b.toml")
    for given, name in (("8b", "j-8b"), ("2025 run", "j-2025-run"), ("run 1", "run-1")):
        assert yaml.safe_load(k8s.render(plan, given))["metadata"]["name"] == name
    code, _, err = run(
        ["launch", str(PLANS / "launch-mixtral-8x7b.toml"), "--target", "k8s", "--job-name", "8b"],
        capsys,
    )
    assert code == 0 and "note: the PyTorchJob's metadata.name is 'j-8b'" in err
    code, _, err = run(
        ["launch", str(PLANS / "launch-mixtral-8x7b.toml"), "--target", "slurm", "--job-name",
         "ünï run"],
        capsys,
    )  # fmt: skip
    assert code == 0 and "note: #SBATCH --job-name is 'n-run'" in err
    code, _, err = run(
        ["launch", str(PLANS / "launch-mixtral-8x7b.toml"), "--target", "k8s"], capsys
    )
    assert code == 0 and "metadata.name" not in err  # the plan's stem is a label as it is


def test_a_name_without_letters_or_digits_is_refused() -> None:
    plan = load_plan(PLANS / "launch-mixtral-8x7b.toml")
    with pytest.raises(InputError, match="job-name"):
        k8s.render(plan, "!!! ---")


def test_kubernetes_does_not_expand_dollar_paren_in_values() -> None:
    assert k8s.k8s_literal("a$(HOME)b") == "a$$(HOME)b"
    assert k8s.k8s_literal("$HOME") == "$HOME"


def test_amd_gpus_are_requested_as_amd_resources() -> None:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "mi300x-192gb", "num_gpus": 16},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "parallel": {"tp": 8},
    }
    manifest = yaml.safe_load(k8s.render(parse_plan(doc), "amd-job"))
    env = {e["name"]: e["value"] for e in container(manifest)["env"]}
    assert container(manifest)["resources"]["limits"] == {"amd.com/gpu": 8}
    assert env["HSA_NO_SCRATCH_RECLAIM"] == "1" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_fsdp_manifest_sets_cuda_device_max_connections_above_one() -> None:
    # Megatron-FSDP asserts it is not "1"; on NVIDIA 32, as Megatron-Bridge's FSDP recipes set it
    plan = load_plan(PLANS / "launch-mixtral-8x7b.toml")  # zero_stage 3, H100
    text = k8s.render(plan, "j")
    env = {e["name"]: e["value"] for e in container(yaml.safe_load(text))["env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert "must not be set in the image" not in text


def test_fsdp_manifest_on_amd_leaves_cuda_device_max_connections_out() -> None:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "mi300x-192gb", "num_gpus": 16},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "parallel": {"tp": 1, "zero_stage": 3},
    }
    text = k8s.render(parse_plan(doc), "j")
    env = {e["name"] for e in container(yaml.safe_load(text))["env"]}
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env
    assert "# CUDA_DEVICE_MAX_CONNECTIONS must not be set in the image" in text
