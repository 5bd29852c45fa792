"""A bash script that runs Megatron-LM `pretrain_gpt.py` (a hybrid Mamba stack:
`pretrain_hybrid.py`) for a plan under torchrun.

Arguments sit in bash arrays by concern (distributed, model, parallel, training, data,
checkpoint) and reach torchrun as `"${ARRAY[@]}"`, so every word arrives intact. Every value from
the plan or the user (the job name above all) is written with `shlex.quote`; the only unquoted
text is the script's own. The user sets data, tokenizer and checkpoint paths in one marked block
(each a variable with a default that can also come from the environment). torchrun uses the c10d
rendezvous on the first node (`--rdzv-endpoint MASTER_ADDR:29400`, ecosystem.md 2.1); run the
same script on every node. `planner.emit.slurm` reuses these blocks.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from planner.emit.common import (
    RDZV_PORT,
    SCHEDULE,
    Nodes,
    comment_block,
    environment,
    file_word,
    nodes,
)
from planner.emit.megatron import Arg, arguments
from planner.emit.megatron_model import training_script
from planner.emit.pools import node_rank, pool_nodes, rank_lines
from planner.emit.prediction import HEADROOM, header, predict
from planner.inputs.plan import Plan


def master_addr_lines(nnodes: int) -> list[str]:
    """The settings lines of a script whose nodes rendezvous on the first one: localhost on one
    node; on several, required (a node left at localhost would wait for its own rendezvous until
    it timed out)."""
    if nnodes > 1:
        return [
            "# the first node's address, the same on every node (required)",
            'MASTER_ADDR="${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}"',
        ]
    return ["# one node: the rendezvous is local", 'MASTER_ADDR="${MASTER_ADDR:-localhost}"']


def q(word: str) -> str:
    """shlex.quote, also quoting a word with a comma (shellcheck SC2054 in arrays)."""
    quoted = shlex.quote(word)
    return f"'{word}'" if quoted == word and "," in word else quoted


TRAINING_EXTRA: tuple[tuple[str, ...], ...] = tuple(
    (flag, f'"${var}"' if var else q(value)) for flag, var, value in SCHEDULE
)
"""planner.emit.SCHEDULE as shell words: a variable of `settings_block` where one is named."""

CHECKPOINT_WORDS = (
    ("--save", '"$CHECKPOINT_DIR"'),
    ("--load", '"$CHECKPOINT_DIR"'),
    ("--save-interval", '"$SAVE_INTERVAL"'),
)


def user_settings(job_name: str, master_addr: bool, body: Sequence[str], nnodes: int = 1) -> str:
    """JOB_NAME, then the marked block of variables a user sets (`body`, each of which may also
    come from the environment), MASTER_ADDR last where the `nnodes` nodes rendezvous on the
    first."""
    lines = [f"JOB_NAME={q(job_name)}"]
    if "$" in job_name or "`" in job_name:  # quoted, so shellcheck's SC2016 is what we want
        lines.insert(0, "# shellcheck disable=SC2016 # the job name is literal text")
    lines += ["", "# ---- set these (or export them before running) " + "-" * 30, *body]
    if master_addr:
        lines += master_addr_lines(nnodes)
    lines.append("# " + "-" * 77)
    return "\n".join(lines) + "\n"


def settings_block(job_name: str, master_addr: bool, save_interval: int, nnodes: int = 1) -> str:
    """The variables a user sets for Megatron-LM. The checkpoint interval defaults to Daly's
    optimum for the plan (planner.ops.resilience)."""
    body = [
        "# a Megatron-LM checkout (the directory holding pretrain_gpt.py)",
        'MEGATRON_DIR="${MEGATRON_DIR:-/opt/megatron-lm}"',
        "# Megatron indexed dataset prefix (the .bin/.idx pair without extension), or MOCK",
        'DATA_PATH="${DATA_PATH:-MOCK}"',
        "# Hugging Face tokenizer name or directory (unused with DATA_PATH=MOCK)",
        'TOKENIZER_MODEL="${TOKENIZER_MODEL:-}"',
        "# where checkpoints are saved and resumed from (shared by every node)",
        'CHECKPOINT_DIR="${CHECKPOINT_DIR:-checkpoints/$JOB_NAME}"',
        "# steps between checkpoints: Daly's optimum for this plan (see the header)",
        f'SAVE_INTERVAL="${{SAVE_INTERVAL:-{save_interval}}}"',
        *(f'{var}="${{{var}:-{value}}}"' for _, var, value in SCHEDULE if var),
    ]
    return user_settings(job_name, master_addr, body, nnodes)


def env_block(plan: Plan) -> str:
    out = "# environment Megatron-LM needs for this layout and hardware\n"
    for e in environment(plan):
        if e.value is None:
            out += f"unset {e.name}  # {e.why}\n"
        else:
            out += f"export {e.name}={q(e.value)}  # {e.why}\n"
    return out


def array(name: str, words: Sequence[tuple[str, ...]]) -> str:
    """A bash array, one flag and its (already shell-quoted) values per line."""
    body = "".join(f"    {' '.join(arg)}\n" for arg in words)
    return f"{name}=(\n{body})\n"


def quoted(args: tuple[Arg, ...]) -> list[tuple[str, ...]]:
    return [tuple(q(w) for w in arg) for arg in args]


def data_block() -> str:
    return (
        'if [[ "$DATA_PATH" == MOCK ]]; then\n'
        "    DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer)\n"
        "else\n"
        '    : "${TOKENIZER_MODEL:?set TOKENIZER_MODEL for a real dataset}"\n'
        "    DATA_ARGS=(--data-path \"$DATA_PATH\" --split '99,1,0'\n"
        '        --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER_MODEL")\n'
        "fi\n"
    )


def megatron_arrays(plan: Plan) -> str:
    """MODEL_ARGS, PARALLEL_ARGS, TRAINING_ARGS (the plan's, then optimizer and schedule),
    DATA_ARGS and CHECKPOINT_ARGS."""
    args = arguments(plan)
    out = ""
    for note in args.notes:
        out += f"# note: {note}\n"
    out += array("MODEL_ARGS", quoted(args.model))
    out += array("PARALLEL_ARGS", quoted(args.parallel))
    out += array("TRAINING_ARGS", quoted(args.training) + list(TRAINING_EXTRA))
    out += data_block()
    out += array("CHECKPOINT_ARGS", list(CHECKPOINT_WORDS))
    return out


def megatron_words(plan: Plan) -> str:
    """Megatron-LM's entry point for the plan's model (`training_script`) and the arrays."""
    return (
        f'"$MEGATRON_DIR/{training_script(plan)}" \\\n'
        '    "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \\\n'
        '    "${DATA_ARGS[@]}" "${CHECKPOINT_ARGS[@]}"'
    )


def rdzv_words(n: Nodes, rdzv_id: str) -> list[tuple[str, ...]]:
    """torchrun's node counts and its c10d rendezvous on "$MASTER_ADDR", with the shell word
    `rdzv_id` as its id, joined to its flag (torchrun's argparse would take an id starting with
    "-", a job name's, for the next option and exit)."""
    return [
        ("--nnodes", q(str(n.nnodes))),
        ("--nproc-per-node", q(str(n.nproc_per_node))),
        ("--rdzv-backend", "c10d"),
        ("--rdzv-endpoint", f'"$MASTER_ADDR:{RDZV_PORT}"'),
        (f"--rdzv-id={rdzv_id}",),
    ]


def torchrun_body(plan: Plan, n: Nodes, rdzv_id: str) -> str:
    """The environment, then every array torchrun gets: DISTRIBUTED_ARGS (c10d rendezvous on
    "$MASTER_ADDR", with the shell word `rdzv_id` as its id) and the Megatron-LM arrays."""
    return (
        env_block(plan)
        + "\n"
        + array("DISTRIBUTED_ARGS", rdzv_words(n, rdzv_id))
        + megatron_arrays(plan)
        + "\n"
    )


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The whole torchrun script (with pools: the first pool's, `planner.emit.pools`; launch
    --out writes every pool's)."""
    if plan.job.pools:
        return render_pool(plan, job_name, 0, headroom_pct=headroom_pct)
    n = nodes(plan)
    p = predict(plan, headroom_pct)
    how = "run this same script on each node" if n.nnodes > 1 else "run it on the node"
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "torchrun", job_name, p),
                f"{n.nnodes} node(s) x {n.nproc_per_node} GPUs: {how}",
            ]
        )
        + "set -euo pipefail\n\n"
        + settings_block(job_name, True, p.checkpoint_interval_steps, n.nnodes)
        + "\n"
        + torchrun_body(plan, n, '"$JOB_NAME"')
        + f'exec torchrun "${{DISTRIBUTED_ARGS[@]}}" {megatron_words(plan)}\n'
    )


