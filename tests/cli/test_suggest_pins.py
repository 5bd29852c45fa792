"""What `planner suggest` says of pins the job cannot take, and of a job file's layout it does
not read (a QA pass over the search flags found each answered 'nothing fits' for the wrong
reason, or silently).

Oracles: the README's contract (bad input exits 2 naming the flag and value; "--framework
torchtitan ... FSDP2 as ZeRO 3"), Megatron's divisibility rules as planner's own rules state them
(`rules.parallel.heads`: heads a multiple of tp; the experts split by ep), and the zoo's shapes
(Mixtral 8x7B: 8 experts; Llama 3.1 8B: 32 heads, 8 query groups)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES


def _err(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, _, err = run(["suggest", *argv], capsys)
    return code, " ".join(err.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # exit 1 before, 'nothing fits: ... tp beyond the scale-up domain, user bound on ep'
        (["--model", "mixtral-8x7b", "--num-gpus", "64", "--ep", "16"], "--ep 16: must divide"),
        (["--model", "mixtral-8x7b", "--num-gpus", "64", "--ep", "3"], "8 experts"),
        # 32 heads are no multiple of 3 (exit 1 before: 'heads_tp (10), user bound on tp (7)')
        (["--num-gpus", "24", "--tp", "3"], "--tp 3: num_attention_heads (32) must be"),
        # torchtitan runs FSDP2 only: exit 1 before, with a global batch change that never helps
        (["--framework", "torchtitan", "--zero", "1"], "--zero 1: torchtitan runs FSDP2"),
        (["--framework", "torchtitan", "--zero", "1,2"], "allow 3"),
        # the range as given, not '4-'
        (["--tp", "4-8", "--max-tp", "2"], "--tp 4-8 contradicts --max-tp 2"),
        # a pools job's GPU counts are its pools': 'unknown GPU None' before
        ([str(EXAMPLES / "pools-llama3.1-70b-h100-a100.toml"), "--nodes", "8"], "--nodes: give"),
    ],
)
def test_a_pin_the_job_cannot_take_exits_2_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _err(argv, capsys)
    assert code == 2 and message in err, err


def test_pins_the_model_takes_still_search(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 divides the 8 experts, 4 the 32 heads and the 8 query groups; torchtitan with ZeRO 3
    for argv in (
        ["--model", "mixtral-8x7b", "--num-gpus", "64", "--ep", "8", "--top", "1"],
        ["--num-gpus", "16", "--tp", "4", "--top", "1"],
        ["--framework", "torchtitan", "--zero", "1,3", "--top", "1"],
    ):
        code, err = _err(argv, capsys)
        assert code == 0, err


def test_a_job_files_layout_is_said_unread_under_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Text mode said 'its [parallel] not read' on the job line; --json, which prints no job
    line, said nothing while its rows broke the file's pp = 4."""
    job = tmp_path / "job.toml"
    job.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n[parallel]\ntp = 4\npp = 4\n"
    )
    code, err = _err([str(job), "--json", "--top", "1"], capsys)
    assert code == 0 and "its [parallel] table is not read" in err
    code, err = _err([str(job), "--json", "--top", "1", "--pp", "4"], capsys)
    assert code == 0 and "its [parallel] table is not read" in err  # pinned or not, it is said


def test_search_flags_the_pooled_search_ignores_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tp 4 --recompute none` on a pools job returned cp 2, selective-recompute rows: the
    pooled search does not read the search flags (a QA pass); it now exits 2 naming them, and
    what it does read (--headroom, --top) still runs."""
    job = str(EXAMPLES / "pools-llama3.1-70b-h100-a100.toml")
    code, err = _err([job, "--tp", "4", "--recompute", "none"], capsys)
    assert code == 2 and "--tp / --max-tp, --recompute: the search over pools" in err
    code, err = _err([job, "--no-cp"], capsys)
    assert code == 2 and "--no-cp" in err
    code, err = _err([job, "--headroom", "5", "--top", "1"], capsys)
    assert code == 0, err
