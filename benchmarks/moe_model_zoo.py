"""NVIDIA's Megatron-MoE-ModelZoo benchmark lines through `planner check --megatron-args`.

    python benchmarks/moe_model_zoo.py                  # every line: read? fits? predicted step
    python benchmarks/moe_model_zoo.py --extract GITDIR # rebuild the data from a clone's git dir

Data: benchmarks/data/megatron_moe_model_zoo/command_lines.json (see its README): the Megatron-LM
command lines that the zoo's best-practice scripts (DeepSeek-V3, Kimi-K2, Mixtral 8x22B, Qwen3
235B / 30B / Next) launch through its sbatch_benchmarking.sh, composed as that script composes
them (the model's YAML MODEL_ARGS, the invocation's extra words, then the words it adds for the
dispatcher, precision, optimizer offload and 1F1B overlap), with the GPU and GPU count each
invocation names. These are the settings of the MoE training runs NVIDIA publishes throughput for
(Megatron-LM's MoE README, which is held out to judge the model: no measured figure is read or
stored here). What this checks: that planner reads NVIDIA's own MoE lines as Megatron-LM would
(or refuses them for Megatron's reasons), and that the layouts NVIDIA ran fit. The vocabulary of
the lines' HuggingFace tokenizers is passed as `--vocab-size` from the zoo's model files, as a
user would.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.search.rules import check_plan

DATA = Path(__file__).resolve().parent / "data" / "megatron_moe_model_zoo" / "command_lines.json"
VOCAB_FROM_ZOO = {
    "DeepSeek-V3": "deepseek-v3",
    "Kimi-K2": "kimi-k2",
    "Mixtral-8x22B": "mixtral-8x22b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen3-Next-80B-A3B": "qwen3-next-80b-a3b",
}
"""The zoo model whose vocabulary a line's tokenizer has (--tokenizer-model names a HuggingFace
repository planner cannot open)."""


USER_PATHS = {
    "--tokenizer-model": "user-tokenizer",
    "--data-path": "user-data",
    "--load": "user-checkpoint",
    "--wandb-project": "user-project",
}
"""Flags whose values the zoo's YAMLs take from the user's environment (${TOKENIZER_MODEL},
${DATA_PATH}, the checkpoint to load and the wandb project), empty in the extraction (envsubst of
unset variables drops the word): a run sets them, so the line gets a stand-in, as Megatron-LM's
argparse needs one word after each (planner refuses the flag bare, as argparse does). The
vocabulary comes from VOCAB_FROM_ZOO."""


def with_user_paths(args: list[str]) -> list[str]:
    """`args` with a USER_PATHS stand-in after each such flag that has no value."""
    out: list[str] = []
    for i, word in enumerate(args):
        out.append(word)
        bare = i + 1 == len(args) or args[i + 1].startswith("--")
        if word in USER_PATHS and bare:
            out.append(USER_PATHS[word])
    return out


def script_text(row: dict[str, Any]) -> str:
    """The line as a launch script: its environment exported, then the training command (the
    user's paths filled in, `with_user_paths`)."""
    env = [f"export {k}={shlex.quote(v)}" for k, v in row["env"].items()]
    words = with_user_paths(row["args"])
    return "\n".join([*env, "python pretrain_gpt.py " + shlex.join(words)]) + "\n"


TP1_OVERLAP = "--tp-comm-overlap: at --tensor-model-parallel-size 1"
"""How the reader refuses the zoo's bf16 lines at tp 1, to which sbatch_benchmarking.sh adds
--tp-comm-overlap: Megatron-LM's validate_args turns sequence parallelism off at tp 1 and then
asserts it for the overlap (arguments.py since 2024-11, d98e8a64 included). `check` reads such a
line once more without the flag, what a run at tp 1 must do, and says so."""

GRAPH_REGISTER = "NCCL_GRAPH_REGISTER: Megatron-LM asserts it is 0"
"""How the reader refuses the zoo's GB200 Qwen3 235B lines of run_235b.sh (--external-cuda-graph,
Transformer Engine's CUDA graphs, beside common.conf's PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True): validate_args asserts NCCL_GRAPH_REGISTER=0 there since 2b343d739f
(2025-12-30; d98e8a64 included), which the zoo's newer scripts (run_gb200_235b.sh) export and
these do not. `check` reads such a line once more with it exported, and says so."""


def _reading(row: dict[str, Any], args: list[str]) -> megatron_args.Reading:
    """The reader on the line's script with `args` as its words, the tokenizer's vocabulary given
    from the zoo (VOCAB_FROM_ZOO)."""
    vocab = catalog.get_model(VOCAB_FROM_ZOO[row["model"]]).vocab_size
    text = script_text(dict(row, args=args))
    return megatron_args.read(text, row["gpu"], row["num_gpus"], row["id"], vocab)


WD_COND = "--no-weight-decay-cond-type: expected one of"
"""How the reader refuses the zoo's Qwen3-Next line: `--no-weight-decay-cond-type qwen3_next`, a
choice of a Megatron-LM newer than d98e8a64, whose parser takes only apply_wd_to_qk_layernorm
(arguments.py:2672): argparse exits. Which parameters skip weight decay changes neither memory nor
time, so `check` reads the line once more without the flag, and says so."""


def runnable(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The line as d98e8a64 runs it, and what that changed: without --tp-comm-overlap at tp 1
    (TP1_OVERLAP), with NCCL_GRAPH_REGISTER=0 beside TE's graphs and expandable segments
    (GRAPH_REGISTER), without a weight-decay condition d98e8a64 lacks (WD_COND)."""
    args: list[str] = row["args"]
    env: dict[str, str] = dict(row["env"])
    changes = []
    flag = WD_COND.split(":")[0]
    if flag in args and args[args.index(flag) + 1] == "qwen3_next":
        at = args.index(flag)
        args = args[:at] + args[at + 2 :]
        changes.append(f"without {flag} qwen3_next")
    if args[args.index("--tensor-model-parallel-size") + 1] == "1" and "--tp-comm-overlap" in args:
        args = [a for a in args if a != "--tp-comm-overlap"]
        changes.append("without --tp-comm-overlap")
    te = "--external-cuda-graph" in args or any(
        a == "--cuda-graph-impl" and b == "transformer_engine" for a, b in itertools.pairwise(args)
    )
    expandable = "expandable_segments:True" in env.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if te and expandable and env.get("NCCL_GRAPH_REGISTER") != "0":
        env["NCCL_GRAPH_REGISTER"] = "0"
        changes.append("with NCCL_GRAPH_REGISTER=0")
    return dict(row, args=args, env=env), changes


def read_plan(row: dict[str, Any]) -> Plan:
    """The plan `check --megatron-args` reads from the line as it can run (`runnable`)."""
    run, _ = runnable(row)
    return parse_plan(_reading(run, run["args"]).doc)


def check(row: dict[str, Any], retried: bool = False) -> dict[str, Any]:
    """What `planner check --megatron-args` says of one line: refused (the message), or the
    layout, peak memory against capacity, and the predicted step; a line refused for
    TP1_OVERLAP or GRAPH_REGISTER is read once more as it can run (`runnable`), which the
    result says (`changed`)."""
    run, changes = runnable(row) if retried else (row, [])
    try:
        reading = _reading(run, run["args"])
        plan = parse_plan(reading.doc)
        check_plan(plan)
    except InputError as e:
        message = str(e).splitlines()[0]
        if not retried and any(m in message for m in (TP1_OVERLAP, GRAPH_REGISTER, WD_COND)):
            return check(row, retried=True)
        return {"verdict": "exit 2", "message": message}
    lay = plan.require_layout()
    mem = memory.estimate(plan.job, lay)
    perf = cost.estimate(plan.job, lay)
    out = {
        "verdict": "read" if mem.fits else "exit 1",
        "layout": lay.describe(),
        "peak_gib": mem.peak / GIB,
        "capacity_gib": mem.capacity / GIB,
        "step_s": perf.step_time_s,
        "tokens_per_s_per_gpu": perf.tokens_per_s_per_gpu,
        "mfu": perf.mfu_bf16_peak,
        "unknown": list(reading.unknown),
        "not_modelled": [n.split(":")[0] for n in reading.not_modelled],
    }
    return dict(out, changed=changes) if changes else out


def rows() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(DATA.read_text())["rows"]
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extract", metavar="GITDIR", help="rebuild the data from a zoo git dir")
    args = ap.parse_args()
    if args.extract:
        from benchmarks.moe_model_zoo_extract import extract

        DATA.write_text(json.dumps(extract(Path(args.extract)), indent=1) + "\n")
        print(f"wrote {DATA}")
        return
    counts: dict[str, int] = {}
    print(f"{'line':28s} {'gpus':>14s}  verdict  peak / capacity GiB  step s  tok/s/GPU  MFU")
    for row in rows():
        r = check(row)
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        gpus = f"{row['num_gpus']} {row['gpu'].split('-')[0]}"
        if r["verdict"] == "exit 2":
            print(f"{row['id']:28s} {gpus:>14s}  exit 2   {r['message'][:150]}")
            continue
        extra = ", ".join(f"not read: {w}" for w in r["unknown"] + r["not_modelled"])
        if "changed" in r:
            how = " and ".join(r["changed"])
            extra = ", ".join(filter(None, [f"read {how} (exit 2 as given)", extra]))
        print(
            f"{row['id']:28s} {gpus:>14s}  {r['verdict']:7s}  {r['peak_gib']:6.1f} / "
            f"{r['capacity_gib']:5.1f}      {r['step_s']:7.2f}  {r['tokens_per_s_per_gpu']:9.0f}"
            f"  {r['mfu']:.3f}  {r['layout']}" + (f"  [{extra}]" if extra else "")
        )
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(rows())})")


if __name__ == "__main__":
    main()
