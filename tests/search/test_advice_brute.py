"""`planner check`'s single changes against the brute force over each setting's values (QA's
second pass over the advice: six cases it listed wrong or left out).

Oracle for every test: the plan edited as a user would edit it (each value of the setting
written in the plan, the loader deriving dp), checked as `planner check` checks a plan file
(`rules.check_plan`: refused edits are no candidates), judged by `memory.estimate` /
`host_memory.estimate` for whether it fits and `cost.estimate` for its step; a listed change is
applied as its words say (`applied`: every field it names) and must be that fastest edit."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from test_advice_applied import applied, checked, doc, fits, plan_changes, step

from planner.search.advice import Change


def _doc(model: str, gpu: str, n: int, training: dict[str, Any], **sections: Any) -> dict:
    return {"model": {"name": model}, "cluster": {"gpu": gpu, "num_gpus": n}, "training": training,
            **sections}  # fmt: skip


TITAN_VPP = _doc(
    "llama3.1-8b", "h100-sxm-80gb", 8,
    {"framework": "torchtitan", "seq_length": 4096, "global_batch_size": 256},
    parallel={"tp": 1, "pp": 2, "vpp": 2, "micro_batch_size": 1, "zero_stage": 3,
              "recompute": "none"},
    torchtitan={"pipeline_schedule": "Interleaved1F1B"},
)  # fmt: skip
"""QA's repro1: torchtitan at pp 2, vpp 2, the schedule named (Interleaved1F1B, its default)."""

L405 = _doc(
    "llama3.1-405b", "h100-sxm-80gb", 1024,
    {"seq_length": 8192, "global_batch_size": 1536, "main_grad_dtype": "bf16",
     "expandable_segments": True, "attention_dropout": False, "hidden_dropout": False},
    parallel={"tp": 8, "pp": 8, "cp": 2, "vpp": 8, "sequence_parallel": True,
              "account_for_embedding_in_pipeline_split": True,
              "account_for_loss_in_pipeline_split": True, "micro_batch_size": 1,
              "zero_stage": 1, "recompute": "none", "tp_comm_overlap": True},
)  # fmt: skip
L405["cluster"]["memory_gib"] = 60.07
"""QA's repro5: the Bridge 405B recipe at pp 8 (its embedding and loss counted as layers), GPU
memory cut to 60.07 GiB."""

L70_BLOCK = _doc(
    "llama3.1-70b", "h100-sxm-80gb", 32, {"seq_length": 8192, "global_batch_size": 256},
    parallel={"tp": 4, "pp": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "full",
              "recompute_method": "block", "recompute_num_layers": 1},
)  # fmt: skip
"""QA's repro2: Megatron block recompute of one layer in each of the 10-layer stages."""

TITAN_EVERY = _doc(
    "llama3.1-70b", "h100-sxm-80gb", 64,
    {"seq_length": 8192, "global_batch_size": 256, "framework": "torchtitan"},
    parallel={"tp": 4, "pp": 8, "dp": 1, "cp": 2, "sequence_parallel": True,
              "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"},
    torchtitan={"selective_layer_every": 6},
)  # fmt: skip
"""QA's repro3: suggest's own torchtitan pick, every 6th layer recomputed, 0.6 GiB over."""

L70_GB200 = _doc(
    "llama3.1-70b", "gb200-nvl72", 32,
    {"seq_length": 8192, "global_batch_size": 128, "main_grad_dtype": "bf16",
     "attention_dropout": False, "hidden_dropout": False},
    parallel={"tp": 1, "pp": 1, "cp": 1, "sequence_parallel": False, "micro_batch_size": 1,
              "zero_stage": 3, "recompute": "none", "cpu_offloading_num_layers": 20,
              "tp_comm_overlap": False},
)  # fmt: skip
"""QA's repro4: the Bridge Llama 3 70B GB200 recipe, tp 1 with sequence_parallel = false."""

DSA = _doc(
    "deepseek-v3.2", "h100-sxm-80gb", 256,
    {"seq_length": 4096, "global_batch_size": 1024, "precision": "fp8",
     "fp8_recipe": "blockwise", "dsa_kernel_backend": "none"},
    parallel={"tp": 2, "pp": 16, "dp": 8, "ep": 8, "etp": 1, "vpp": 3,
              "sequence_parallel": True, "tp_comm_overlap": True, "micro_batch_size": 1,
              "zero_stage": 1, "recompute": "full", "recompute_method": "uniform",
              "recompute_num_layers": 1, "pipeline_layers": [4] * 15 + [1],
              "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
)  # fmt: skip
"""QA's repro6: DeepSeek-V3.2 on Megatron's dense sparse-attention path."""


def fastest(d: dict[str, Any], edits: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
    """The brute force: (step, edit) of the fastest edit of `d` that the rules take and that
    fits; (inf, {}) where none does."""
    best: tuple[float, dict[str, Any]] = (float("inf"), {})
    for e in edits:
        q = checked(doc(d, **e))
        if q is not None and fits(q) and step(q) < best[0]:
            best = (step(q), e)
    return best


def the(changes: list[Change], field: str) -> Change:
    (c,) = [c for c in changes if c.field == field]
    return c


def as_written(d: dict[str, Any], c: Change) -> float:
    """The change applied as its words say: the rules take it, it fits as it says, and its
    step."""
    q = checked(applied(d, c))
    assert q is not None, c.describe()
    assert fits(q) == c.fits, c.describe()
    return step(q)


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def test_a_vpp_change_under_a_named_torchtitan_schedule_carries_the_schedule() -> None:
    """repro1: `vpp 2 -> 1` was listed, and the plan so edited exits 2 (Interleaved1F1B takes
    two stages a rank at least: torchtitan_shapes.stages_wanted); the change names the schedule
    it runs with, and each listed change applies as written, fitting as it says."""
    changes = plan_changes(TITAN_VPP)
    assert checked(doc(TITAN_VPP, vpp=1)) is None  # the old words: refused
    vpp = the(changes, "vpp")
    assert vpp.describe() == "vpp 2 -> 1 (+ torchtitan.pipeline_schedule Interleaved1F1B -> 1F1B)"
    for c in changes:
        as_written(TITAN_VPP, c)
    edits = [{"vpp": 1, "torchtitan__pipeline_schedule": "1F1B"}]
    assert as_written(TITAN_VPP, vpp) == pytest.approx(fastest(TITAN_VPP, edits)[0])


@pytest.mark.parametrize("case", ["accounted", "layout string"])
def test_a_deeper_pipeline_is_offered_on_the_split_the_plan_gives(case: str) -> None:
    """repro5: the 405B recipe counting its embedding and loss as layers was offered no pp (a
    deeper pp was tried on the even split alone), though pp 16 fits and is the fastest change;
    and DeepSeek-V3's 16-stage layout string at pp 8 (vpp 2 derived) carries to pp 16 (vpp 1).
    The listed pp change is the brute force's fastest pp (every pp the GPUs divide into)."""
    d = copy.deepcopy(L405)
    if case == "layout string":
        d = _doc(
            "deepseek-v3", "h100-sxm-80gb", 1024,
            {"seq_length": 4096, "global_batch_size": 16384, "precision": "fp8",
             "main_grad_dtype": "bf16", "optimizer_state_dtype": "bf16",
             "fp8_recipe": "blockwise", "fp8_param_gather": False,
             "moe_router_num_groups": 8, "moe_router_group_topk": 4,
             "moe_router_force_load_balancing": True, "expandable_segments": True},
            parallel={"tp": 2, "pp": 8, "ep": 64, "etp": 1,
                      "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
                      "micro_batch_size": 1, "zero_stage": 1, "recompute": "selective",
                      "recompute_modules": ["mla_up_proj", "mlp"],
                      "moe_token_dispatcher_type": "flex",
                      "moe_flex_dispatcher_backend": "hybridep",
                      "moe_flex_dispatcher_num_sms": 32, "tp_comm_overlap": False,
                      "overlap_grad_reduce": False, "overlap_param_gather": False},
        )  # fmt: skip
        d["cluster"]["memory_gib"] = 61.896  # QA's tightened copy of the Bridge recipe
    base = checked(d)
    assert base is not None
    lay = base.require_layout()
    rest = lay.dp * lay.pp
    pp = the(plan_changes(d), "pp")
    best = fastest(d, [{"pp": p, "dp": None} for p in divisors(rest) if p != lay.pp])
    assert pp.fits and best[1]["pp"] == pp.after
    assert as_written(d, pp) == pytest.approx(best[0])


@pytest.mark.parametrize("method", ["block", "uniform"])
def test_partial_megatron_recompute_is_moved_to_more_layers(method: str) -> None:
    """repro2: block recompute of 1 layer a stage, 9 GiB over; only vpp was offered (71.1 s in
    QA's run) where 3 layers recomputed fit at 68.0 s. Uniform recompute in groups of all 10
    layers of a stage, GPU memory cut to 47 GiB: smaller groups keep more inputs and rebuild
    fewer layers at once, and were never tried. The listed recompute_num_layers is the brute
    force's fastest over every count up to the stage's 80 / 8 = 10 layers."""
    d = L70_BLOCK
    if method == "uniform":
        d = doc(L70_BLOCK, recompute_method="uniform", recompute_num_layers=10)
        d["cluster"]["memory_gib"] = 47
    base = checked(d)
    assert base is not None and not fits(base)
    c = the(plan_changes(d), "recompute_num_layers")
    was = base.require_layout().recompute_num_layers
    best = fastest(d, [{"recompute_num_layers": n} for n in range(1, 11) if n != was])
    assert c.fits and as_written(d, c) == pytest.approx(best[0])
    if method == "block":  # the model prices the uniform counts alike: any that fits
        assert best[1]["recompute_num_layers"] == c.after


def test_torchtitan_every_n_recompute_is_moved_to_more_layers() -> None:
    """repro3: every 6th layer recomputed, 0.6 GiB over: nothing was listed (JSON changes []),
    though every 5th fits. The listed selective_layer_every is the brute force's fastest over
    1..5 (1: every layer, torchtitan's full checkpointing)."""
    changes = plan_changes(TITAN_EVERY)
    c = the(changes, "torchtitan.selective_layer_every")
    best = fastest(TITAN_EVERY, [{"torchtitan__selective_layer_every": n} for n in range(1, 6)])
    assert c.fits and best[1]["torchtitan__selective_layer_every"] == c.after
    assert as_written(TITAN_EVERY, c) == pytest.approx(best[0])


def test_an_empty_change_list_says_no_single_change_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check printed nothing under "does not fit" where no change saved memory (repro3's JSON
    changes: []): it says so. Llama 3.1 405B on one H100 with every layer recomputed in groups
    of 3 (the group count of the least memory) and the whole optimizer on the host (a larger
    share of it there is a change too, `advice_offload.raised`, which saves where the host holds
    some) saves nothing by any single change: the JSON's list is empty, and the text says that
    no single change makes it fit."""
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-405b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 1\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 1\noptimizer_offload_fraction = 1.0\n"
        "[parallel]\ntp = 1\npp = 1\n"
        'micro_batch_size = 1\nzero_stage = 3\nrecompute = "full"\nrecompute_method = "uniform"\n'
        "recompute_num_layers = 3\n"
    )
    code, out, _ = run(["check", str(path), "--json"], capsys)
    assert code == 1 and json.loads(out)["changes"] == []
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1 and "No single change makes it fit." in out


def test_tp_from_1_keeps_sequence_parallelism_off_where_that_is_faster() -> None:
    """repro4: `tp 1 -> 2 (+ dp 32 -> 16 + sequence_parallel)` at 11.454 s in QA's run, where
    tp 2 with sequence_parallel = false (as the plan sets it) fits at 11.289 s. The listed tp is
    the brute force's fastest over every tp, each with sequence parallelism on and off."""
    changes = plan_changes(L70_GB200)
    tp = the(changes, "tp")
    edits = [{"tp": t, "sequence_parallel": sp} for t in divisors(32)[1:] for sp in (True, False)]
    best = fastest(L70_GB200, edits)
    assert tp.fits and (best[1]["tp"], best[1]["sequence_parallel"]) == (
        tp.after,
        tp.layout.sequence_parallel,
    )
    assert ("sequence_parallel" in tp.also) and as_written(L70_GB200, tp) == pytest.approx(best[0])
    # the plan file leaving sequence_parallel out takes it on at tp > 1: the words say which
    left_out = doc(L70_GB200, sequence_parallel=None)
    assert as_written(left_out, the(plan_changes(left_out), "tp")) == pytest.approx(best[0])


@pytest.mark.parametrize("case", ["every 6", "405B"])
def test_pp_is_given_back_to_dp(case: str) -> None:
    """repro3 (torchtitan, ZeRO 3 at pp 8, dp 1: torch keeps a pipelined stage's parameters
    gathered, so pp 1 with dp 8 shards them eight ways) and torchtitan's 405B example at pp 8
    with GPU memory cut to 44.753 GiB (QA's tt405_t25): pp was only ever made deeper. The
    listed pp change is the brute force's fastest pp."""
    d = TITAN_EVERY
    if case == "405B":
        d = _doc(
            "llama3.1-405b", "h100-sxm-80gb", 512,
            {"framework": "torchtitan", "seq_length": 8192, "global_batch_size": 512,
             "precision": "fp8"},
            parallel={"tp": 8, "pp": 8, "micro_batch_size": 1, "zero_stage": 3,
                      "recompute": "full"},
            torchtitan={"compile": True, "async_tp": True, "float8_all_gather": True},
        )  # fmt: skip
        d["cluster"]["memory_gib"] = 44.753
    base = checked(d)
    assert base is not None
    lay = base.require_layout()
    pp = the(plan_changes(d), "pp")
    choices = [p for p in divisors(lay.dp * lay.pp) if p != lay.pp]
    best = fastest(d, [{"pp": p, "dp": None} for p in choices])
    assert pp.fits and best[1]["pp"] == pp.after and best[1]["pp"] < lay.pp
    assert as_written(d, pp) == pytest.approx(best[0])


def test_one_entry_per_setting_the_sparse_kernels_too() -> None:
    """repro6: both `dsa_kernel_backend none -> cudnn` and `none -> tilelang` were listed; one
    entry a setting, the sparse kernels' the faster of the two that fit (brute force)."""
    changes = plan_changes(DSA)
    fields = [c.field for c in changes]
    assert len(fields) == len(set(fields))
    c = the(changes, "training.dsa_kernel_backend")
    best = fastest(DSA, [{"training__dsa_kernel_backend": k} for k in ("tilelang", "cudnn")])
    assert best[1]["training__dsa_kernel_backend"] == c.after
    assert as_written(DSA, c) == pytest.approx(best[0])
