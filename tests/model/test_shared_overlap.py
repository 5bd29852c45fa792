"""Megatron's --moe-shared-expert-overlap (`Layout.moe_shared_expert_overlap`): read from a command
line, written back to a plan, emitted by launch, refused where Megatron refuses it, and the
dispatcher seconds the shared experts hide (`dispatch.shared_overlap`), charged by
`stage_time.ep_exposed` and floored alike by the search's bounds, and explain's note (what the
overlap hides, or what it would save), which suggest prints for its first pick.

Oracles: Megatron-LM d98e8a64 (moe/token_dispatcher.py: the alltoall and flex dispatchers launch
the shared experts' fc1 on their own stream beside the dispatch and fc2 beside the combine;
transformer_config.py refuses the flag with the allgather dispatcher and with recompute of the
shared experts when the model has them, and with --overlap-moe-expert-parallel-comm always),
hand arithmetic, and the estimate's own pieces recombined by hand.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cli_run import suggest_plan

from planner.cli import explain_notes
from planner.emit import megatron
from planner.emit.launch import render
from planner.inputs import megatron_args, plan_writer
from planner.inputs.plan import parse_plan, reframe
from planner.inputs.units import GIB
from planner.model import comms, cost, dispatch, layer_time, memory
from planner.model.layer_time import gpu_of
from planner.model.stage_time import layout_times
from planner.search.bound import lower_bound
from planner.search.rules import violations

# a 16-layer MoE of 1,024 hidden with 16 experts of 2,048 (top 2) and one shared expert of 4,096,
# on two H100 nodes: ep 16 spans both, so the all-to-all crosses InfiniBand
LINE = (
    "--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 "
    "--vocab-size 32000 --bf16 --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 2048 "
    "--moe-shared-expert-intermediate-size 4096 --expert-model-parallel-size 16 "
    "--moe-token-dispatcher-type alltoall --moe-grouped-gemm --swiglu "
    "--transformer-impl transformer_engine --moe-shared-expert-overlap"
)
FLAG = " --moe-shared-expert-overlap"


def _plan(line: str = LINE):  # type: ignore[no-untyped-def]
    return parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 16))


def test_hidden_seconds_by_hand() -> None:
    # a2a 12 s over 2 passes (one forward, the backward): each dispatch or combine 3 s; shared
    # GEMMs fc1 4 s, fc2 2 s forward, twice that backward. Forward: min(3, 4) + min(3, 2) = 5;
    # backward: min(3, 8) + min(3, 4) = 6; 11 of the 12 s hidden
    assert dispatch.shared_overlap(12.0, 2, [4.0, 2.0], 2) == pytest.approx(11.0)
    # a short all-to-all hides whole: 2 s, each of the four 0.5 s under a longer GEMM
    assert dispatch.shared_overlap(2.0, 2, [4.0, 2.0], 2) == pytest.approx(2.0)
    # the forward recomputed (3 passes): each all-to-all 2 s; forward min(2, 4) + min(2, 2) = 4,
    # twice, backward 4: 12 of 12
    assert dispatch.shared_overlap(12.0, 3, [4.0, 2.0], 2) == pytest.approx(12.0)
    # no shared experts, no all-to-all: nothing hidden
    assert dispatch.shared_overlap(12.0, 2, [], 2) == 0.0
    assert dispatch.shared_overlap(0.0, 2, [4.0, 2.0], 2) == 0.0


def test_the_flag_is_read_written_back_and_emitted() -> None:
    plan = _plan()
    lay = plan.require_layout()
    assert lay.moe_shared_expert_overlap and lay.ep == 16
    assert violations(plan.job, lay) == []
    text = plan_writer.render(plan.job, lay, {"name": "moe"}, ["t"])
    assert "moe_shared_expert_overlap = true" in text
    args = [a for g in megatron.arguments(plan).parallel for a in g]
    assert "--moe-shared-expert-overlap" in args
    bridge = yaml.safe_load(render(plan, "megatron-bridge")[1])["model"]
    assert bridge["moe_shared_expert_overlap"] is True
    bare = _plan(LINE.replace(FLAG, ""))
    assert not bare.require_layout().moe_shared_expert_overlap
    assert "shared_expert_overlap" not in plan_writer.render(
        bare.job, bare.require_layout(), {"name": "m"}, []
    )
    bare_bridge = yaml.safe_load(render(bare, "megatron-bridge")[1])["model"]
    assert bare_bridge["moe_shared_expert_overlap"] is False


def test_megatron_refuses_it_where_it_asserts() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()

    def fields(**change: object) -> list[str]:
        return [v.field for v in violations(job, lay.with_(**change))]

    field = "parallel.moe_shared_expert_overlap"
    assert field in fields(moe_token_dispatcher_type="allgather")
    assert field in fields(recompute="selective", recompute_modules=("shared_experts",))
    assert field not in fields(recompute="selective", recompute_modules=("moe_act",))
    assert field in fields(ep_comm_overlap=True)
    # a model without shared experts runs the flag as a no-op, any dispatcher; not with the EP
    # overlap, which Megatron asserts against either way
    plain = _plan(LINE.replace("--moe-shared-expert-intermediate-size 4096 ", ""))
    pj, pl = plain.job, plain.require_layout()
    assert violations(pj, pl.with_(moe_token_dispatcher_type="allgather")) == []
    assert field in [v.field for v in violations(pj, pl.with_(ep_comm_overlap=True))]
    titan = reframe(job, "torchtitan")
    assert field in [v.field for v in violations(titan, lay)]


def test_the_layer_hides_part_of_its_all_to_all() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    gpu = gpu_of(job)
    on = layer_time.layer_time(job, lay, gpu, True)
    off = layer_time.layer_time(job, lay.with_(moe_shared_expert_overlap=False), gpu, True)
    assert off.ep_shared == 0.0 and on.ep == off.ep > 0
    # the same seconds every way but the hidden ones; at most the all-to-all itself
    assert (on.fwd, on.bwd) == (off.fwd, off.bwd)
    assert 0 < on.ep_shared <= on.ep
    # a dense layer has no dispatcher to hide
    assert layer_time.layer_time(job, lay, gpu, False).ep_shared == 0.0


def test_the_step_shows_the_hidden_seconds_at_the_sms_share() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    off_lay = lay.with_(moe_shared_expert_overlap=False)
    on, off = cost.estimate(job, lay), cost.estimate(job, off_lay)
    # the step's layer (`layout_times`): its window widened by the host's slack (host_floor)
    per_layer = layout_times(job, lay).layers[-1].ep_shared
    share = comms.sm_share(job.cluster, job.gemm_sm_margin)
    m = 64 // lay.dp  # one micro-batch per data-parallel rank and step
    # pp 1: the one stage runs the 16 MoE layers m times; each hidden second still holds share
    # of the SMs from the shared experts it runs under
    hidden = m * 16 * per_layer
    assert on.breakdown.ep_comm_hidden == pytest.approx(hidden)
    shown = off.breakdown.ep_comm_exposed - (1 - share) * hidden
    assert on.breakdown.ep_comm_exposed == pytest.approx(shown)
    assert on.step_time_s == pytest.approx(off.step_time_s - (1 - share) * hidden)
    # the search's lower bound stays under the estimate
    assert lower_bound(job, lay) <= on.step_time_s


def test_explain_says_what_it_hides_or_would_save() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    on, off = (
        cost.estimate(job, lay),
        cost.estimate(job, lay.with_(moe_shared_expert_overlap=False)),
    )
    text = explain_notes.shared_overlap_text(job, lay, on)
    assert text is not None
    assert f"hiding {on.breakdown.ep_comm_hidden:.3f} s of the all-to-all per step" in text
    assert f"the step {on.step_time_s / off.step_time_s - 1:+.1%} against" in text
    # the same plan without: the advice, with the difference of the two estimates (over 1%)
    plain = lay.with_(moe_shared_expert_overlap=False)
    advice = explain_notes.shared_overlap_text(job, plain, off)
    assert advice is not None and "parallel.moe_shared_expert_overlap = true" in advice
    assert f"would save {off.step_time_s - on.step_time_s:.3f} s" in advice
    # no advice where Megatron refuses it (the EP overlap), nor without an all-to-all to hide
    # (ep 1), nor without shared experts
    ep_ov = plain.with_(ep_comm_overlap=True)
    assert explain_notes.shared_overlap_text(job, ep_ov, cost.estimate(job, ep_ov)) is None
    for flag in (False, True):  # ep 1: nothing to hide, nothing said either way
        flat = lay.with_(ep=1, moe_shared_expert_overlap=flag)
        assert explain_notes.shared_overlap_text(job, flat, cost.estimate(job, flat)) is None
    bare = _plan(LINE.replace("--moe-shared-expert-intermediate-size 4096 ", "").replace(FLAG, ""))
    bj, bl = bare.job, bare.require_layout()
    assert explain_notes.shared_overlap_text(bj, bl, cost.estimate(bj, bl)) is None


def test_suggest_says_what_it_would_save_on_its_first_pick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # DeepSeek-V2-Lite (two shared experts) on 16 H100 at pp 2 without interleaving, where the EP
    # overlap cannot run: suggest leaves the shared experts' overlap off and says what it would
    # save on its first pick, the written plan's own note
    argv = ["suggest", "--model", "deepseek-v2-lite", "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
    argv += ["--seq-length", "4096", "--global-batch-size", "64", "--pp", "2", "--vpp", "1"]
    written, out = suggest_plan([*argv, "--ep", "8"], tmp_path, capsys)
    job, lay = written.job, written.require_layout()
    assert not lay.moe_shared_expert_overlap and not lay.ep_comm_overlap
    note = explain_notes.shared_overlap_text(job, lay, cost.estimate(job, lay))
    assert note is not None and "would save" in note
    assert f"#1: {note}" in out


def test_the_advice_names_the_memory_the_gathered_input_adds() -> None:
    """With TP the overlapped shared experts' fc1 keeps the TP group's gathered input
    (shared_experts.py `pre_forward_comm`, d98e8a64): the advice names what that adds at the peak,
    the two estimates' difference, and is not given where the plan would then not fit."""
    plan = _plan(LINE.replace(FLAG, "") + " --tensor-model-parallel-size 2 --sequence-parallel")
    job, lay = plan.job, plan.require_layout()
    flip = lay.with_(moe_shared_expert_overlap=True)
    more = (memory.estimate(job, flip).peak - memory.estimate(job, lay).peak) / GIB
    # at least the 16 MoE layers' gathered inputs, kept for the one micro-batch in flight at
    # pp 1: 16 x 4,096 tokens x 1,024 x 2 bytes = 128 MiB (the norm output the layer keeps is the
    # local 2,048 tokens', already counted)
    assert more >= 16 * 4096 * 1024 * 2 / GIB
    advice = explain_notes.shared_overlap_text(job, lay, cost.estimate(job, lay))
    assert advice is not None and f"for {more:.1f} GiB more at the peak" in advice
    # the same job on a GPU whose memory the overlap would overflow: no advice (usable memory
    # halfway between the two peaks; the capacity is the physical memory less the headroom)
    rep = memory.estimate(job, lay)
    usable = rep.peak + 0.5 * more * GIB
    gib = usable * rep.physical / rep.capacity / GIB
    tight = replace(job, cluster=job.cluster.model_copy(update={"memory_gib": gib}))
    assert memory.estimate(tight, lay).fits and not memory.estimate(tight, flip).fits
    assert explain_notes.shared_overlap_text(tight, lay, cost.estimate(tight, lay)) is None


