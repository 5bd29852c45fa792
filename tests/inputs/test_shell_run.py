"""Launch scripts read as bash runs them (planner.inputs.shell_run, megatron_line.tokens).

Oracle: bash itself. Each script runs under bash with `torchrun` a function that writes its
arguments, one per line, to a file (exported, so that `bash -c` strings see it too); the words
planner reads from the script must be those arguments. The scripts are the shapes Megatron-LM's
examples and its users' launch scripts are written in (arrays over many lines with quoted
elements, multi-line strings, `${VAR:-default}`, conditions, `case`, functions, `echo` lines,
here-documents), each small enough to run here. Then what bash cannot say (an unset variable)
against the reader's message."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from planner.inputs import megatron_args, shell_run
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import launch, local_files, script, tokens

BASH = shutil.which("bash")

TAIL = "--hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128"

SCRIPTS = {
    "array over lines": f"""
GPT_MODEL_ARGS=(
    --num-layers 2   # a comment
    {TAIL}
)
torchrun pretrain_gpt.py ${{GPT_MODEL_ARGS[@]}} --micro-batch-size 1
""",
    "quoted array elements split when unquoted": """
A=(
  "--fp8-format hybrid"
  "--fp8-amax-history-len 1024"
)
B=("--recompute-granularity full" --use-mcore-models)
torchrun pretrain_gpt.py --num-layers 2 ${A[@]} ${B[@]}
""",
    "quoted array expansion keeps elements": """
A=(--num-layers 2 --hidden-size 256)
A+=(--bf16)
torchrun pretrain_gpt.py "${A[@]}" --wandb-exp-name "${A[*]}" "x ${A[@]} y" p"${A[@]}"q
""",
    "multi-line strings": """
OPTIONS="
    --num-layers 2
    --hidden-size 256
"
MODEL_ARGS=" \\
    --seq-length 128 \\
    --max-position-embeddings 128 \\
"
torchrun pretrain_gpt.py ${OPTIONS} ${MODEL_ARGS} --micro-batch-size 1
""",
    "defaults, nesting, arithmetic, comments": """
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
L=${L:-2} # layers
X=256; H=$X
NODES=2
GPUS=$((NODES * 8))
CKPT=${1:-"ckpt_run"}
TP=${TP:=2}
torchrun pretrain_gpt.py --num-layers $L --hidden-size $H --world $GPUS --save $CKPT --tp $TP
""",
    "quotes glued to variables": """
mbs=8
EXP_NAME='run_mbs_'$mbs''
torchrun pretrain_gpt.py --micro-batch-size $mbs --wandb-exp-name $EXP_NAME"_x"
""",
    "conditions on known values": """
L=2
DTYPE="fp8"
EXTRA=()
if [ "$BIG" = 1 ]; then
  L=4
elif [[ "$DTYPE" == "fp8" ]]; then
  EXTRA+=("--fp8-format hybrid")
else
  EXTRA+=(--bf16)
fi
[ -z "$UNSET_THING" ] && L=$((L + 1))
[ -n "$UNSET_THING" ] || EXTRA+=(--use-mcore-models)
case $DTYPE in
  bf16) EXTRA+=(--bf16) ;;
  fp8|mxfp8) EXTRA+=(--fp8-recipe delayed) ;;
  *) EXTRA+=(--fp16) ;;
esac
torchrun pretrain_gpt.py --num-layers $L ${EXTRA[@]}
""",
    "echo, case patterns and argument loops": """
while [[ $# -gt 0 ]]; do
  case $1 in
    --tensor-model-parallel-size) TP=$2; shift 2;;
    *) shift;;
  esac
done
echo "starting --tensor-model-parallel-size 4"
printf '%s\\n' --pipeline-model-parallel-size 8
torchrun pretrain_gpt.py --num-layers 2 --tensor-model-parallel-size ${TP:-1}
echo done --tensor-model-parallel-size 4
""",
    "functions and bash -c": """
launch() {
  local layers=$1
  torchrun pretrain_gpt.py --num-layers $layers "${@:2}"
}
ARGS="--hidden-size 256"
launch 2 --bf16 --seq-length 128
bash -c "torchrun pretrain_gpt.py --num-layers 3 $ARGS"
""",
    "case changes and powers": """
SIZE=${SIZE:-8B}
case "${SIZE,,}" in
  8b) TP=2 ;;
  *) TP=1 ;;
esac
SEQ=$(( 2 ** 12 ))
torchrun pretrain_gpt.py --num-layers 2 --tp $TP --seq-length $SEQ --name ${SIZE^^}-${SIZE,}
""",
    "a name set only on a path not taken is empty": """
AC=none
if [ $AC = full ]; then
  recompute="--recompute-granularity full --recompute-method uniform"
elif [ $AC = sel ]; then
  recompute="--recompute-activations"
fi
torchrun pretrain_gpt.py --num-layers 2 ${recompute} --bf16 "${recompute}" x${recompute}y
""",
    "a loop that builds the arguments": """
ARGS=""
for kv in tensor-model-parallel-size=2 micro-batch-size=2 seq-length=128; do
  ARGS="$ARGS --${kv%%=*} ${kv#*=}"
done
torchrun pretrain_gpt.py --num-layers 2 $ARGS
""",
    "here-documents and redirections": """
cat > config.yaml <<EOF
--num-layers 99
EOF
torchrun pretrain_gpt.py --num-layers 2 2>&1 | tee log.txt
""",
}


def bash_words(text: str, tmp_path: Path) -> list[str]:
    """The words `torchrun` gets when bash runs the script (the script's working directory a
    scratch one)."""
    out = tmp_path / "words.txt"
    stub = 'torchrun() { printf "%s\\n" "$@" >> "$OUT"; }\nexport -f torchrun\n'
    env = {"PATH": os.environ.get("PATH", ""), "OUT": str(out)}
    assert BASH is not None
    subprocess.run(
        [BASH, "-c", stub + text], cwd=tmp_path, env=env, check=True, capture_output=True
    )
    return out.read_text().splitlines() if out.exists() else []


@pytest.mark.skipif(BASH is None, reason="needs bash, the oracle")
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_words_are_what_bash_passes(name: str, tmp_path: Path) -> None:
    text = SCRIPTS[name]
    expected = bash_words(text, tmp_path)
    assert expected  # the oracle ran the commands
    assert tokens(text) == expected


def test_environment_is_what_the_script_exports() -> None:
    _, env = script(SCRIPTS["defaults, nesting, arithmetic, comments"])
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["GPUS"] == "16"  # 2 x 8


def test_a_file_of_settings_gives_the_flags_it_holds() -> None:
    """A model configuration that only sets variables (Megatron-LM's post-training conf files:
    MODEL_ARGS="--num-layers 32 ...", sourced by a launch script) reads as those flags."""
    text = (
        "if [ -z ${HF} ]; then HF=meta/x; fi\n"
        f'MODEL_ARGS=" \\\n    --num-layers 2 \\\n    {TAIL} \\\n"\n'
    )
    assert tokens(text) == ["--num-layers", "2", *TAIL.split()]


def test_a_value_the_script_does_not_set_is_named() -> None:
    """bash would pass an empty word; the reader says which flag holds what it cannot know."""
    text = f"torchrun pretrain_gpt.py --num-layers ${{NUM_LAYERS}} {TAIL} --micro-batch-size 1"
    with pytest.raises(InputError, match=r"--num-layers: '\$\{NUM_LAYERS\}' is a shell variable"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", 1000)


def test_launcher_options_are_not_the_scripts() -> None:
    """A profiler's option before the script (nsys's --cuda-graph-trace, one letter from a
    Megatron-LM flag) is not read as the script's."""
    text = (
        "nsys profile --cuda-graph-trace=node -o prof python pretrain_gpt.py --num-layers 2 "
        f"{TAIL} --micro-batch-size 1 --global-batch-size 8 --bf16"
    )
    doc = megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", 1000).doc
    assert doc["model"]["num_layers"] == 2


def test_any_text_reads_or_says_why() -> None:
    """Bad input never a traceback: 3,000 random texts over the shell's special characters and
    keywords (seeded) each read to words or raise InputError, none hangs (the suite's time)."""
    rng = random.Random(22)
    pieces = [*"ab$ {}()[]\"'\\`|&;<>#=\n\t-*?!@:+%/09", "${", "$(", "((", "))", "<<", "EOF"]
    pieces += ["if ", "then ", "fi", "case ", "esac", " in ", ";;", "do ", "done", "for "]
    pieces += ["while ", "function ", "() {", "}", "--num-layers ", "A=(", ")", "2>&1", "[[ "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        with contextlib.suppress(InputError):
            script(text)


def test_a_value_that_keeps_doubling_is_not_known() -> None:
    """`a=${a}${a}` with `a` holding an unset variable's `${b}` text (the reader names what the
    file does not set) doubles it with each line: 60 lines would be 4 x 2^60 characters (a
    fuzzer's 30 took 25 s and gigabytes). Past MAX_VALUE_CHARS the value is not known, its own
    `${a}` again, and the read stays small; a long value under the limit is kept whole."""
    _, env = script("a=${b}\n" + "a=${a}${a}\n" * 60)  # b: never set, its text kept
    assert len(env["a"]) <= 2 * shell_run.MAX_VALUE_CHARS
    assert env["a"].startswith("${a}")
    long = "x" * (shell_run.MAX_VALUE_CHARS - 1)
    _, env = script(f"b={long}\nc=${{b}}y\nd=${{c}}z\n")
    assert env["c"] == long + "y" and env["d"] == "${d}"  # d: 2 past the limit


@pytest.mark.parametrize("text", ["(" * 5000 + "x", "${X:-" * 3000 + "}" * 3000])
def test_pathological_nesting_says_why(text: str) -> None:
    """Nesting beyond Python's recursion limit is bad input (exit 2), not a traceback. (The
    `${` nesting closed: left open it is bash's syntax error, tests/inputs/test_shell_stops.py.)"""
    with pytest.raises(InputError, match="nests too deeply to read"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh")


@pytest.mark.skipif(BASH is None, reason="needs bash, the oracle")
def test_sourced_files_are_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that sources its model's configuration next to it (by `$0`'s directory, as
    Megatron-LM's post-training scripts do, and by a relative path): the words bash's
    torchrun gets, the script run as a file from its own directory."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "model.sh").write_text(
        f"MODEL_ARGS=(\n  --num-layers 2\n  {TAIL}\n)\nL=${{1:-7}}\n"
    )
    (tmp_path / "common.sh").write_text('EXTRA="--bf16 --micro-batch-size 1"\n')
    text = (
        'SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"\n'
        'source "${SCRIPT_DIR}/conf/model.sh" 5\n'
        ". ./common.sh\n"
        'torchrun pretrain_gpt.py "${MODEL_ARGS[@]}" $EXTRA --layers-given $L\n'
    )
    stub = 'torchrun() { printf "%s\\n" "$@" >> "$OUT"; }\n'
    (tmp_path / "train.sh").write_text(stub + text)
    out = tmp_path / "words.txt"
    assert BASH is not None
    env = {"PATH": os.environ.get("PATH", ""), "OUT": str(out)}
    subprocess.run([BASH, "train.sh"], cwd=tmp_path, env=env, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    words = launch(text, "train.sh", local_files).words
    assert words == out.read_text().splitlines()
    assert script(text)[0] != words  # without a file reader nothing is sourced


def test_a_sweep_loop_is_read_as_its_first_run() -> None:
    """A loop that launches a run per item (a sweep: bash launches both) is read as its first
    run; what its passes assign still accumulates (the loop above, against bash)."""
    text = "for lr in 1e-4 3e-4; do\n  torchrun pretrain_gpt.py --num-layers 2 --lr $lr\ndone\n"
    assert tokens(text) == ["pretrain_gpt.py", "--num-layers", "2", "--lr", "1e-4"]
    _, env = script("N=0\nfor i in 1 2 3; do N=$((N + i)); done\n")
    assert env["N"] == "6"  # 0 + 1 + 2 + 3


def test_a_power_past_64_bit_integers_is_not_known() -> None:
    """bash wraps 2 ** 64 to 0 in its 64-bit integers; planner keeps the text (not known)."""
    _, env = script("A=$(( 2 ** 62 ))\nB=$(( 2 ** 64 ))\nC=$(( (10 ** 9) ** 9 ))\n")
    assert env["A"] == str(2**62)
    assert env["B"] == "$(( 2 ** 64 ))" and env["C"].startswith("$((")


def test_flags_a_command_would_print_are_not_known() -> None:
    """`$(parallel_args 2)` and `$(cat args.txt)` hold flags bash would pass: after a flag
    that takes no value the reader could drop them unnoticed (it read tp 1 where the script
    runs tp 2); they are named instead. (A variable the file does not set there, `$ARGS`, is
    read as no words with a note: test_megatron_arity_switch.py.)"""
    for words in ("$(parallel_args 2)", "$(cat args.txt)", "`cat args.txt`"):
        text = f"torchrun pretrain_gpt.py --num-layers 2 {TAIL} --use-distributed-optimizer {words}"
        with pytest.raises(InputError, match=r"--use-distributed-optimizer: .* follows it"):
            megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", 1000)


def test_nested_loops_stay_bounded() -> None:
    """Three nested loops of 1,024 items would run their body 2^30 times; past
    MAX_LOOP_PASSES passes a loop runs its first item only (the read stays well under a
    second: the suite's time)."""
    items = " ".join(["x"] * 1024)
    text = f"for a in {items}; do for b in {items}; do for c in {items}; do N=$a; done; done; done"
    _, env = script(text)
    assert env["N"] == "x"
    assert shell_run.MAX_LOOP_PASSES < 1024**2


def test_an_arithmetic_past_the_parser_is_not_known() -> None:
    """10,000 unary minus signs made Python's parser raise MemoryError (an internal error, a
    fuzzer's): past MAX_ARITH_CHARS an expression is not known, and named where it is used."""
    expr = "$((" + "-" * 10_000 + "2))"
    _, env = script(f"TP={expr}\n")
    assert env["TP"] == expr
    text = f"torchrun pretrain_gpt.py --num-layers 2 {TAIL} --tensor-model-parallel-size $TP"
    with pytest.raises(InputError, match="--tensor-model-parallel-size"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", 1000)
