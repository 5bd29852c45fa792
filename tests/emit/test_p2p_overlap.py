"""`parallel.overlap_p2p_comm` (Megatron --no-overlap-p2p-communication) read, written, refused.

Oracles: Megatron-LM d98e8a64 training/arguments.py:3118-3120 (`--no-overlap-p2p-communication`,
store_false into overlap_p2p_comm: on by default), :1000-1009 (with interleaving and the overlap
off, pp > 2 asserted), :1010-1012 (without interleaving validate_args turns it off);
Megatron-Bridge 067f987d training/comm_overlap.py:453-460 (overlap on and batching off at vpp > 1
unless the user's CommOverlapConfig gives them, `_override_user_cfgs` :594-602), which its setup
writes over the model's (:618); torchtitan b5bcd76c config/configs.py:121 (ParallelismConfig, no
such switch) and distributed/pipeline_parallel.py:322-336 (the schedule built without one).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from megatron_plans import assert_same, flags, make_plan, round_trip

from planner.emit import bridge, k8s, slurm, torchrun
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.megatron_log import LogRun
from planner.inputs.megatron_log_args import words
from planner.inputs.plan import parse_plan
from planner.model import cost, memory
from planner.search import advice
from planner.search.rules import check_plan, violations

FLAG = "--no-overlap-p2p-communication"
OFF = {"tp": 2, "pp": 4, "vpp": 2, "overlap_p2p_comm": False}
LINE = (
    "torchrun pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
    "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
    "--global-batch-size 64 --tokenizer-type NullTokenizer --vocab-size 32000 --bf16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
)


def test_megatron_targets_write_it_and_the_reader_reads_it_back() -> None:
    plan = make_plan("llama3.1-8b", 64, OFF)
    assert plan.layout is not None and not plan.layout.overlap_p2p_comm
    assert flags(plan)[FLAG] == []
    back = round_trip(plan)
    assert back.layout is not None and not back.layout.overlap_p2p_comm
    assert_same(plan, back)
    for render in (torchrun.render, slurm.render, k8s.render):
        assert FLAG in render(plan, "job")
    # the default, and vpp 1 (where Megatron turns it off itself): no flag
    assert FLAG not in flags(make_plan("llama3.1-8b", 64, {**OFF, "overlap_p2p_comm": True}))
    assert FLAG not in flags(make_plan("llama3.1-8b", 64, {**OFF, "vpp": 1}))


def test_the_reader_reads_it_with_interleaving() -> None:
    line = LINE + "--num-layers-per-virtual-pipeline-stage 1 " + FLAG
    reading = megatron_args.read(line, "h100-sxm-80gb", 16, "run.sh")
    assert reading.doc["parallel"]["overlap_p2p_comm"] is False
    assert FLAG not in reading.ignored
    plan = parse_plan(reading.doc, Path("run.sh"))
    assert plan.layout is not None and not plan.layout.overlap_p2p_comm


def test_a_log_with_interleaving_prints_it_and_is_read() -> None:
    args = {"overlap_p2p_comm": "False", "virtual_pipeline_model_parallel_size": "2"}
    assert FLAG in words(LogRun(Path("run.log"), args=args))
    assert FLAG not in words(LogRun(Path("run.log"), args={**args, "overlap_p2p_comm": "True"}))


def test_at_vpp_1_it_is_accepted_as_the_default_and_noted() -> None:
    # validate_args turns it off without interleaving anyway (arguments.py:1010-1012): priced as
    # the default, though the layout keeps the value as written (check's advice to interleave
    # runs what the file says: the next test)
    off = make_plan("llama3.1-8b", 64, {**OFF, "vpp": 1})
    on = make_plan("llama3.1-8b", 64, {**OFF, "vpp": 1, "overlap_p2p_comm": True})
    assert off.require_layout() == on.require_layout().with_(overlap_p2p_comm=False)
    assert memory.estimate(off.job, off.require_layout()) == memory.estimate(
        on.job, on.require_layout()
    )
    assert cost.estimate(off.job, off.require_layout()) == cost.estimate(
        on.job, on.require_layout()
    )
    assert [f for f, _ in off.inert] == ["parallel.overlap_p2p_comm"]
    assert "vpp is 1" in off.inert[0][1]
    assert not on.inert
    assert "overlap_p2p_comm" not in plan_writer.parallel_table(off.job, off.require_layout())
    line = LINE + FLAG  # a command line without interleaving: read as written, noted the same
    plan = parse_plan(megatron_args.read(line, "h100-sxm-80gb", 16, "run.sh").doc, Path("x"))
    assert plan.layout is not None and not plan.layout.overlap_p2p_comm
    assert [f for f, _ in plan.inert] == ["parallel.overlap_p2p_comm"]


def test_the_plan_file_round_trip() -> None:
    plan = make_plan("llama3.1-8b", 64, OFF)
    table = plan_writer.parallel_table(plan.job, plan.require_layout())
    assert table["overlap_p2p_comm"] is False
    on = make_plan("llama3.1-8b", 64, {**OFF, "overlap_p2p_comm": True})
    assert "overlap_p2p_comm" not in plan_writer.parallel_table(on.job, on.require_layout())


def test_bridge_writes_comm_overlap() -> None:
    # Bridge's setup would turn the overlap back on at vpp 2 (comm_overlap.py:455-457) unless
    # the user's CommOverlapConfig says otherwise; batched, as Megatron-LM runs it off
    plan = make_plan("llama3.1-8b", 64, OFF)
    table = bridge.sections(plan)["comm_overlap"]
    assert table["overlap_p2p_comm"] is False and table["batch_p2p_comm"] is True
    text = bridge.render(plan, "job")
    assert "comm_overlap.overlap_p2p_comm=false" in text
    assert "comm_overlap.batch_p2p_comm=true" in text
    for parallel in ({**OFF, "overlap_p2p_comm": True}, {**OFF, "vpp": 1}):
        table = bridge.sections(make_plan("llama3.1-8b", 64, parallel))["comm_overlap"]
        assert "overlap_p2p_comm" not in table and "batch_p2p_comm" not in table


def test_torchtitan_refuses_it() -> None:
    with pytest.raises(InputError, match=r"parallel\.overlap_p2p_comm: false: a Megatron-LM"):
        make_plan("llama3.1-8b", 64, OFF, framework="torchtitan")


def test_bad_values_name_the_field_and_value() -> None:
    with pytest.raises(InputError, match=r'parallel\.overlap_p2p_comm: .*boolean.*"no"'):
        make_plan("llama3.1-8b", 64, {**OFF, "overlap_p2p_comm": "no"})


def test_pp_2_is_refused_as_megatron_does() -> None:
    # arguments.py:1006-1009: pp > 2 without the overlap; a rule (what the search and check's
    # advice ask of every layout they offer), not an input check
    with pytest.raises(InputError, match=r"needs pipeline_model_parallel_size > 2 \(got 2"):
        check_plan(make_plan("llama3.1-8b", 64, {**OFF, "pp": 2}))
    ok = make_plan("llama3.1-8b", 64, OFF)  # pp 4
    job, lay = ok.job, ok.require_layout()
    assert not violations(job, lay)
    assert [v.rule for v in violations(job, lay.with_(pp=2, dp=16))] == ["p2p_overlap_pp"]
    assert not violations(job, lay.with_(pp=2, dp=16, overlap_p2p_comm=True))


def test_checks_advice_keeps_the_plans_value() -> None:
    # suggest never searches it (the search's layouts take Layout's default, on); check's advice
    # changes one field of the plan's layout and keeps this one (a 70B plan that does not fit)
    plan = check_plan(make_plan("llama3.1-70b", 32, {**OFF, "tp": 4, "pp": 4}))
    job, lay = plan.job, plan.require_layout()
    assert not memory.estimate(job, lay).fits
    changes = advice.memory_changes(job, lay)
    assert changes and all(not c.layout.overlap_p2p_comm for c in changes)


def test_checks_advice_to_interleave_runs_the_files_value() -> None:
    # a plan at vpp 1 that writes overlap_p2p_comm = false: the advice's vpp 1 -> k edits vpp
    # alone, and the edited file runs the interleaved schedule without the overlap
    # (arguments.py:1000-1009 read it only with interleaving), so each vpp change is judged so
    # (`memory_changes` judges every layout `single_changes` offers)
    plan = check_plan(make_plan("llama3.1-70b", 32, {**OFF, "tp": 4, "pp": 4, "vpp": 1}))
    job, lay = plan.job, plan.require_layout()
    vpps = [(v, new) for _, f, v, new, _ in advice.single_changes(job, lay) if f == "vpp"]
    assert vpps
    for vpp, new in vpps:  # the edited file, read back, is the layout judged
        edited = make_plan("llama3.1-70b", 32, {**OFF, "tp": 4, "pp": 4, "vpp": vpp})
        assert not new.overlap_p2p_comm and edited.require_layout() == new