def test_the_advice_is_weighed_at_the_commands_headroom() -> None:
    """The advice ignored --headroom: it was weighed at the default 3%, so a plan checked at a
    larger one was told to turn on an overlap that no longer fit there. Oracle: the memory
    model at that headroom (usable memory halfway between the two peaks), through explain's
    notes and suggest's first-pick notes alike."""
    plan = _plan(LINE.replace(FLAG, "") + " --tensor-model-parallel-size 2 --sequence-parallel")
    job, lay = plan.job, plan.require_layout()
    flip = lay.with_(moe_shared_expert_overlap=True)
    before, after = memory.estimate(job, lay), memory.estimate(job, flip)
    usable = before.peak + 0.5 * (after.peak - before.peak)
    headroom = 100 * (1 - usable / before.physical)
    assert memory.estimate(job, lay, headroom).fits
    assert not memory.estimate(job, flip, headroom).fits
    perf = cost.estimate(job, lay)
    advice = explain_notes.shared_overlap_text(job, lay, perf)
    assert advice is not None and advice in explain_notes.notes(job, lay, perf)
    assert explain_notes.shared_overlap_text(job, lay, perf, headroom) is None
    assert advice not in explain_notes.notes(job, lay, perf, headroom)
    picked = [n for _, n in explain_notes.first_pick_notes(job, lay, perf, headroom)]
    assert advice in [n for _, n in explain_notes.first_pick_notes(job, lay, perf, 3.0)]
    assert advice not in picked
