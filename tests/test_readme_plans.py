"""README.md's TOML blocks: each parses, and the plan-file example is what the README says of it,
"the one document check, explain and launch read", which "runs as written": `check` on the block
as copied exits 0 (it fits). The `[torchtitan]` block is the table a torchtitan plan adds: beside
that example turned torchtitan it is read (exit 0 or 1, not 2), beside the Megatron-LM example it
exits 2, as the README says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

BLOCKS = re.findall(r"```toml\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def _block(first_line: str) -> str:
    found = [b for b in BLOCKS if b.startswith(first_line)]
    assert len(found) == 1, first_line
    return found[0]


def test_the_readme_has_its_plan_blocks() -> None:
    # the plan file, the [torchtitan] table, the pools' [cluster]
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.splitlines()[0].split("#")[0].strip())
def test_every_toml_block_parses(block: str) -> None:
    assert tomllib.loads(block)


def test_the_plan_example_checks_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(_block("[model]"))
    code, out, err = run(["check", str(path)], capsys)
    assert code == 0, err
    assert "fits" in out


def test_the_torchtitan_table_goes_with_a_torchtitan_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tomllib.loads(_block("[model]"))
    table = _block("[torchtitan]")
    megatron = tmp_path / "megatron.toml"
    megatron.write_text(_block("[model]") + table)
    code, _, err = run(["check", str(megatron)], capsys)
    assert code == 2 and 'needs training.framework = "torchtitan"' in err
    # the example's job and degrees under torchtitan: FSDP2 (ZeRO 3), its own split
    training = plan["training"]
    parallel = plan["parallel"]
    titan = tmp_path / "titan.toml"
    titan.write_text(
        f'[model]\nname = "{plan["model"]["name"]}"\n'
        f'[cluster]\ngpu = "{plan["cluster"]["gpu"]}"\nnum_gpus = {plan["cluster"]["num_gpus"]}\n'
        f"[training]\nseq_length = {training['seq_length']}\n"
        f"global_batch_size = {training['global_batch_size']}\n"
        'framework = "torchtitan"\n'
        f"[parallel]\ntp = {parallel['tp']}\npp = {parallel['pp']}\ncp = {parallel['cp']}\n"
        "zero_stage = 3\n" + table
    )
    code, _, err = run(["check", str(titan)], capsys)
    assert code in (0, 1), err
