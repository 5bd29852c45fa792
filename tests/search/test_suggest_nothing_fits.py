"""`planner suggest` when nothing fits (exit 1, the binding constraint and a change that would
fit) and on impossible requests (exit 2 naming the contradiction, no traceback).

Oracles: the contract of DESIGN.md section 2; Megatron-LM's rules and hand arithmetic in the
comments for why each job has no layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO
from suggest_runs import suggest_json

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
    unfused none in FP8), whatever the layout: a rule on the job alone, refused before the search
    as `check` refuses it (exit 2, naming the file and the plan field); on B200 the same job
    plans."""
    job = tmp_path / "job.toml"
    job.write_text(
        '[model]\nname = "gpt-oss-20b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 16\n"
        'precision = "fp8"\nfp8_attention = true\n'
    )
    code, out, err = run(["suggest", str(job), "--json"], capsys)
    assert code == 2, err
    assert out == "" and f"{job}: training.fp8_attention: " in err, err
    assert suggest_json([str(job), "--gpu", "b200-sxm-180gb"], capsys)["candidates"]


def test_nothing_runs_past_learned_positions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sequence longer than a learned-position model's table (SC21's 1.7B GPT: 2,048
    positions, learned_absolute) runs in no layout: suggest refuses it as check does (exit 2, the
    rule `positions`, naming the field), rather than writing a plan that check then refuses; at
    2,048 tokens the plan it writes passes check."""
    argv = ["suggest", "--model", "gpt-sc21-1.7b", "--num-gpus", "8", "--global-batch-size", "64"]
    code, out, err = run([*argv, "--seq-length", "4096", "--json"], capsys)
    assert code == 2, err
    assert out == "" and "<flags>: training.seq_length: " in err, err
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
