"""Compose the Megatron-LM command lines of yanring/Megatron-MoE-ModelZoo's best-practice scripts
(`python benchmarks/moe_model_zoo.py --extract GITDIR` writes them to
benchmarks/data/megatron_moe_model_zoo/command_lines.json).

Each script (best_practice/<model>/*.sh) exports a few variables and calls sbatch_benchmarking.sh
with `NAME=value` settings and extra Megatron words. That script (read, not run) sources
runtime_configs/benchmarking/common.conf (PR defaults to bf16) and runtime.conf (each model's
TP PP EP CP VPP MBS GBS NUM_LAYERS ... defaults, which the settings override), then builds the line
in this order, which `compose` follows:
1. the model's YAML (model_configs/benchmarking/<MODEL>.yaml) MODEL_ARGS after envsubst: a value
   `false` drops the flag, `true` leaves it bare, anything else follows it (split by the shell);
2. the invocation's extra words;
3. --num-virtual-stages-per-pipeline-rank VPP if VPP > 1 and the line names no layout, virtual
   stages or layers per virtual stage; --decoder-first/last-pipeline-num-layers PP_FIRST PP_LAST
   if NUM_LAYERS % PP and no layout;
4. OPTIMIZER_OFFLOAD=1: --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d;
5. DISPATCHER (default deepep): alltoall | flex + deepep | flex + hybridep with 32 SMs;
6. PR: fp8 -> blockwise e4m3 (+ --fp8-param-gather without offload), precision-aware optimizer
   with fp32 main grads and params, bf16 moments, --moe-router-padding-for-fp8; bf16 ->
   --tp-comm-overlap; mxfp8 -> mxfp8 e4m3 (+ --fp8-param-gather
   --reuse-grad-buf-for-mxfp8-param-ag --overlap-grad-reduce --overlap-param-gather without
   offload), the same optimizer settings, --moe-router-padding-for-quantization;
7. A2A_OVERLAP=1: --delay-wgrad-compute --overlap-moe-expert-parallel-comm, with
   CUDA_DEVICE_MAX_CONNECTIONS=32 and NVTE_{FWD,BWD}_LAYERNORM_SM_MARGIN=24 (else 1 and 0);
8. --max-position-embeddings SEQ_LEN where SEQ_LEN exceeds the YAML's.
GPUs: NNODES x 4 with GB200_CLUSTER=1 (GB200 / GB300 trays), else x 8. The YAML's ENV_VARS and
step 7's are the line's environment. One level of quotes around a value (Kimi-K2's
`'([0]*1+[1]*60)'` and `'Et|t|(tt|)*29tL'`, written so for the shell) is removed: Megatron-LM's
pattern parser accepts none.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPOSITORY = "https://github.com/yanring/Megatron-MoE-ModelZoo"
KEYS = (
    *("TP", "PP", "EP", "CP", "VPP", "MBS", "GBS", "NUM_LAYERS", "MOE_TOKEN_DISPATCHER"),
    *("MOE_GROUPED_GEMM", "NNODES", "RUN_TIME", "PRETRAIN", "SEQ_LEN", "DATASET"),
    *("PP_FIRST", "PP_LAST"),
)
"""runtime.conf's columns, in order."""

GPU: dict[tuple[str, int], tuple[str, str]] = {
    ("deepseek-v3/run_deepseek_v3_b200.sh", 0): ("b200-sxm-180gb", "script name; '256x B200'"),
    ("deepseek-v3/run_deepseek_v3_gb200.sh", 0): ("gb200-nvl72", "script name; '256 GPUs'"),
    ("deepseek-v3/run_deepseek_v3_gb300.sh", 0): ("gb300-nvl72", "script name; '128 GPUs'"),
    ("deepseek-v3/run_deepseek_v3_h100.sh", 0): ("h100-sxm-80gb", "'1024 H100 GPUs'"),
    ("deepseek-v3/run_deepseek_v3_h100.sh", 1): ("b200-sxm-180gb", "'B200 config with 256 GPUs'"),
    ("kimi-k2/run_kimi_k2_gb200_128k_G128.sh", 0): ("gb200-nvl72", "script name (GB200_CLUSTER=1)"),
    ("qwen3/run_235b.sh", 0): ("h100-sxm-80gb", "'H100 baseline config'"),
    ("qwen3/run_235b.sh", 1): ("b200-sxm-180gb", "'B200 baseline config'"),
    ("qwen3/run_235b.sh", 2): ("gb200-nvl72", "'GB200 baseline config 128 GPUs' (4 a node)"),
    ("qwen3/run_235b.sh", 3): ("gb200-nvl72", "'GB200 baseline config 128 GPUs' (4 a node)"),
    ("qwen3/run_30b.sh", 2): ("b200-sxm-180gb", "'config for 1x8 B200 nodes'"),
    ("qwen3/run_gb200_235b.sh", 0): ("gb200-nvl72", "script name (GB200_CLUSTER=1)"),
    ("qwen3/run_gb200_235b.sh", 1): ("gb200-nvl72", "script name (GB200_CLUSTER=1)"),
    ("qwen3/run_gb200_235b.sh", 2): ("gb200-nvl72", "script name (GB200_CLUSTER=1)"),
    ("qwen3/run_gb300_235b.sh", 0): ("gb300-nvl72", "script name (GB200_CLUSTER=1)"),
}
"""The GPU each invocation names (its script's name or the comment above it); the others name
none and run on 8-GPU nodes (DeepSeek-V3's long-context lines say '256 H100' / '512 H100'):
H100, the part the zoo's README lists first."""

