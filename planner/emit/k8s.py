"""A Kubeflow PyTorchJob (training-operator `kubeflow.org/v1`) manifest for the plan's job.

One Worker pod per node, each running torchrun with one worker per GPU. `elasticPolicy` with
min = max replicas makes the operator set torchrun's c10d rendezvous through the environment
(PET_RDZV_BACKEND, PET_RDZV_ENDPOINT = <job>-worker-0:<rdzvPort>, PET_RDZV_ID, PET_NNODES;
training-operator pkg/controller.v1/pytorch/elastic.go, ecosystem.md 2.3). The container runs
torchrun directly (no shell): every argument is one YAML string, so nothing is re-parsed; "$(" in
a value is written "$$(" so Kubernetes does not expand it. Paths the user sets are container
environment variables that the arguments reference as $(NAME). Strings are double-quoted YAML
scalars with control characters escaped; the metadata name is a DNS-1123 slug of the job name,
whose exact text is kept in an annotation.
"""

from __future__ import annotations

import re
from typing import Any

from planner.emit.common import RDZV_PORT, SCHEDULE, comment_block, environment, nodes, slug
from planner.emit.megatron import arguments
from planner.emit.megatron_model import training_script
from planner.emit.prediction import HEADROOM, Prediction, header, predict
from planner.inputs.plan import Plan

GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}

USER_ENV = {
    "MEGATRON_DIR": "/opt/megatron-lm",  # a Megatron-LM checkout in the image
    "DATA_PATH": "/data/SET-ME_text_document",  # Megatron indexed dataset prefix
    "TOKENIZER_MODEL": "/data/SET-ME-tokenizer",  # Hugging Face tokenizer name or directory
}


def yaml_str(s: str) -> str:
    """A double-quoted YAML scalar; backslash, quote and non-printable characters escaped."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or 0xD800 <= code < 0xE000:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        elif code in (0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


YAML_WORDS = {"y", "yes", "n", "no", "true", "false", "on", "off", "null"}
"""Plain words YAML 1.1 reads as booleans or null (a key like these is quoted)."""


def _key(k: str) -> str:
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]*", k) and k.lower() not in YAML_WORDS
    return k if plain else yaml_str(k)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return yaml_str(str(v))


def _inline(v: Any) -> str | None:
    """`v` on the line of its key or dash: a scalar or an empty collection; None = a block."""
    if isinstance(v, dict | list):
        return None if v else "{}" if isinstance(v, dict) else "[]"
    return _scalar(v)


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML of nested dicts, lists and scalars (strings always quoted)."""
    pad = " " * indent
    out = ""
    if isinstance(value, dict):
        for k, v in value.items():
            line = _inline(v)
            body = f" {line}\n" if line is not None else f"\n{to_yaml(v, indent + 2)}"
            out += f"{pad}{_key(k)}:{body}"
        return out
    if isinstance(value, list):
        for v in value:
            line = _inline(v)
            body = line + "\n" if line is not None else to_yaml(v, indent + 2)[indent + 2 :]
            out += f"{pad}- {body}"
        return out
    return f"{pad}{_scalar(value)}\n"


def k8s_literal(word: str) -> str:
    """An argument Kubernetes must not expand: "$(" becomes "$$("."""
    return word.replace("$(", "$$(")


def k8s_name(job_name: str) -> str:
    """The PyTorchJob's metadata.name: a DNS-1035 label (`slug`, starting with a letter: 'j-'
    before a digit), which Kubeflow's training operator asserts of a PyTorchJob's name
    (pkg/webhooks/pytorch/pytorchjob_webhook.go `validatePyTorchJob`, NameIsDNS1035Label,
    v1.7-v1.9)."""
    name = slug(job_name)
    return name if name[0].isalpha() else f"j-{name}"


def manifest(plan: Plan, job_name: str, p: Prediction) -> dict[str, Any]:
    """The PyTorchJob as plain data; `p` is `predict(plan)`."""
    n = nodes(plan)
    name = k8s_name(job_name)
    gpu = plan.job.cluster.gpu
    args = [
        *("--nnodes", str(n.nnodes), "--nproc-per-node", str(n.nproc_per_node)),
        *("--rdzv-backend", "c10d"),
        f"$(MEGATRON_DIR)/{training_script(plan)}",
        *(k8s_literal(w) for w in arguments(plan).flat()),
        *(word for flag, _, value in SCHEDULE for word in (flag, value)),
        *("--data-path", "$(DATA_PATH)", "--split", "99,1,0"),
        *("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "$(TOKENIZER_MODEL)"),
        *(
            "--save",
            "$(CHECKPOINT_DIR)",
            "--load",
            "$(CHECKPOINT_DIR)",
            "--save-interval",
            str(p.checkpoint_interval_steps),
        ),
    ]
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in USER_ENV.items()]
    env.append({"name": "CHECKPOINT_DIR", "value": f"/checkpoints/{name}"})
    env += [{"name": e.name, "value": e.value} for e in environment(plan) if e.value is not None]
    container = {
        "name": "pytorch",  # the operator finds the training container by this name
        "image": "SET-ME/megatron-lm:latest",
        "command": ["torchrun"],
        "args": args,
        "env": env,
        "ports": [{"name": "pytorchjob-port", "containerPort": RDZV_PORT}],
        "resources": {"limits": {GPU_RESOURCE[gpu.vendor]: n.nproc_per_node}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": {"planner/job-name": job_name}},
        "spec": {
            "nprocPerNode": str(n.nproc_per_node),
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "rdzvPort": RDZV_PORT,
                "rdzvId": name,
                "minReplicas": n.nnodes,
                "maxReplicas": n.nnodes,
                "maxRestarts": 0,
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": n.nnodes,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [container],
                            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                        }
                    },
                }
            },
        },
    }


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The manifest, after the header comment."""
    p = predict(plan, headroom_pct)
    unset = [e for e in environment(plan) if e.value is None]
    lines = [
        *header(plan, "k8s", job_name, p),
        f"Kubeflow PyTorchJob: {nodes(plan).nnodes} Worker pod(s), torchrun with c10d rendezvous",
        "set: image, DATA_PATH, TOKENIZER_MODEL, and CHECKPOINT_DIR on a volume all pods share",
        "(add it under volumes / volumeMounts)",
        *(f"{e.name} must not be set in the image: {e.why}" for e in unset),
    ]
    return comment_block(lines) + to_yaml(manifest(plan, job_name, p))
