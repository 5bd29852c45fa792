"""Launch scripts that bash stops before their end (planner.inputs.shell_stop): a quote never
closed, `${X:?}` on a name the file sets empty, a loop or a recursion planner cannot see end.
Planner reads what bash launches before it stops; where bash launches nothing, it says so (exit
2), naming the file and the line.

Oracle: bash itself (GNU bash 5.2.15 here). Each script runs as a file under bash with
`torchrun` and `nemo` stubs on PATH that record their arguments; bash has a 256 KiB stack (a
function that calls itself dies of SIGSEGV within a tenth of a second, as it does with any
stack, 8 MiB taking seconds) and 3 s (a loop that does not end is stopped there). Where bash
launched, the words planner reads are its first launch's; where it did not, planner raises
InputError naming the line bash names on stderr ("train.sh: line 2: unexpected EOF while looking
for matching `''", "line 2: X: parameter null or not set"), or, where bash names none (a loop, a
segfault), the line of the loop or the call (by hand, in the case)."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import launch, local_files

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="needs bash, the oracle")

LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 "
    "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 1000"
)
NEMO = "nemo llm pretrain --factory llama3_8b trainer.num_nodes=1"

# name: (script, the line planner names where bash launches nothing: None where it launches)
CASES: dict[str, tuple[str, int | None]] = {
    # the QA repro (/tmp/qa2/repro/unterminated_quote.sh): the launch ran, then the error
    "quote after the launch": (f"{LINE}\necho 'unterminated\n", None),
    "quote before the launch": (f"echo 'unterminated\n{LINE}\n", 1),
    "quote later on the launch's own line": (f"{LINE}; echo 'x\necho y\n", 1),
    "quote in a continued launch": (f"echo a\n{LINE} \\\n  --name 'x\n", 3),
    "double quote": (f'echo ok\necho "x\n{LINE}\n', 2),
    "backquote": (f"echo `date\n{LINE}\n", 1),
    "dollar brace": (f"echo ${{X:-1\n{LINE}\n", 1),
    "single quote inside a quoted brace": (f'echo "${{X:-it\'s}}"\n{LINE}\n', 1),
    "array": (f"A=(--bf16\n{LINE}\n", 1),
    "quote inside a block after the launch": (f"{LINE}\nif true; then\n  echo 'x\nfi\n", None),
    "quote inside a block before the launch": (f"if true; then\n  echo 'x\nfi\n{LINE}\n", 2),
    "an unterminated quote in a NeMo line": (f"{NEMO} 'trainer.devices=8\n", 1),
    "an escaped quote in $'...' closes nothing": (f"echo $'it\\'s'\n{LINE}\n", None),
    "a tab-stripped here-document": (f"cat <<-EOF\n\tit's\n\tEOF\n{LINE}\n", None),
    "an eval string's syntax error ends it alone": (f'eval "echo \'x"\n{LINE}\n', None),
    # ${X:?} / ${X?}
    "required name empty": (f"X=\necho a; : ${{X:?need X}}\n{LINE}\n", 2),
    "required name after the launch": (f"X=\n{LINE}\n: ${{X:?need X}}\n", None),
    "required name set": (f"X=1\n: ${{X:?need X}}\n{LINE}\n", None),
    "unset-only form on an empty name": (f"X=\n: ${{X?need X}}\n{LINE}\n", None),
    "required name in a flag": (f"X=\n{LINE} --save ${{X:?}}\n", 2),
    "required name in a function": (f"X=\nf() {{\n  : ${{X:?}}\n}}\nf\n{LINE}\n", 3),
    "required name in a subshell": (f"X=\n( : ${{X:?}} )\n{LINE}\n", None),
    "required name in a pipeline": (f"X=\n: ${{X:?}} | cat\n{LINE}\n", None),
    "required name in bash -c": (f'X=\nbash -c ": \\${{X:?}}"\n{LINE}\n', None),
    # loops
    "endless loop before the launch": (f"while true; do :; done\n{LINE}\n", 1),
    "endless until before the launch": (f"echo a\nuntil false; do :; done\n{LINE}\n", 2),
    "endless loop in bash -c holds the script": (f"bash -c 'while :; do :; done'\n{LINE}\n", 1),
    "endless loop that launches": (f"while true; do\n  {LINE}\ndone\necho never\n", None),
    "a loop with a break": (f"while true; do\n  break\ndone\n{LINE}\n", None),
    "a loop that counts": (f"i=0\nwhile [ $i -lt 3 ]; do i=$((i + 1)); done\n{LINE} -x $i\n", None),
    "until true": (f"until true; do :; done\n{LINE}\n", None),
    "an argument loop in a function": (
        "parse() {\n  while [ $# -gt 0 ]; do\n    case $1 in\n      --tp) TP=$2; shift 2 ;;\n"
        f"      *) shift ;;\n    esac\n  done\n}}\nparse --tp 4 --bf16\n{LINE} --tp $TP\n",
        None,
    ),
    # recursion
    "a function that calls itself": (f"f() {{\n  f\n}}\nf\n{LINE}\n", 2),
    "a recursion in a subshell": (f"f() {{ f; }}\n( f )\n{LINE}\n", None),
    "a recursion that ends": (
        f"f() {{ if [ $1 -gt 0 ]; then f $(($1 - 1)); fi; }}\nf 5\n{LINE}\n",
        None,
    ),
}


def small_stack() -> None:
    resource.setrlimit(resource.RLIMIT_STACK, (256 << 10, 256 << 10))


def bash_runs(
    text: str, tmp_path: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> tuple[list, str]:
    """The launches (each command's arguments from its Python script or `llm` on) bash makes
    running the script as train.sh (with `args`), and its stderr."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    out = tmp_path / "launched.txt"
    out.unlink(missing_ok=True)
    for name in ("torchrun", "nemo"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\nprintf "%s\\n" {name} "$@" "@@" >> "{out}"\n')
        stub.chmod(0o755)
    (tmp_path / "train.sh").write_text(text)
    path = f"{bin_dir}:{os.environ.get('PATH', '')}"
    assert BASH is not None
    # its own process group, killed whole at the timeout: a loop in a `bash -c` it started
    # would otherwise outlive the test, spinning a CPU
    proc = subprocess.Popen(
        [BASH, "train.sh", *args],
        cwd=tmp_path,
        env={"PATH": path, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=small_stack,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=3)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        err = ""  # still running: a loop that does not end
    lines = out.read_text().splitlines() if out.exists() else []
    launches, cur = [], []
    for w in lines:
        if w == "@@":
            launches.append(cur[cur.index("pretrain_gpt.py") :] if cur[0] == "torchrun" else cur)
            cur = []
        else:
            cur.append(w)
    return launches, err


@needs_bash
@pytest.mark.parametrize("name", list(CASES))
def test_what_bash_launches_before_it_stops(name: str, tmp_path: Path) -> None:
    text, line = CASES[name]
    launches, err = bash_runs(text, tmp_path)
    assert (line is None) == bool(launches), err  # the case's line agrees with bash
    if launches:
        read = launch(text, "train.sh")
        first = launches[0]
        assert read.words == (first[1:] if first[0] == "nemo" else first)
        return
    said = re.search(r"train\.sh: line (\d+): ", err)  # bash names no line for a loop
    if said is not None and "`$('" not in err:  # `$(`: bash names the file's last line
        assert int(said.group(1)) == line
    with pytest.raises(InputError, match=rf"^train\.sh: line {line}: .*nothing with flags"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh")


def test_what_each_stop_says() -> None:
    """The message names what bash does there (bash's own words where it prints them)."""
    expected = {
        "quote before the launch": "unexpected EOF while looking for matching `''",
        "required name empty": "'X: need X' and exits",
        "required name in a flag": "'X: parameter null or not set'",
        "endless loop before the launch": "a `while` loop planner cannot see end",
        "a function that calls itself": "`f` is called 16 calls deep",
    }
    for name, words in expected.items():
        with pytest.raises(InputError) as info:
            megatron_args.read(CASES[name][0], "h100-sxm-80gb", 8, "train.sh")
        assert words in str(info.value), name


def test_a_launch_before_the_stop_is_read_with_a_note() -> None:
    text = CASES["quote after the launch"][0]
    reading = megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh")
    assert reading.doc["model"]["num_layers"] == 2
    assert any(n.startswith("line 2: the quote ' opened") for n in reading.notes)


@needs_bash
@pytest.mark.parametrize(
    "required",
    [
        ": ${FROM_ENV:?set FROM_ENV}",
        'FROM_ENV="${FROM_ENV:?set FROM_ENV}"',  # planner's own launch files' MASTER_ADDR
        "if false; then FROM_ENV=1; fi\n: ${FROM_ENV:?}",
    ],
)
def test_an_unset_name_the_environment_may_give_is_not_known(required: str, tmp_path: Path) -> None:
    """`${X:?}` on a name the file leaves unset: bash exits where the environment lacks it and
    goes on where it has it; planner does not know the environment, and reads on, as bash
    does with it set."""
    text = f"{required}\n{LINE}\n"
    assert bash_runs(text, tmp_path)[0] == []
    launches, _ = bash_runs(text, tmp_path, {"FROM_ENV": "1"})
    assert launch(text, "train.sh").words == launches[0]


@needs_bash
def test_a_sourced_files_syntax_error_ends_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bash: the sourced file's commands before the error run, `source` fails, the script
    goes on; a `${X:?}` in it exits the script, named by the sourced file's line."""
    (tmp_path / "conf.sh").write_text("L=2\necho 'x\nL=3\n")
    text = f"source ./conf.sh\n{LINE} --layers $L\n"
    launches, _ = bash_runs(text, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert launch(text, "train.sh", local_files).words == launches[0]
    (tmp_path / "conf.sh").write_text("X=\n: ${X:?}\n")
    assert bash_runs(text, tmp_path)[0] == []
    with pytest.raises(InputError, match=r"train\.sh: line 2 of \./conf\.sh: \$\{X:\?\}"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", files=local_files)


def test_check_exits_2_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "train.sh"
    path.write_text(CASES["quote before the launch"][0])
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"], capsys)
    assert code == 2
    assert f"{path}: line 1: the quote ' opened here is never closed" in err
