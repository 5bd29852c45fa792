"""The launch files besides shell scripts, as `planner check --megatron-args` reads them: a
Kubeflow PyTorchJob (`planner launch --target k8s`, or one written by hand) as what its
containers launch (`read_job`); a Megatron-Bridge ConfigContainer override (`--target
megatron-bridge`), which is no command line, refused by name (`refuse_bridge`).

PyTorchJob:
Kubernetes runs a container's `command` followed by its `args`, each list item one word, a
`$(NAME)` in them replaced by that container's `env` value (the kubelet's dependent
environment-variable expansion; a name it does not define stays as written). So the job is read
as the shell line of those words under those assignments (`megatron_line.launch`). Its GPU count
is `nprocPerNode` processes on each pod, the pods being the replicas of every replica type
(Master and Worker); without spec.nprocPerNode, torchrun's --nproc-per-node x --nnodes.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Launch, launch

_KIND = re.compile(r"""^kind:[ \t]*["']?PyTorchJob["']?[ \t]*$""", re.MULTILINE)
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def is_job(text: str) -> bool:
    """Whether the text is a PyTorchJob manifest (a top-level `kind: PyTorchJob`)."""
    return _KIND.search(text) is not None


def read_job(text: str, where: str) -> Launch:
    """The launch of the job's first container that runs a Python script, with its GPU count:
    the words per pod times the pods."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: malformed YAML: {e}") from None
    specs = _get(doc, "spec", "pytorchReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        raise InputError(f"{where}: spec.pytorchReplicaSpecs: a PyTorchJob needs replica specs")
    pods = 0
    found: Launch | None = None
    for kind, replica in specs.items():
        count = _get(replica, "replicas")
        count = 1 if count is None else count
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InputError(
                f"{where}: spec.pytorchReplicaSpecs.{kind}.replicas: expected a count "
                f"(got {count!r})"
            )
        pods += count
        containers = _get(replica, "template", "spec", "containers") or []
        for c in containers if isinstance(containers, list) else []:
            got = _container(c, where)
            if found is None and got is not None and got.scripts:
                found = got
    if found is None:
        raise InputError(f"{where}: no container of the PyTorchJob runs a Python script")
    per_pod = _get(doc, "spec", "nprocPerNode")
    if isinstance(per_pod, str) and per_pod.isdecimal():
        per_pod = int(per_pod)
    if not isinstance(per_pod, int) or isinstance(per_pod, bool):
        per_pod = None
    world = found.world  # torchrun's --nproc-per-node x --nnodes: the pods' total
    if per_pod is not None:
        world = (per_pod * pods, f"nprocPerNode {per_pod} x {pods} pod(s)")
    return Launch(found.words, found.env, world, found.scripts)


_BRIDGE_MODEL = re.compile(r"^model:[ \t]*$", re.MULTILINE)
_BRIDGE_SECTION = re.compile(
    r"^(train|optimizer|ddp|mixed_precision|checkpoint|scheduler):[ \t]*$", re.MULTILINE
)


def refuse_bridge(text: str, where: str) -> None:
    """A Megatron-Bridge ConfigContainer override (a top-level `model:` mapping beside another
    of the container's sections) is bad input for a command-line reader, said so by name (read
    as a script it was "NeMo-style overrides", and with --nemo-model "Megatron-LM flags")."""
    if _BRIDGE_MODEL.search(text) and _BRIDGE_SECTION.search(text):
        raise InputError(
            f"{where}: a Megatron-Bridge ConfigContainer override (a YAML mapping of model, "
            "train, ...), not a command line: check --megatron-args reads Megatron-LM arguments "
            "and NeMo 2 `nemo llm pretrain` lines; check the plan it was written from (or its "
            "`planner launch --target megatron-args` line)"
        )


def _container(c: Any, where: str) -> Launch | None:
    """What one container launches: its command and args under its env, or None."""
    if not isinstance(c, dict):
        return None
    words = [*(_words(c.get("command"), where)), *(_words(c.get("args"), where))]
    if not words:
        return None
    env: dict[str, str] = {}
    for e in c.get("env") or []:
        if isinstance(e, dict) and isinstance(e.get("name"), str) and "value" in e:
            env[e["name"]] = str(e["value"])
    words = [_REF.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in words]
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if _NAME.fullmatch(k)]
    return launch("\n".join([*lines, shlex.join(words)]))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words(value: Any, where: str) -> list[str]:
    """A container's command or args: a list of words (numbers written unquoted as words)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: a container's command / args: expected a list (got {value!r})")
    return [str(v).lower() if isinstance(v, bool) else str(v) for v in value]


def _get(doc: Any, *keys: str) -> Any:
    """doc[k1][k2]... or None where a level is missing or not a mapping."""
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc
