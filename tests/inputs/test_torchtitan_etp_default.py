"""A torchtitan plan without `etp`: expert TP 1 wherever EP is on, torchtitan's default, not
Megatron's tp; the plan writer, the launch targets and the fix list agree with the reader.

Oracles: pytorch/torchtitan e347b1e5 config/job_config.py:464 (`expert_tensor_parallel_degree:
int = 1`) and distributed/parallel_dims.py:58-59 (etp 1 or tp with EP), :138 (efsdp = dp_shard x
cp x tp / (etp x ep)); b5bcd76c distributed/parallel_dims.py:187-192 (no expert TP: ep must divide
the sparse region dp_shard x cp x tp), :282 (efsdp = fsdp x tp / ep). Without EP torchtitan shards
the experts over the whole tp mesh (e347b1e5 models/llama4/infra/parallelize.py `apply_moe_ep_tp`):
expert TP = tp there. Megatron-LM's default (--expert-tensor-parallel-size None -> tp) is not
torchtitan's and stays as it was.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from plan_text import write

from planner.emit import torchtitan as emit_toml
from planner.emit import torchtitan_module
from planner.inputs import plan_writer
from planner.inputs.plan import load_plan
from planner.search import advice
from planner.search.rules import check_plan


def _plan(tmp_path: Path, parallel: str, framework: str = "torchtitan") -> Path:
    """Qwen3-30B-A3B on 8 H100, 4,096-token sequences, 8 a step: the QA repro's job."""
    return write(
        tmp_path,
        '[model]\nname = "qwen3-30b-a3b"\n'
        '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        f'[training]\nframework = "{framework}"\nseq_length = 4096\nglobal_batch_size = 8\n'
        f"[parallel]\n{parallel}",
    )


TP2_EP4 = 'tp = 2\nep = 4\nsequence_parallel = true\nmicro_batch_size = 2\nzero_stage = 3\nrecompute = "full"\n'  # noqa: E501
TP2_EP8 = TP2_EP4.replace("ep = 4", "ep = 8")


def test_torchtitan_plan_without_etp_runs_expert_tp_1(tmp_path: Path) -> None:
    # job_config.py:464 at e347b1e5: expert_tensor_parallel_degree defaults to 1 (the tp 2 here
    # would be Megatron's default, not torchtitan's)
    lay = check_plan(load_plan(_plan(tmp_path, TP2_EP4))).require_layout()
    assert (lay.tp, lay.ep, lay.expert_tp) == (2, 4, 1)


def test_tp2_ep8_on_8_gpus_is_taken(tmp_path: Path) -> None:
    # b5bcd76c parallel_dims.py:187-192: sparse region dp_shard x cp x tp = 4 x 1 x 2 = 8, and
    # ep 8 divides it; e347b1e5 with etp 1: efsdp = 4 x 1 x 2 / (1 x 8) = 1, a whole number.
    # Read with etp = tp (2), ep x etp = 16 would not divide 8 and the plan was refused.
    lay = check_plan(load_plan(_plan(tmp_path, TP2_EP8))).require_layout()
    assert (lay.dp, lay.ep, lay.expert_tp) == (4, 8, 1)


def test_etp_as_written_and_without_ep_is_kept(tmp_path: Path) -> None:
    # etp written: parallel_dims.py:58-59 takes etp = tp with EP; without EP the experts are
    # tensor-parallel over the whole tp mesh (apply_moe_ep_tp), expert TP 2 here
    given = load_plan(_plan(tmp_path, TP2_EP4 + "etp = 2\n")).require_layout()
    assert given.expert_tp == 2
    no_ep = TP2_EP4.replace("ep = 4\n", "")
    assert load_plan(_plan(tmp_path, no_ep)).require_layout().expert_tp == 2


def test_megatron_plan_keeps_its_default(tmp_path: Path) -> None:
    # Megatron-LM: --expert-tensor-parallel-size unset follows --tensor-model-parallel-size
    lay = load_plan(_plan(tmp_path, TP2_EP4, framework="megatron")).require_layout()
    assert lay.expert_tp == 2


def test_writer_spells_out_an_etp_that_follows_tp(tmp_path: Path) -> None:
    # a torchtitan layout whose etp follows tp (None, tp 2) at ep 4: the reader takes a missing
    # etp as 1, so the written table must say 2 for the read-back to be the layout written
    plan = load_plan(_plan(tmp_path, TP2_EP4))
    follows = plan.require_layout().with_(etp=None)
    table = plan_writer.parallel_table(plan.job, follows)
    assert table["etp"] == 2


def test_launch_targets_write_expert_tp_1(tmp_path: Path) -> None:
    # the TOML target writes expert_tensor_parallel_degree as read (1); the module target
    # (b5bcd76c, no expert TP: it refuses etp > 1) takes the plan
    plan = check_plan(load_plan(_plan(tmp_path, TP2_EP4)))
    par = emit_toml.sections(plan, 500)["parallelism"]
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (4, 1)
    text = emit_toml.render(plan, "p5")
    assert tomllib.loads(text)["parallelism"]["expert_tensor_parallel_degree"] == 1
    assert "expert_parallel_degree=4" in torchtitan_module.render(plan, "p5")


def test_fix_list_raising_ep_reads_back_etp_1(tmp_path: Path) -> None:
    # a torchtitan plan at ep 1 (etp following tp 2): a fix "ep 1 -> 4" is written as the line
    # ep = 4, which reads as etp 1 (job_config.py:464); the change's layout must be that one
    plan = load_plan(_plan(tmp_path, TP2_EP4.replace("ep = 4\n", "")))
    job, lay = plan.job, plan.require_layout()
    raised = [new for _, field, value, new, _ in advice.single_changes(job, lay) if field == "ep"]
    assert raised and all(new.expert_tp == 1 for new in raised)
