"""`exit`, `return`, `exec`, `unset` and FUNCNEST in launch scripts (planner.inputs.shell_exit,
shell_vars.unset): planner reads the launches bash makes, and where bash launches nothing it
says so (exit 2), naming the file and the line.

Oracle: bash itself (GNU bash 5.2.15 here), run by `test_shell_stops.bash_runs`: the script as a
file with a `torchrun` stub on PATH that records its arguments, in a process group of its own
killed whole after 3 s. Every launch bash makes (from pretrain_gpt.py on) must be one planner
reads, in order. Where bash launches nothing, the line is bash's where it names one on stderr
("line 3: X: parameter not set"), else (an `exit`) the `exit`'s, by hand in the case."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import run
from test_shell_stops import LINE, bash_runs, needs_bash

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import launch, local_files

L1 = f"{LINE} --seed 1"
L2 = f"{LINE} --seed 2"
END = f"exit\n{L2}\n"
"""What each case whose own subject the old reader got right ends with (see CASES)."""
DOWN = "f() { if [ $1 -gt 0 ]; then f $(($1 - 1)); fi; }"
"""A recursion that ends: `f N` nests N + 1 calls."""

# name: (script, the line planner names where bash launches nothing: None where it launches).
# A case whose own subject the old reader got right ends `exit` and a second launch, which it
# read, so that each fails on the reader without `exit`.
CASES: dict[str, tuple[str, int | None]] = {
    # exit
    "exit between two launches": (f"{L1}\nexit 0\n{L2}\n", None),
    "exit before any launch": (f"echo a\nexit 1\n{L1}\n", 2),
    "a guard on a name the file sets empty": (f'X=\n[ -z "$X" ] && exit 1\n{L1}\n', 2),
    "a guard in an if on a name the file sets empty": (
        f'X=\nif [ -z "$X" ]; then\n  echo need X\n  exit 1\nfi\n{L1}\n',
        4,
    ),
    "a guard on a command's status goes on": (f"mkdir -p out || exit 1\n{L1}\n{END}", None),
    "a file test's exit takes the else": (
        f"if [ -f /no/such ]; then\n  exit 1\nelse\n  {L1}\nfi\n",
        None,
    ),
    "every branch exits": (f"if [ -f /no/such ]; then exit 1; else exit 2; fi\n{L1}\n", 1),
    "a case whose every item exits": (f'case "$MODE" in\n  *) exit 1 ;;\nesac\n{L1}\n', 2),
    "exit in a function": (f"f() {{\n  exit 0\n}}\n{L1}\nf\n{L2}\n", None),
    "exit in a subshell ends it alone": (f"( exit 1; {L2} )\n{L1}\n{END}", None),
    "a subshell's exit status": (f"( exit 3 ) && {L2}\n( exit 0 ) && {L1}\n{END}", None),
    "exit without a number: the last status": (
        f"( false; exit ) || {L1}\n( true; exit ) || {L2}\n{END}",
        None,
    ),
    "exit in a pipeline's part": (f"exit 1 | cat\n{L1}\n{END}", None),
    "exit in a command substitution": (f"X=$(exit 1)\n{L1}\n{END}", None),
    "exit in bash -c": (f"bash -c 'exit 1'\n{L1}\n{END}", None),
    "a guard that runs a command without flags first": (
        f'if grep -q x /dev/null; then\n  python -c "import sys"\n  exit 1\nfi\n{L1}\nexit\n{L2}\n',
        None,
    ),
    "an argument loop's exit on an unknown argument": (
        "while [ $# -gt 0 ]; do\n  case $1 in\n    --tp) TP=$2; shift 2 ;;\n"
        f"    *) echo bad; exit 1 ;;\n  esac\ndone\n{L1} --tp ${{TP:-1}}\n{END}",
        None,
    ),
    "exit in a loop": (f"for i in 1 2; do\n  exit 0\ndone\n{L1}\n", 2),
    "a read loop's exit is a guess": (
        f"while read -r l; do exit 1; done </dev/null\n{L1}\n{END}",
        None,
    ),
    # exec
    "exec replaces the shell": (f"exec {L1}\n{L2}\n", None),
    "exec with redirections alone goes on": (f"exec >out.log 2>&1\n{L1}\n{END}", None),
    "exec into a process substitution goes on": (f"exec > >(cat) 2>&1\n{L1}\n{END}", None),
    # return
    "return at the top level goes on": (f"return 3\n{L1}\n{END}", None),
    "return ends a function": (f"f() {{\n  return 0\n  {L2}\n}}\nf\n{L1}\n", None),
    "a function's return status": (f"f() {{ return 1; }}\nf || {L1}\nf && {L2}\n", None),
    "return in a subshell in a function": (
        f"f() {{ ( return 1 ) || {L1}; }}\nf\n{END}",
        None,
    ),
    # unset
    "unset, then ${X?}": (f"X=1\nunset X\n: ${{X?}}\n{L1}\n", 3),
    "unset, then defaults, then ${X:?}": (
        f"X=1\nunset X\n{L1} --save ${{X:-d}}${{X-e}}${{X:+f}}\n: ${{X:?}}\n{L2}\n",
        None,
    ),
    "unset -v, then ${X?}": (f"X=1\nunset -v X\n: ${{X?need X}}\n{L1}\n", 3),
    "unset a name that is only a function": (f"f() {{ {L2}; }}\nunset f\nf\n{L1}\n", None),
    "unset -f": (f"f() {{ {L2}; }}\nunset -f f\nf\n{L1}\n{END}", None),
    "unset -v leaves the function": (f"f=1\nf() {{ {L1}; }}\nunset -v f\nf\n{END}", None),
    "unset -f leaves the variable": (
        f"X=a\nX() {{ :; }}\nunset -f X\n: ${{X:?}}\n{L1}\n{END}",
        None,
    ),
    "unset then set again": (f"X=1\nunset X\nX=2\n: ${{X?}}\n{L1}\n{END}", None),
    # FUNCNEST
    "FUNCNEST discards the command": (f"FUNCNEST=3\nf() {{ f; }}\nf\n{L1}\n", None),
    "FUNCNEST discards the rest of its line": (f"FUNCNEST=3\nf() {{ f; }}\nf; {L2}\n{L1}\n", None),
    "FUNCNEST discards a whole compound command": (
        f"FUNCNEST=2\nf() {{ f; }}\nif true; then\n  f\n  {L2}\nfi; {L2}\n{L1}\n",
        None,
    ),
    "FUNCNEST calls deep is one too many": (
        f"FUNCNEST=5\n{DOWN}\nf 5 && {L2}\nf 4 && {L1}\n",
        None,
    ),
    "FUNCNEST in a subshell ends it": (
        f"FUNCNEST=2\nf() {{ f; }}\n( f; {L2} )\n{L1}\n{END}",
        None,
    ),
    "FUNCNEST in a nested call discards the caller's line": (
        f"FUNCNEST=2\nf() {{ f; }}\ng() {{\n  f\n  {L2}\n}}\ng; {L2}\n{L1}\n",
        None,
    ),
}


@needs_bash
@pytest.mark.parametrize("name", list(CASES))
def test_what_bash_launches(name: str, tmp_path: Path) -> None:
    text, line = CASES[name]
    launches, err = bash_runs(text, tmp_path)
    assert (line is None) == bool(launches), err  # the case's line agrees with bash
    if launches:
        read = launch(text, "train.sh")
        assert [list(s) for s in read.scripts] == launches
        return
    said = re.search(r"train\.sh: line (\d+): ", err)  # bash names no line for `exit`
    if said is not None:
        assert int(said.group(1)) == line
    with pytest.raises(InputError, match=rf"^train\.sh: line {line}: .*nothing with flags"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh")


@needs_bash
@pytest.mark.parametrize(
    ("guard", "env", "args"),
    [
        ('[ -z "$DATA" ] && exit 1', {"DATA": "d"}, ()),
        ('[ -n "$DATA" ] || { echo set DATA; exit 1; }', {"DATA": "d"}, ()),
        ('if [ -z "${DATA:-}" ]; then\n  echo usage\n  exit 1\nfi', {"DATA": "d"}, ()),
        ('[ -d "$WORK" ] || exit', {"WORK": "/"}, ()),
        ('if [ -n "$DATA" ]; then\n  echo ok\nelse\n  exit 1\nfi', {"DATA": "d"}, ()),
        ('SRC=${SRC:-}\nS=$SRC\nif [[ -z "${S}" ]]; then exit 1; fi', {"SRC": "s"}, ()),
        ('[ -z "$1" ] && exit 2', {}, ("x",)),
        ('case "$1" in\n  train) ;;\n  *) echo usage; exit 1 ;;\nesac', {}, ("train",)),
    ],
)
def test_a_guard_on_what_the_file_does_not_set_lets_the_launch_through(
    guard: str, env: dict[str, str], args: tuple[str, ...], tmp_path: Path
) -> None:
    """A guard that exits on what the environment or the arguments give (bash exits without
    them, launches with them): planner does not know them, and reads the launch bash makes when
    they are given, rather than refuse the file (the old reader read `exit` as nothing, and
    the second launch after it)."""
    text = f"{guard}\n{L1}\nexit\n{L2}\n"
    assert bash_runs(text, tmp_path)[0] == []
    launches, _ = bash_runs(text, tmp_path, env, args)
    assert [list(s) for s in launch(text, "train.sh").scripts] == launches == [L1.split()[3:]]


@needs_bash
def test_unset_of_a_name_the_environment_gives(tmp_path: Path) -> None:
    """After `unset X` X is unset whatever the environment held: `$X` is empty, not the
    unknown `$X` (bash run with X set)."""
    text = f"unset X\n{L1} --save x$X\n"
    launches, _ = bash_runs(text, tmp_path, {"X": "1"})
    assert [list(s) for s in launch(text, "train.sh").scripts] == launches


@needs_bash
def test_a_funcnest_deeper_than_planner_follows_is_refused(tmp_path: Path) -> None:
    """FUNCNEST=100 and a recursion 20 calls deep: bash launches; planner follows 16 calls
    (shell_run.MAX_CALL_DEPTH) and refuses, naming the file's FUNCNEST, rather than guess."""
    text = f"FUNCNEST=100\n{DOWN}\nf 19\n{L1}\n"
    assert bash_runs(text, tmp_path)[0] == [L1.split()[3:]]
    with pytest.raises(InputError, match=r"line 2: .*FUNCNEST=100 calls deep"):  # the call in f
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh")


