"""NeMo 2.0 `model.config.overlap_p2p_comm` (with `model.config.batch_p2p_comm`): read as
`parallel.overlap_p2p_comm`, refused where Megatron-Core raises on it, and carried through a
launch (Megatron-Bridge's override, and the Megatron-LM launch read back).

Oracles: Megatron-LM d98e8a64 core/model_parallel_config.py:385 (overlap_p2p_comm, default
False) and :390 (batch_p2p_comm, default True); pipeline_parallel/schedules.py:1086-1087 (the
interleaved schedule raises with both on) and :2182-2184 (the non-interleaved one raises with
the overlap on); NeMo passes TransformerConfig's fields as the line sets them and runs no
validate_args. Megatron-Bridge 067f987d training/comm_overlap.py:453-460 (its setup turns the
overlap on and batching off at vpp > 1 unless the user's CommOverlapConfig gives them), so a
Bridge launch of the overlap off must write both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_run import run
from nemo_lines import doc, read

from planner.emit import launch
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan

# llama3_70b's recipe: tp 4, pp 4, vpp 5, cp 2 (nemo_recipes), on 4 nodes of 8
HEAD = "nemo llm pretrain -y --factory llama3_70b trainer.num_nodes=4 "
GPUS = 32
OFF = "model.config.overlap_p2p_comm=False"
ON = "model.config.overlap_p2p_comm=True model.config.batch_p2p_comm=False"
NO_VPP = "trainer.strategy.virtual_pipeline_model_parallel_size=None "


def _plan(line: str) -> Plan:
    return parse_plan(doc(line, GPUS), Path("run.sh"))


def test_the_key_is_read_as_the_plan_field() -> None:
    # before: "model.config.overlap_p2p_comm=False: not a NeMo 2 override planner knows"
    off = _plan(HEAD + OFF)
    assert off.require_layout().vpp == 5 and off.require_layout().overlap_p2p_comm is False
    assert read(HEAD + OFF, GPUS).ignored == ()
    on = _plan(HEAD + ON)
    assert on.require_layout().overlap_p2p_comm is True
    assert doc(HEAD + ON, GPUS)["parallel"]["overlap_p2p_comm"] is True
    # blocking either way with the overlap off (p2p_communication.py:416 waits every request)
    batched_or_not = HEAD + OFF + " model.config.batch_p2p_comm=False"
    assert _plan(batched_or_not).require_layout().overlap_p2p_comm is False


def test_without_interleaving_it_is_the_default_and_noted() -> None:
    # pp 4 without virtual stages: off is what runs (the non-interleaved schedule never
    # overlaps), noted as the plan file's own `overlap_p2p_comm = false` at vpp 1 is
    plan = _plan(HEAD + NO_VPP + OFF)
    assert plan.require_layout().vpp == 1
    assert [f for f, _ in plan.inert] == ["parallel.overlap_p2p_comm"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # the interleaved schedule with batch_p2p_comm's default True: schedules.py:1086-1087
        ("model.config.overlap_p2p_comm=True", r"add model.config.batch_p2p_comm=False"),
        (ON.replace("=False", "=True"), r"raises beside batch_p2p_comm"),
        # the non-interleaved schedule: schedules.py:2182-2184
        (NO_VPP + ON, r"non-interleaved schedule raises on it"),
        ("model.config.overlap_p2p_comm=maybe", r"overlap_p2p_comm='maybe': expected True or"),
    ],
)
def test_what_megatron_core_raises_on_is_bad_input(overrides: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as e:
        read(HEAD + overrides, GPUS)
    assert str(e.value).startswith("run.sh: model.config.")


def test_check_exits_2_on_it_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.sh"
    path.write_text(HEAD + "model.config.overlap_p2p_comm=True\n", encoding="utf-8")
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"]
    code, _, err = run([*argv, "--num-gpus", str(GPUS)], capsys)
    assert code == 2 and "Traceback" not in err
    assert "model.config.overlap_p2p_comm=True" in err and "batch_p2p_comm=False" in err


def test_launched_to_bridge_and_to_megatron_lm_it_reads_back_the_same(tmp_path: Path) -> None:
    plan = _plan(HEAD + OFF)
    # Bridge: its setup would turn the overlap back on at vpp 5 (comm_overlap.py:455-457), so
    # the override gives it off and batched, in the table and as Hydra lines
    _, text = launch.render(plan, "megatron-bridge")
    table = yaml.safe_load(text)["comm_overlap"]
    assert table["overlap_p2p_comm"] is False and table["batch_p2p_comm"] is True
    assert "# comm_overlap.overlap_p2p_comm=false" in text.splitlines()
    # on (the default): nothing written, Bridge's setup turns it on at vpp > 1
    _, on = launch.render(_plan(HEAD + ON), "megatron-bridge")
    assert "overlap_p2p_comm" not in yaml.safe_load(on)["comm_overlap"]
    # Megatron-LM: the launch read back by `check --megatron-args` has it off too
    _, args = launch.render(plan, "megatron-args")
    assert "--no-overlap-p2p-communication" in args
    back = parse_plan(doc(args, GPUS), Path("args.txt"))
    assert back.require_layout().overlap_p2p_comm is False
    assert back.require_layout().vpp == plan.require_layout().vpp
