"""A torchtitan job config TOML's activation-checkpointing fields planner does not model (s34):
`activation_checkpoint.debug = true` was read silently.

Oracles: torchtitan e347b1e5's source. `debug` is a field there (config/job_config.py:713-717,
"Capture ac debug information. Will be slower"; planner/inputs/torchtitan_job_config_schema.json
holds it), so the file is not refused for the name; every checkpoint wrapper takes it and
`early_stop` (:675-679; distributed/activation_checkpoint.py:41-47, :130-137, :150-156), and
per-op selective checkpointing `per_op_sac_force_recompute_mm_shapes_by_fqns` (:661-673, default
["moe.router.gate"]). They move the step time in a way planner does not model, so each is taken
at its default only where checkpointing runs, exiting 2 with file, field and value otherwise, as
the Python configuration reader takes debug (test_torchtitan_record_fields.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan_toml import AC_UNMODELLED, FORCE_RECOMPUTE, SCHEMA

MIRROR = Path("/work/.mirror/pytorch+torchtitan/repo")
TOML = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
[activation_checkpoint]
{ac}
"""


def read(tmp_path: Path, ac: str) -> Plan:
    path = tmp_path / "job.toml"
    path.write_text(TOML.format(ac=ac))
    return torchtitan_config.load(path, "h100-sxm-80gb", 8)


@pytest.mark.parametrize(
    ("ac", "needle"),
    [
        ('mode = "full"\ndebug = true', "activation_checkpoint.debug: true: planner models"),
        ('mode = "selective"\ndebug = true', "activation_checkpoint.debug: true"),
        ('mode = "full"\nearly_stop = true', "activation_checkpoint.early_stop: true"),
        (
            f'mode = "selective"\nselective_ac_option = "op"\n{FORCE_RECOMPUTE} = ["attention.wq"]',
            f'activation_checkpoint.{FORCE_RECOMPUTE}: ["attention.wq"]',
        ),
    ],
)
def test_an_unmodelled_field_off_its_default_exits_2(tmp_path: Path, ac: str, needle: str) -> None:
    with pytest.raises(InputError, match=r"job\.toml: ") as info:
        read(tmp_path, ac)
    assert needle in str(info.value) and "default here" in str(info.value)


def test_at_their_defaults_or_where_unused_they_read_as_without(tmp_path: Path) -> None:
    full = read(tmp_path, 'mode = "full"').require_layout()
    same = 'mode = "full"\ndebug = false\nearly_stop = false'
    assert read(tmp_path, same).require_layout() == full
    # no checkpointing: the wrapper and its fields never run
    none = read(tmp_path, 'mode = "none"').require_layout()
    assert read(tmp_path, 'mode = "none"\ndebug = true').require_layout() == none
    # the per-op list only under selective_ac_option "op"; every 2nd layer here
    layers = read(tmp_path, 'mode = "selective"\nselective_ac_option = "2"').require_layout()
    listed = f'mode = "selective"\nselective_ac_option = "2"\n{FORCE_RECOMPUTE} = []'
    assert read(tmp_path, listed).require_layout() == layers


def test_the_fields_are_e347b1e5s() -> None:
    sections = json.loads(SCHEMA.read_text())["sections"]
    assert {*AC_UNMODELLED, FORCE_RECOMPUTE} <= set(sections["activation_checkpoint"])


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no torchtitan mirror on this machine")
def test_the_defaults_are_e347b1e5s() -> None:
    text = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", "e347b1e5:torchtitan/config/job_config.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert text[650] == "class ActivationCheckpoint:"
    assert text[674].strip() == "early_stop: bool = False"
    assert text[712].strip() == "debug: bool = False"
    assert text[660].strip().startswith(f"{FORCE_RECOMPUTE}: list[str]")
    assert '["moe.router.gate"]' in text[661]