@needs_bash
def test_exit_and_return_in_a_sourced_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`return` ends the sourced file alone; `exit` in it ends the script, named by the sourced
    file's line; FUNCNEST discards the rest of the sourced file's line, which goes on."""
    monkeypatch.chdir(tmp_path)
    text = f"source ./conf.sh\n{L1}\nexit\n{L2}\n"
    for conf in (
        f"return 0\n{L2}\n",
        f"FUNCNEST=2\nf() {{ f; }}\nf; {L2}\nL=1\n",
        f'X=\n[ -z "$X" ] && return\n{L2}\n',
    ):
        (tmp_path / "conf.sh").write_text(conf)
        launches, _ = bash_runs(text, tmp_path)
        assert [list(s) for s in launch(text, "train.sh", local_files).scripts] == launches
    (tmp_path / "conf.sh").write_text("echo a\nexit 1\n")
    assert bash_runs(text, tmp_path)[0] == []
    with pytest.raises(InputError, match=r"train\.sh: line 2 of \./conf\.sh: `exit 1`"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "train.sh", files=local_files)


def test_an_exit_that_ends_the_read_is_noted_where_it_left_something_out() -> None:
    """After a launch: an `exit` on the file's last line is no news; one before more commands
    is noted with the launch read."""
    last = megatron_args.read(f"{L1}\nexit 0\n", "h100-sxm-80gb", 8, "train.sh")
    assert not any("exit" in n for n in last.notes)
    early = megatron_args.read(f"{L1}\nexit 0\n{L2}\n", "h100-sxm-80gb", 8, "train.sh")
    assert any(n.startswith("line 2: `exit 0`: bash exits here") for n in early.notes)


def test_check_exits_2_naming_the_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.sh"
    path.write_text(CASES["a guard on a name the file sets empty"][0])
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"], capsys)
    assert code == 2
    assert f"{path}: line 2: `exit 1`: bash exits here" in err


def test_funcnest_limits() -> None:
    """FUNCNEST's limit: a positive integer; 0, a negative number or a word set none (bash ran
    `FUNCNEST=0`, `-1`, `abc` each with a recursion 41 calls deep to its end, and stopped it
    at `FUNCNEST=40`); a value planner does not know is not a limit it can apply."""
    from planner.inputs import shell_exit

    assert [shell_exit.funcnest(v) for v in ("40", " 3 ", "0", "-1", "abc", "$N", None)] == [
        40,
        3,
        None,
        None,
        None,
        None,
        None,
    ]