GB200_NODES = {("qwen3/run_235b.sh", 2), ("qwen3/run_235b.sh", 3)}
"""Invocations in scripts that do not export GB200_CLUSTER=1 but whose comment says GB200 with
4 GPUs a node ('128 GPUs' over NNODES=32)."""


def _show(git_dir: Path, commit: str, path: str) -> str:
    return subprocess.check_output(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], text=True
    )


def _envsubst(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), text)


def _unquote(word: str) -> str:
    if len(word) > 1 and word[0] == word[-1] and word[0] in "'\"":
        return word[1:-1]
    return word


def _yaml_words(text: str, model_args: dict[str, Any]) -> list[str]:
    """MODEL_ARGS (parsed from `text`) as sbatch_benchmarking.sh's yq turns them into words
    (step 1): the raw text of each value, which YAML's parse would reformat."""
    words: list[str] = []
    for key, value in model_args.items():
        raw = re.search(re.escape(key) + r":[ \t]*([^#\n]*)", text)
        shown = raw.group(1).strip() if raw else str(value)
        if value is False or shown == "false":
            continue
        if value is True or shown == "true":
            words.append(key)
            continue
        words += [key, *(_unquote(w) for w in shlex.split(shown))]
    return words


def compose(
    model_yaml: str, runtime: dict[str, list[str]], settings: dict[str, str], extra: list[str]
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(words, environment, resolved settings) of one invocation (module docstring)."""
    env = dict(settings)
    for key, value in zip(KEYS, runtime[env["MODEL"]], strict=False):
        env.setdefault(key, value)
    env.setdefault("WORKSPACE", "/workspace")
    env.setdefault("PR", "bf16")
    pp, vpp, layers = int(env["PP"]), int(env["VPP"]), int(env["NUM_LAYERS"])
    env["LAYERS_PER_VP"] = str(layers // pp // vpp) if vpp > 1 else "false"
    text = _envsubst(model_yaml, env)
    doc = yaml.safe_load(text)
    words = _yaml_words(text, doc["MODEL_ARGS"]) + extra
    joined = " ".join(words)
    layout = "--pipeline-model-parallel-layout" in joined
    virtual = ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage")
    if vpp > 1 and not layout and not any(v in joined for v in virtual):
        words += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
    if layers % pp and not layout:
        words += ["--decoder-first-pipeline-num-layers", env["PP_FIRST"]]
        words += ["--decoder-last-pipeline-num-layers", env["PP_LAST"]]
    offload = env.get("OPTIMIZER_OFFLOAD", "0") == "1"
    if offload:
        words += ["--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d"]
    words += {
        "alltoall": ["--moe-token-dispatcher-type", "alltoall"],
        "deepep": [
            "--moe-token-dispatcher-type",
            "flex",
            "--moe-flex-dispatcher-backend",
            "deepep",
        ],
        "hybridep": [
            *("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"),
            *("--moe-hybridep-num-sms", "32"),
        ],
    }.get(env.get("DISPATCHER", "deepep"), [])
    aware = [
        *("--use-precision-aware-optimizer", "--main-grads-dtype", "fp32"),
        *("--main-params-dtype", "fp32", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"),
    ]
    if env["PR"] == "fp8":
        words += ["--fp8-recipe", "blockwise", "--fp8-format", "e4m3"]
        words += [] if offload else ["--fp8-param-gather"]
        words += [*aware, "--moe-router-padding-for-fp8"]
    elif env["PR"] == "bf16":
        words += ["--tp-comm-overlap"]
    elif env["PR"] == "mxfp8":
        words += ["--fp8-recipe", "mxfp8", "--fp8-format", "e4m3"]
        if not offload:
            words += ["--fp8-param-gather", "--reuse-grad-buf-for-mxfp8-param-ag"]
            words += ["--overlap-grad-reduce", "--overlap-param-gather"]
        words += [*aware, "--moe-router-padding-for-quantization"]
    a2a = env.get("A2A_OVERLAP", "0") == "1"
    if a2a:
        words += ["--delay-wgrad-compute", "--overlap-moe-expert-parallel-comm"]
    mpe = doc["MODEL_ARGS"].get("--max-position-embeddings")
    if mpe is not None and int(env["SEQ_LEN"]) > int(mpe):
        words += ["--max-position-embeddings", env["SEQ_LEN"]]
    run_env = {k: str(v) for k, v in (doc.get("ENV_VARS") or {}).items()}
    run_env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32" if a2a else "1"
    margin = "24" if a2a else "0"
    run_env["NVTE_FWD_LAYERNORM_SM_MARGIN"] = run_env["NVTE_BWD_LAYERNORM_SM_MARGIN"] = margin
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER"):  # set on the invocation
        if key in settings:
            run_env[key] = settings[key]
    return words, run_env, env


def _invocations(text: str) -> list[tuple[str, dict[str, str], list[str]]]:
    """(invocation, settings, extra words) of each sbatch_benchmarking.sh call; settings include
    the script's exports (`export NAME=${NAME:-default}` as its default). Comments are skipped
    (some carry the throughput NVIDIA measured, which is held out)."""
    exported: dict[str, str] = {}
    out = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        s = line.strip()
        if s.startswith("#"):
            continue
        m = re.match(r"export (\w+)=(.*)", s)
        if m:
            value = m.group(2).split("#")[0].strip()
            default = re.match(r"\$\{\w+:-(.*)\}$", value)
            exported[m.group(1)] = (default.group(1) if default else value).strip('"')
        elif "sbatch_benchmarking.sh" in s:
            before, after = s.split("sbatch_benchmarking.sh", 1)
            settings = dict(exported)
            for word in shlex.split(before):
                if "=" in word:
                    key, value = word.split("=", 1)
                    ref = re.fullmatch(r"\$\{(\w+)(?::-[^}]*)?\}", value)
                    settings[key] = exported.get(ref.group(1), "") if ref else value
            extra = [_unquote(_envsubst(w, {"TRAIN_ITERS": "10"})) for w in shlex.split(after)]
            extra = [w.replace("${TRAIN_ITERS:-10}", "10") for w in extra]
            out.append((s, settings, extra))
    return out


def extract(git_dir: Path, commit: str = "HEAD") -> dict[str, Any]:
    """The data file's contents from a clone's git dir at `commit`."""
    commit = subprocess.check_output(
        ["git", f"--git-dir={git_dir}", "rev-parse", commit], text=True
    ).strip()
    listing = subprocess.check_output(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit], text=True
    ).split()
    runtime = {
        m.group(1): m.group(2).split()
        for m in re.finditer(
            r'^\s*\[([\w.-]+)\]="\s*(.*?)"',
            _show(git_dir, commit, "runtime_configs/benchmarking/runtime.conf"),
            re.M,
        )
    }
    rows = []
    for path in sorted(p for p in listing if re.match(r"best_practice/.*\.sh$", p)):
        script = path.removeprefix("best_practice/")
        for i, (call, settings, extra) in enumerate(_invocations(_show(git_dir, commit, path))):
            model = settings["MODEL"]
            yaml_path = f"model_configs/benchmarking/{model}.yaml"
            words, env, resolved = compose(
                _show(git_dir, commit, yaml_path), runtime, settings, extra
            )
            gpu, basis = GPU.get((script, i), ("h100-sxm-80gb", "none named: H100 assumed"))
            four = resolved.get("GB200_CLUSTER") == "1" or (script, i) in GB200_NODES
            rows.append(
                {
                    "id": f"{script.removesuffix('.sh')}#{i}",
                    "script": path,
                    "model_config": yaml_path,
                    "invocation": call,
                    "model": model,
                    "gpu": gpu,
                    "gpu_basis": basis,
                    "num_gpus": int(resolved["NNODES"]) * (4 if four else 8),
                    "env": env,
                    "args": words,
                }
            )
    return {
        "source": {
            "repository": REPOSITORY,
            "commit": commit,
            "files": [
                "best_practice/*/*.sh",
                "model_configs/benchmarking/<MODEL>.yaml",
                "runtime_configs/benchmarking/{common,runtime}.conf",
                "sbatch_benchmarking.sh (read, emulated by benchmarks/moe_model_zoo_extract.py)",
            ],
            "method": __doc__,
        },
        "rows": rows,
    }
