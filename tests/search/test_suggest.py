"""`planner suggest` as a user runs it: the bundled default, --json (DESIGN.md section 2),
--write-plan round trips through check / explain / launch, nothing fits (exit 1, the binding
constraint and a change that would fit), impossible requests (exit 2 naming the contradiction).

Most checks run `planner.cli.main(argv)` in-process; the default-job check runs `python -m planner`
in a subprocess to see exactly what a user's shell sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import STAGE_KEYS, run
from paths import REPO

from planner.search import top_k as search
from planner.search.space import Space
from planner.search.twins import fold

PLANS = REPO / "tests" / "data" / "plans"

PERF_KEYS = {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"}
LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero_stage", "recompute")


def suggest_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["suggest", *argv, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


# ----------------------------------------------------------------------------- the default job


def test_no_arguments_plans_the_bundled_default() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "planner", "suggest"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    err = " ".join(p.stderr.split())  # rich wraps stderr lines at 80 columns when piped
    assert "bundled default" in err
    assert "llama3.1-8b" in err and "h100-sxm-80gb" in err
    assert "Top 5 layouts" in p.stdout
    assert "certified" in p.stdout
    assert "Traceback" not in p.stderr + p.stdout


def test_json_is_one_document_with_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json([], capsys)
    cands = data["candidates"]
    assert len(cands) == 5
    for c in cands:
        assert c["fits"] is True
        par = c["parallel"]
        assert par["tp"] * par["pp"] * par["cp"] * par["dp"] == 8
        for key in (*LAYOUT_KEYS, "sequence_parallel", "pipeline_layers"):
            assert key in par
        mem = c["memory"]
        assert 0 < mem["peak_gib"] <= mem["capacity_gib"]
        assert mem["stages"] and all(set(st) >= STAGE_KEYS for st in mem["stages"])
        assert len(mem["stages"]) == par["pp"]
        assert set(c["performance"]) >= PERF_KEYS
        assert "params_total" in c["model"] and "params_active" in c["model"]
    times = [c["performance"]["step_time_s"] for c in cands]
    assert times == sorted(times)
    assert data["search"]["certified"] is True
    assert data["search"]["space_size"] >= data["search"]["scored"] > 0
    assert data["job"]["num_gpus"] == 8 and data["job"]["global_batch_size"] == 128


def test_json_top_pick_is_the_library_search(capsys: pytest.CaptureFixture[str]) -> None:
    """The candidates are the first rows of the library's whole ranking, folded (twins: same
    step time, cp traded for micro-batch size; tests/search/test_twins.py)."""
    from planner.inputs.job_request import DEFAULT_JOB
    from planner.inputs.plan import parse_plan

    data = suggest_json(["--top", "3"], capsys)
    rows = fold(search.search(parse_plan(DEFAULT_JOB).job, Space(), top_k=10**6).candidates)
    assert len(data["candidates"]) == 3
    for c, row in zip(data["candidates"], rows, strict=False):
        assert all(c["parallel"][k] == getattr(row.candidate.layout, k) for k in LAYOUT_KEYS)
        assert len(c["equivalents"]) == len(row.equivalents)
        for e, twin in zip(c["equivalents"], row.equivalents, strict=True):
            assert all(e["parallel"][k] == getattr(twin.layout, k) for k in LAYOUT_KEYS)


# ----------------------------------------------------------------------------- twins folded

LONG = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
LONG += ["--seq-length", "32768", "--global-batch-size", "64"]
"""A job (8k-token sequences 4 x longer than the default's, 16 GPUs) whose top 5 without folding
holds twins: layouts that trade cp for micro-batch size at one step time."""


def test_twins_fold_into_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(LONG, capsys)
    cands = data["candidates"]
    assert len(cands) == 5  # still --top rows, now distinct

    def key(par: dict[str, Any]) -> tuple[Any, ...]:
        # what trading cp for micro-batch size keeps (planner.search.suggest.twin_key)
        rest = {k: v for k, v in par.items() if k not in ("cp", "dp", "micro_batch_size")}
        return (sorted(rest.items()), par["dp"] * par["cp"], par["micro_batch_size"] / par["cp"])

    shown = [(key(c["parallel"]), c["performance"]["step_time_s"]) for c in cands]
    assert len(set(map(str, shown))) == 5  # no two rows are twins
    for c in cands:
        for e in c["equivalents"]:
            assert key(e["parallel"]) == key(c["parallel"])
            # the same micro-batches: 64 sequences / (dp x micro-batch size), either layout's
            par = c["parallel"]
            count = 64 // (par["dp"] * par["micro_batch_size"])
            assert e["parallel"]["num_microbatches"] == par["num_microbatches"] == count
            assert 0 < e["memory"]["peak_gib"] <= c["memory"]["capacity_gib"]
    twinned = [(i, c) for i, c in enumerate(cands, 1) if c["equivalents"]]
    assert twinned
    code, out, err = run(["suggest", *LONG], capsys)
    assert code == 0, err
    for i, c in twinned:  # the table's footnote names each row's twins on the row's line
        line = next(x for x in out.splitlines() if x.strip().startswith(f"#{i} also: "))
        for e in c["equivalents"]:
            p = e["parallel"]
            assert f"cp {p['cp']} x mbs {p['micro_batch_size']} (dp {p['dp']}," in line
    assert "#1 and #2 predict the same step time" not in out


def test_nodes_counts_gpus_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(["--nodes", "2", "--top", "1"], capsys)
    assert data["job"]["num_gpus"] == 16
    par = data["candidates"][0]["parallel"]
    assert par["tp"] * par["pp"] * par["cp"] * par["dp"] == 16


def test_pins_and_bounds_are_respected(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(
        ["--nodes", "2", "--tp", "2", "--max-pp", "2", "--zero", "1", "--recompute", "none,full"],
        capsys,
    )
    for c in data["candidates"]:
        par = c["parallel"]
        assert par["tp"] == 2 and par["pp"] <= 2 and par["zero_stage"] == 1
        assert par["recompute"] in ("none", "full")


def test_long_search_reports_progress_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress lines go to stderr (every 0.5 s of search); stdout stays one JSON document."""

    class SlowClock:
        t = 0.0

        def perf_counter(self) -> float:
            self.t += 1.0
            return self.t

    monkeypatch.setattr(search, "time", SlowClock())
    code, out, err = run(["suggest", "--json", "--nodes", "2"], capsys)
    assert code == 0, err
    assert "searched" in err and "structures" in err
    assert json.loads(out)["candidates"]


# ----------------------------------------------------------------------------- --write-plan


def _round_trip(
    argv: list[str], plan: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """suggest --write-plan, then check and explain the written file: (suggested, checked)."""
    code, out, err = run(["suggest", *argv, "--json", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    top = json.loads(out)["candidates"][0]
    assert plan.is_file()
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    code, out, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    explained = json.loads(out)
    assert explained["parallel"] == checked["parallel"]
    return top, checked


def _same_layout(top: dict[str, Any], checked: dict[str, Any]) -> None:
    extra = ("pipeline_layers", "sequence_parallel", "tp_comm_overlap", "ep_comm_overlap")
    extra += ("overlap_grad_reduce",)
    for key in (*LAYOUT_KEYS, *extra, "overlap_param_gather"):
        assert checked["parallel"][key] == top["parallel"][key], key
    assert checked["fits"] is True
    assert checked["memory"]["peak_gib"] == top["memory"]["peak_gib"]
    assert checked["performance"]["step_time_s"] == top["performance"]["step_time_s"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--model", "mixtral-8x7b", "--num-gpus", "16", "--seq-length", "4096"],
        # the EP all-to-all overlap on top: the plan keeps it and launch passes Megatron's flags
        [
            *("--model", "mixtral-8x7b", "--num-gpus", "64", "--seq-length", "4096"),
            *("--global-batch-size", "256"),
        ],
        # an uneven split on top (micro-batches of 1: Llama 3.1 8B's output layer, 4096 x
        # 128,256 = 525M weights, is 2.4 of its 218M-weight layers, so the last rank gives up
        # layers: 17 / 15): pipeline_layers must survive the round trip
        [
            *("--model", "llama3.1-8b", "--num-gpus", "16", "--seq-length", "4096"),
            *("--global-batch-size", "64", "--tp", "2", "--pp", "2", "--vpp", "1", "--no-cp"),
            *("--mbs", "1"),
        ],
        [str(PLANS / "hf-llama2-7b.toml")],  # hf_config relative to the job file
        [str(PLANS / "inline-overrides.toml"), "--max-pp", "2"],  # inline model, tier overrides
        # every non-Megatron switch and GPU-variant override must survive the round trip
        [str(PLANS / "torchtitan-style.toml"), "--max-pp", "2", "--recompute", "selective"],
        # forced-balance routing and partial CUDA graphs too
        [str(PLANS / "moe-forced-graphs.toml"), "--max-pp", "2"],
    ],
    ids=[
        *("default", "moe", "moe-ep-overlap", "uneven"),
        *("hf-config", "inline-overrides", "torchtitan-style", "moe-forced-graphs"),
    ],
)
def test_write_plan_round_trips(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "sub" / "plan.toml"
    plan.parent.mkdir()
    top, checked = _round_trip(argv, plan, capsys)
    _same_layout(top, checked)
    if "--pp" in argv:
        assert top["parallel"]["pipeline_layers"] == [17, 15]
    if "--recompute" in argv:
        text = plan.read_text()
        for line in (
            "power_limit_w = 500",
            "hbm_bandwidth_tb_per_s = 2.4",
            'optimizer_state_dtype = "bf16"',
            "fused_norm = false",
            "fused_swiglu = false",
            'cross_entropy = "pytorch"',
            'selective_recompute = "per_op"',
            "sp_keeps_gathered_input = true",
            "tp_backward_overlap = false",
        ):
            assert line in text, line
        assert top["parallel"]["recompute"] == "selective"
    code, out, err = run(["launch", str(plan), "--target", "megatron-args"], capsys)
    assert code == 0, err
    assert f"--tensor-model-parallel-size {top['parallel']['tp']}" in out
    if argv and argv[0].endswith("moe-forced-graphs.toml"):
        text = plan.read_text()
        assert "moe_router_force_load_balancing = true" in text
        assert 'cuda_graph_modules = ["attn", "moe_router", "moe_preprocess"]' in text
        assert "--moe-router-force-load-balancing" in out
        assert "--cuda-graph-modules attn moe_router moe_preprocess" in out
    overlapped = "--overlap-moe-expert-parallel-comm" in out
    assert overlapped == top["parallel"]["ep_comm_overlap"]
    if "256" in argv:
        assert overlapped
    assert f"--pipeline-model-parallel-size {top['parallel']['pp']}" in out


def test_write_plan_names_the_launch_targets_that_refuse_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gemma 2's gated GELU MLP has no flag in Megatron-LM's pretrain_gpt.py, while a
    Megatron-Bridge recipe runs it: suggest writes the plan and says, on stderr, which launch
    targets refuse it. Oracle: `planner launch` itself, target by target."""
    plan = tmp_path / "gemma.toml"
    argv = ["suggest", "--model", "gemma2-2b", "--seq-length", "4096", "--write-plan", str(plan)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    err = err.replace("\n", " ")
    assert "note: launch --target megatron-args, torchrun, slurm, k8s refuses this plan" in err
    assert "geglu" in err and "megatron-bridge" not in err
    for target, refused in (("megatron-args", True), ("k8s", True), ("megatron-bridge", False)):
        code, _, launch_err = run(["launch", str(plan), "--target", target], capsys)
        assert code == (2 if refused else 0), (target, launch_err)
    assert "run Megatron-LM, which refuses" not in err  # no loss note where they refuse it
    # a plan every target writes gets no refusal note
    code, _, err = run(["suggest", "--write-plan", str(tmp_path / "llama.toml")], capsys)
    assert code == 0 and "refuses this plan" not in err


def test_write_plan_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text("# mine\n")
    code, out, err = run(["suggest", "--write-plan", str(plan)], capsys)
    assert code == 2
    assert "--force" in err and str(plan) in err
    assert plan.read_text() == "# mine\n"
    code, out, err = run(["suggest", "--write-plan", str(plan), "--force"], capsys)
    assert code == 0, err
    assert "[parallel]" in plan.read_text()
    assert f"wrote {plan}" in out.replace("\n", "")


# ----------------------------------------------------------------------------- nothing fits


def test_nothing_fits_names_the_binding_constraint(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suggest", "--model", "llama3.1-405b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, out, err = run(argv, capsys)
    assert code == 1, err
    assert "nothing fits" in out and "memory" in out
    assert "GPUs instead of 8" in out  # more GPUs
    assert "GiB each" in out  # more memory
    assert "Traceback" not in out + err
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 1
    data = json.loads(out)
    assert data["candidates"] == []
    assert data["binding"].startswith("memory")
    assert any("GPUs instead of 8" in c for c in data["changes"])


def test_selective_recompute_alone_finds_what_it_finds_beside_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--recompute selective` holds the first layout of `--recompute selective,full` where that
    one recomputes selectively, so it finds it (oracle: that search). An optimality fuzzer's
    DeepSeek-V3 on 256 H800 (tp 2, pp 16 x vpp 2) said nothing fits: the pruning took full
    recompute for the leanest rung, and without it a selective one (MLA's up-projection and the
    MoE layers) is the leanest (`rungs.leanest`)."""
    job = ["suggest", "--model", "deepseek-v3", "--gpu", "h800-sxm-80gb", "--num-gpus", "256"]
    job += ["--seq-length", "4096", "--global-batch-size", "1024", "--tp", "2", "--pp", "16"]
    job += ["--vpp", "2", "--top", "1", "--json"]
    code, out, err = run([*job, "--recompute", "selective,full"], capsys)
    assert code == 0, err
    both = json.loads(out)["candidates"][0]
    assert both["parallel"]["recompute"] == "selective"
    code, out, err = run([*job, "--recompute", "selective"], capsys)
    assert code == 0, err
    alone = json.loads(out)["candidates"][0]
    assert alone["performance"]["step_time_s"] == both["performance"]["step_time_s"]
    assert alone["parallel"]["recompute_modules"] == both["parallel"]["recompute_modules"]


def test_muon_with_only_fsdp_stages_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Megatron's Muon runs without Megatron-FSDP (rules.muon), so `--zero 2` leaves it no stage:
    exit 2 naming the option and the optimizer (the search had filtered the stages to none and
    the structure rule then took the least of nothing: an internal error)."""
    job = tmp_path / "job.toml"
    job.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        '[training]\nseq_length = 4096\nglobal_batch_size = 64\noptimizer = "muon"\n'
    )
    code, out, err = run(["suggest", str(job), "--zero", "2,3"], capsys)
    assert code == 2, out
    assert "--zero 2,3: Megatron's Muon optimizer runs without Megatron-FSDP" in err
    assert "internal error" not in err


def test_a_pinned_fsdp_pipeline_names_the_rule_not_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A layout pinned with ZeRO 2 and pipelines and context parallelism, which the search
    leaves out (space.zero_stages) though `check` takes it: the reason named first is that rule,
    not memory (a fuzzer's pinned Llama 3.1 70B, tp 4 pp 4 cp 2, said "memory: 1" and offered
    a larger global batch, which changes nothing). No layout of the search's space is within
    those flags at all, so it is bad input (exit 2) naming them (`search.pins`)."""
    argv = ["suggest", "--model", "llama3.1-70b", "--num-gpus", "128", "--global-batch-size"]
    argv += ["512", "--tp", "4", "--pp", "4", "--cp", "2", "--mbs", "2", "--zero", "2"]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "", err
    flat = " ".join(err.split())
    assert "--zero 2 with --tp 4 --cp 2 --pp 4: the search runs Megatron-FSDP (ZeRO 2, 3)" in flat
    assert "memory" not in flat and "global_batch_size" not in flat


def test_nothing_fits_with_only_zero_stages_some_bases_cannot_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--zero 3 alone: the layouts with pipelines (which Megatron-FSDP does not run) take no
    ZeRO stage of the space, and the explanation skips them (it asked the most sharding of an
    empty list: a fuzzer's internal error). The leanest layout is a ZeRO 3 one, and more GPUs
    are offered (the states sharded further)."""
    argv = ["suggest", "--model", "llama3.1-405b", "--num-gpus", "8", "--zero", "3"]
    code, out, err = run(argv, capsys)
    assert code == 1, err
    assert "internal error" not in err
    assert "nothing fits: memory" in out and "zero3" in out
    assert "GPUs instead of 8" in out


def test_nothing_fits_names_a_job_no_layout_can_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt-oss's attention sinks in FP8 attention on H100: Transformer Engine has no backend
    (get_attention_backend: the fused one needs compute capability 10.0 for sinks in FP8, the
    unfused none in FP8), whatever the layout. The search rejects every structure by that rule
    and says why, naming the plan field; on B200 the same job plans."""
    job = tmp_path / "job.toml"
    job.write_text(
        '[model]\nname = "gpt-oss-20b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 16\n"
        'precision = "fp8"\nfp8_attention = true\n'
    )
    code, out, err = run(["suggest", str(job), "--json"], capsys)
    assert code == 1, err
    binding = json.loads(out)["binding"]
    assert "sinks_fp8" in binding and "training.fp8_attention" in binding
    assert suggest_json([str(job), "--gpu", "b200-sxm-180gb"], capsys)["candidates"]


def test_nothing_runs_past_learned_positions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sequence longer than a learned-position model's table (SC21's 1.7B GPT: 2,048
    positions, learned_absolute) runs in no layout: suggest says so, naming the field, rather than
    writing a plan that check then refuses (exit 2, the rule `positions`); at 2,048 tokens the
    plan it writes passes check."""
    argv = ["suggest", "--model", "gpt-sc21-1.7b", "--num-gpus", "8", "--global-batch-size", "64"]
    code, out, err = run([*argv, "--seq-length", "4096", "--json"], capsys)
    assert code == 1, err
    binding = json.loads(out)["binding"]
    assert "max_positions" in binding and "training.seq_length" in binding
    plan = tmp_path / "plan.toml"
    code, out, err = run([*argv, "--seq-length", "2048", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    code, out, err = run(["check", str(plan)], capsys)
    assert code == 0, out + err


def test_nothing_fits_offers_a_shorter_sequence(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suggest", "--model", "llama3.1-70b", "--num-gpus", "16", "--seq-length", "131072"]
    code, out, err = run([*argv, "--global-batch-size", "16", "--no-cp", "--json"], capsys)
    assert code == 1, err
    changes = json.loads(out)["changes"]
    assert any(c.startswith("seq_length") and "instead of 131072" in c for c in changes)


def test_nothing_passes_the_schedule_offers_a_batch_that_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Interleaving needs at least pp micro-batches: 2 sequences cannot feed pp 4 with vpp 2."""
    argv = ["suggest", "--global-batch-size", "2", "--pp", "4", "--vpp", "2", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 1, err
    data = json.loads(out)
    assert "schedule" in data["binding"]
    assert data["changes"] == ["global_batch_size 4 instead of 2"]


def test_no_batch_change_offered_when_none_helps(capsys: pytest.CaptureFixture[str]) -> None:
    """pp 2 x vpp 17 = 34 virtual stages are more than Llama 3.1 8B's 32 layers: the search
    interleaves at most L / pp chunks per rank (16 here, in any split form), and a bigger batch
    would not help either: bad input (exit 2, `search.pins`), naming the flags and the bound."""
    code, out, err = run(["suggest", "--pp", "2", "--vpp", "17", "--json"], capsys)
    assert code == 2 and out == "", err
    assert "--vpp 17 with --pp 2" in err and "vpp at most 16 at pp 2" in err


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--tp", "16"], ["--tp 16", "num_gpus (8)"]),
        (["--tp", "8", "--max-tp", "4"], ["--tp 8", "--max-tp 4"]),
        (["--num-gpus", "512", "--dp", "256", "--global-batch-size", "128"], ["--dp 256", "128"]),
        (["--dp", "256", "--global-batch-size", "128"], ["--dp 256"]),
        (["--zero", "5"], ["--zero", "'5'"]),
        (["--recompute", "bogus"], ["--recompute", "'bogus'"]),
        (["--tp", "0"], ["--tp", "'0'"]),
        (["--pp", "1-x"], ["--pp", "'1-x'"]),
        (["--tp", "8", "--pp", "2"], ["--tp 8", "--pp 2", "16", "num_gpus is 8"]),
        (["--dp", "3"], ["--dp 3", "num_gpus (8)"]),
        (["--ep", "2"], ["--ep 2", "no experts"]),
        (["--num-gpus", "64", "--pp", "64"], ["--pp 64", "num_layers (32)"]),
        # a virtual stage holds a layer at least; a micro-batch is a slice of the global batch
        (["--vpp", "33"], ["--vpp 33", "num_layers (32)"]),
        (["--mbs", "129-"], ["--mbs 129", "global_batch_size (128)"]),
        (["--nodes", "2", "--num-gpus", "16"], ["--nodes", "--num-gpus"]),
        (["--headroom", "100"], ["--headroom"]),
        (["--model", "no-such-model"], ["--model: unknown model 'no-such-model'"]),
        (["--gpu", "no-such-gpu"], ["--gpu: unknown GPU 'no-such-gpu'"]),
        (["--precision", "fp9"], ["--precision:", '(got "fp9")']),
        (["--gpu", "a100-sxm-80gb", "--precision", "fp8"], ['--precision: "fp8"', "a100-sxm-80gb"]),
    ],
)
def test_impossible_requests_exit_2(
    argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["suggest", *argv], capsys)
    assert code == 2, (out, err)
    assert out == ""
    assert err.startswith("planner: error:")
    assert "Traceback" not in err
    for name in names:
        assert name in err, (name, err)


def test_bad_input_in_a_subprocess_has_no_traceback() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "planner", "suggest", "--tp", "8", "--max-tp", "4", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert p.stdout == ""
    assert "contradicts" in p.stderr and "Traceback" not in p.stderr


def test_write_plan_repeats_the_warnings_check_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama 3.1 70B on 64 H100 at 8,192 tokens: the pick runs Megatron-FSDP with tp 8, which
    Megatron warns about (CUDA_DEVICE_MAX_CONNECTIONS); suggest said nothing of it. Oracle:
    `planner check` on the written plan, whose warning lines suggest now prints as they are."""
    plan = tmp_path / "w.toml"
    argv = ["suggest", "--model", "llama3.1-70b", "--num-gpus", "64", "--seq-length", "8192"]
    # --zero 2,3: the pick ran Megatron-FSDP unasked until its ZeRO 2 reduce-scattered every
    # micro-batch (megatron_fsdp.py:761-787 at d98e8a64)
    argv += ["--zero", "2,3"]
    code, _, err = run([*argv, "--global-batch-size", "512", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    code, _, checked = run(["check", str(plan)], capsys)
    assert code == 0
    warnings = [line for line in checked.splitlines() if line.startswith("planner: warning:")]
    assert warnings
    for line in warnings:
        assert line in err