# --- heterogeneous pools (planner.emit.pools) ---

POOL_MASTER_PORT = 29400
"""torchrun's static rendezvous port on the first node of the first pool."""


def pool_distributed(nnodes: int, per: int, node_rank: str | None) -> str:
    words = [("--nnodes", q(str(nnodes))), ("--nproc-per-node", q(str(per)))]
    if node_rank is not None:
        words.append(("--node-rank", node_rank))
    words += [("--master-addr", '"$MASTER_ADDR"'), ("--master-port", q(str(POOL_MASTER_PORT)))]
    return array("DISTRIBUTED_ARGS", words)


def render_pool(plan: Plan, job_name: str, k: int, *, headroom_pct: float = HEADROOM) -> str:
    """The torchrun script of pool k: run on each of its nodes with NODE_INDEX set."""
    p = predict(plan, headroom_pct)
    pools = pool_nodes(plan)
    pool, nodes, per, _ = pools[k]
    total = sum(n for _, n, _, _ in pools)
    index = f"${{NODE_INDEX:?set NODE_INDEX: 0 .. {nodes - 1}}}"
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "torchrun", job_name, p),
                *rank_lines(plan),
                f"this file: pool {pool!r}, {nodes} node(s): run it on each with NODE_INDEX = "
                f"0 .. {nodes - 1} and MASTER_ADDR = the first node of pool {pools[0][0]!r}",
            ]
        )
        + "set -euo pipefail\n\n"
        + settings_block(job_name, True, p.checkpoint_interval_steps, total)
        + f"NODE_RANK=$(( {node_rank(plan, k, index)} ))\n\n"
        + env_block(plan)
        + "\n"
        + pool_distributed(total, per, '"$NODE_RANK"')
        + megatron_arrays(plan)
        + f'\nexec torchrun "${{DISTRIBUTED_ARGS[@]}}" {megatron_words(plan)}\n'
    )


def pool_files(
    plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM
) -> list[tuple[str, str]]:
    """(file name, text) of every pool's torchrun script: train-<k>-<slug>.sh."""
    out = []
    for k, pool in enumerate(plan.job.pools):
        word = file_word(pool.name, 40) or "pool"
        out.append(
            (f"train-{k}-{word}.sh", render_pool(plan, job_name, k, headroom_pct=headroom_pct))
        )
    return out
