"""`parallel.use_tp_pp_dp_mapping` (Megatron --use-tp-pp-dp-mapping) read, written and refused.

Oracles: Megatron-LM d98e8a64 training/config/common_config.py:105 (the switch, default False),
initialize.py:395 (order tp-cp-ep-pp-dp under it), parallel_state.py:898-906 (with pp > 1 the
expert grid's data-parallel size must equal the dense one's, and the pipeline groups match);
Megatron-Bridge 067f987d training/config.py:146 (DistributedInitConfig, `dist`), :1124 (refused
with Megatron-FSDP), initialize.py:817; its docs/nemo2-migration-guide.md:823
(strategy.use_tp_pp_dp_mapping); torchtitan b5bcd76c distributed/parallel_dims.py:309 (its mesh
order fixed). The 64-H100 step by hand: the same memory, only the placement moves.
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

FLAG = "--use-tp-pp-dp-mapping"
PARALLEL = {"tp": 2, "pp": 4, "zero_stage": 1, "use_tp_pp_dp_mapping": True}


def test_megatron_targets_write_it_and_the_reader_reads_it_back() -> None:
    plan = make_plan("llama3.1-8b", 64, PARALLEL)
    assert plan.layout is not None and plan.layout.use_tp_pp_dp_mapping
    assert flags(plan)[FLAG] == []
    back = round_trip(plan)
    assert back.layout is not None and back.layout.use_tp_pp_dp_mapping
    assert_same(plan, back)
    for render in (torchrun.render, slurm.render, k8s.render):
        assert FLAG in render(plan, "job")
    assert FLAG not in flags(
        make_plan("llama3.1-8b", 64, {**PARALLEL, "use_tp_pp_dp_mapping": False})
    )


def test_the_reader_no_longer_ignores_it() -> None:
    line = (
        "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
        "--global-batch-size 64 --tokenizer-type NullTokenizer --vocab-size 32000 --bf16 "
        f"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 {FLAG}"
    )
    reading = megatron_args.read(line, "h100-sxm-80gb", 16, "run.sh")
    assert reading.doc["parallel"]["use_tp_pp_dp_mapping"] is True
    assert FLAG not in reading.ignored


def test_a_log_prints_it_as_the_switch() -> None:
    run = LogRun(Path("run.log"), args={"use_tp_pp_dp_mapping": "True"})
    assert FLAG in words(run)
    assert FLAG not in words(LogRun(Path("run.log"), args={"use_tp_pp_dp_mapping": "False"}))


def test_nemo_strategy_key() -> None:
    line = "nemo llm pretrain -y --factory llama3_8b trainer.strategy.use_tp_pp_dp_mapping=True"
    reading = megatron_args.read(line, "h100-sxm-80gb", 8, "run.sh")
    assert reading.doc["parallel"]["use_tp_pp_dp_mapping"] is True


def test_the_plan_file_round_trip() -> None:
    plan = make_plan("llama3.1-8b", 64, PARALLEL)
    assert plan.layout is not None
    assert plan_writer.parallel_table(plan.job, plan.layout)["use_tp_pp_dp_mapping"] is True
    off = make_plan("llama3.1-8b", 64, {**PARALLEL, "use_tp_pp_dp_mapping": False})
    assert off.layout is not None
    assert "use_tp_pp_dp_mapping" not in plan_writer.parallel_table(off.job, off.layout)


def test_bridge_writes_dist_and_refuses_it_with_fsdp() -> None:
    plan = make_plan("llama3.1-8b", 64, PARALLEL)
    assert bridge.sections(plan)["dist"] == {"use_tp_pp_dp_mapping": True}
    assert "dist.use_tp_pp_dp_mapping=true" in bridge.render(plan, "job").lower()
    off = make_plan("llama3.1-8b", 64, {**PARALLEL, "use_tp_pp_dp_mapping": False})
    assert "dist" not in bridge.sections(off)
    fsdp = make_plan("llama3.1-8b", 64, {**PARALLEL, "zero_stage": 3})
    with pytest.raises(InputError, match="Megatron-FSDP"):
        bridge.sections(fsdp)


def test_torchtitan_refuses_it() -> None:
    with pytest.raises(InputError, match="torchtitan's device mesh order is fixed"):
        make_plan("llama3.1-8b", 64, PARALLEL, framework="torchtitan")


def test_moe_needs_expert_tp_x_ep_equal_to_tp_x_cp() -> None:
    """Mixtral 8x7B tp 2 pp 4 ep 8: expert dp 64 / (2 x 8 x 4) = 1 against dense dp 8, which
    Megatron asserts against under this order; ep 2 (etp 1) gives tp x cp = etp x ep = 2."""
    with pytest.raises(InputError, match=r"expert tp x ep \(16\) equal to tp x cp \(2\)"):
        check_plan(make_plan("mixtral-8x7b", 64, {**PARALLEL, "ep": 8}))
    ok = check_plan(make_plan("mixtral-8x7b", 64, {**PARALLEL, "ep": 2, "etp": 1}))
    assert ok.layout is not None and ok.layout.expert_dp == ok.layout.dp == 8


def test_a_dense_model_with_cp_and_pp_is_refused_too() -> None:
    """Megatron builds the expert grid for a dense model too (parallel_state.py:870-895, etp =
    tp, ep = 1) and asserts its data-parallel size equal to the dense one's whenever the order
    does not end in pp (:898-901). Llama 3.1 8B on 16 GPUs, tp 2 pp 2 cp 2: dense dp = 16 /
    (2 x 2 x 2) = 2, expert dp = 16 / (2 x 1 x 2) = 4, so Megatron asserts; cp 1 (dp 4): both
    16 / (2 x 2) = 4, it runs."""
    parallel = {**PARALLEL, "pp": 2, "cp": 2}
    with pytest.raises(InputError, match=r"expert tp x ep \(2\) equal to tp x cp \(4\)"):
        check_plan(make_plan("llama3.1-8b", 16, parallel, seq_length=8192))
    ok = check_plan(make_plan("llama3.1-8b", 16, {**parallel, "cp": 1}))
    assert ok.layout is not None and ok.layout.dp == 4


def test_checks_advice_keeps_to_the_order() -> None:
    """A rule, not an input check, so `check`'s single changes never break it (QA: ep 2 -> 8 and
    tp 2 -> 4 were advised to a Qwen3-30B-A3B plan at pp 2, each then refused)."""
    parallel = {**PARALLEL, "pp": 2, "ep": 2, "etp": 1, "micro_batch_size": 4}
    plan = check_plan(make_plan("qwen3-30b-a3b", 64, parallel))
    job, lay = plan.job, plan.require_layout()
    assert not memory.estimate(job, lay).fits
    changes = advice.memory_changes(job, lay)
    assert changes and all(not violations(job, c.layout) for c in changes)
    assert not any(c.field in ("parallel.ep", "parallel.tp") for c in changes)


def test_64_h100_same_memory_other_step() -> None:
    """The QA repro (Llama 3.1 8B, tp 2 pp 4 dp 8, 8 nodes of 8): the order changes where the
    groups sit, never what a GPU holds; the step moves (the DP reduce-scatter now spans 8 nodes
    at one rank each, the pipeline hops stay in a node)."""
    on = make_plan("llama3.1-8b", 64, PARALLEL)
    off = make_plan("llama3.1-8b", 64, {**PARALLEL, "use_tp_pp_dp_mapping": False})
    assert on.layout is not None and off.layout is not None
    assert memory.estimate(on.job, on.layout).peak == memory.estimate(off.job, off.layout).peak
    fast, slow = cost.estimate(on.job, on.layout), cost.estimate(off.job, off.layout)
    assert fast.breakdown.pp_comm_exposed < slow.breakdown.pp_comm_exposed
    dp = ("dp_comm_exposed", "dp_comm_hidden")
    assert sum(getattr(fast.breakdown, k) for k in dp) > sum(getattr(slow.breakdown, k) for k in dp)


def test_unset_is_the_default_order() -> None:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
        "training": {"seq_length": 4096, "global_batch_size": 256},
        "parallel": {"tp": 2, "pp": 4},
    }
    plan = parse_plan(doc, Path("p.toml"))
    assert plan.layout is not None and not plan.layout.use_tp_pp_dp_mapping
