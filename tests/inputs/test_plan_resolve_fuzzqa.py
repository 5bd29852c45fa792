"""`[model] hf_config` naming something that exists but is no regular file (fuzz QA: `/dev/null`
was reported as "no such file", planner.inputs.plan_resolve).

Oracle: the contract (the message says what is wrong with the value it names) and the file
system: /dev/null exists (os.path.exists) and is a character device, not a regular file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_run import run

PLAN = """[model]
hf_config = "{ref}"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8

[training]
seq_length = 4096
global_batch_size = 8
"""


def _check(tmp_path: Path, ref: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(ref=ref))
    code, _, err = run(["check", str(path)], capsys)
    return code, " ".join(err.split())


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_a_device_is_not_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _check(tmp_path, "/dev/null", capsys)
    assert code == 2
    assert "model.hf_config: not a regular file: /dev/null" in err and "no such file" not in err


def test_missing_and_directory_still_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _check(tmp_path, str(tmp_path / "missing.json"), capsys)
    assert code == 2 and "model.hf_config: no such file" in err
    code, err = _check(tmp_path, str(tmp_path), capsys)
    assert code == 2 and "model.hf_config: is a directory" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_pipe_is_not_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    code, err = _check(tmp_path, str(fifo), capsys)
    assert code == 2 and "not a regular file" in err


def test_an_rl_kv_cache_larger_than_any_gpu_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rl_kv_cache_gib` is the rollout engine's KV cache on each GPU: 1e30 GiB is a typo, not a
    plan that does not fit (it printed a peak of 1e30 GiB and exited 1). Bounded as a GPU's
    memory override is (hardware.MAX_GPU_MEMORY_GIB), exit 2 naming the field and value."""
    path = tmp_path / "rl.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\nrl_kv_cache_gib = 1e30\n"
    )
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2 and "training.rl_kv_cache_gib" in err and "1e+30" in err
