"""`planner launch` (planner.emit.launch and the CLI command): stdout or --out DIR, --force,
--job-name, exit 2 on bad input; and the header's prediction is planner.model.cost /
planner.model.memory's."""

from __future__ import annotations

import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES, PLANS

from planner import __version__
from planner.emit.launch import FRAMEWORK, TARGETS, launch, render
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.model import cost, memory

PLAN = PLANS / "launch-llama3.1-70b.toml"
MEGATRON_TARGETS = sorted(t for t in TARGETS if t not in FRAMEWORK)
"""The targets of a Megatron-LM plan (PLAN); torchtitan's: tests/emit/test_emit_torchtitan.py."""


@pytest.mark.parametrize("target", MEGATRON_TARGETS)
def test_stdout_is_the_rendered_file(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["launch", str(PLAN), "--target", target], capsys)
    assert code == 0, err
    assert out == render(load_plan(PLAN), target)[1]
    first = out.splitlines()[1 if out.startswith("#!") else 0]
    assert first.startswith(f"# planner {__version__}: {target} launch file")
    assert "'launch-llama3.1-70b'" in first  # the default job name: the plan file's stem


@pytest.mark.parametrize("target", MEGATRON_TARGETS)
def test_out_dir_then_force(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "new" / "dir"
    argv = ["launch", str(PLAN), "--target", target, "--out", str(out_dir)]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    written = out_dir / TARGETS[target][1]
    assert out.strip() == str(written)
    assert written.read_text() == render(load_plan(PLAN), target)[1]
    if target in ("torchrun", "slurm"):
        assert written.stat().st_mode & stat.S_IXUSR
    written.write_text("mine")
    code, out, err = run(argv, capsys)
    assert code == 2
    assert str(written) in err and "--force" in err and "Traceback" not in err
    assert written.read_text() == "mine"
    code, out, err = run([*argv, "--force", "--job-name", "other job"], capsys)
    assert code == 0, err
    assert "'other job'" in written.read_text()


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["launch", str(PLAN), "--target", "docker"], capsys)
    assert code == 2 and "--target" in err and "megatron-args" in err
    code, _, err = run(["launch", str(PLANS / "no-parallel.toml"), "--target", "slurm"], capsys)
    assert code == 2 and "parallel" in err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    argv = ["launch", str(PLAN), "--target", "k8s", "--out", str(a_file)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "not a directory" in err
    code, _, err = run(["launch", str(PLAN), "--target", "k8s", "--job-name", "???"], capsys)
    assert code == 2 and "job-name" in err


def test_target_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["launch", str(PLAN)], capsys)
    assert code == 2 and "--target" in err


def test_launch_returns_what_it_wrote(tmp_path: Path) -> None:
    done = launch(PLAN, "megatron-args", tmp_path, job_name="j")
    assert done.path == tmp_path / "megatron-args.txt"
    assert done.path.read_text() == done.text
    assert launch(PLAN, "megatron-args").path is None


def test_header_prediction_is_the_cost_and_memory_models() -> None:
    plan = load_plan(PLAN)
    assert plan.layout is not None
    perf = cost.estimate(plan.job, plan.layout)
    rep = memory.estimate(plan.job, plan.layout)
    text = render(plan, "megatron-args")[1]
    m = re.search(
        r"^# predicted: step ([\d.]+) s, ([\d.]+) tokens/s/GPU, MFU ([\d.]+)% of the bf16 peak, "
        r"peak memory ([\d.]+) GiB of ([\d.]+) GiB usable \((fits)\); ([\d.]+) GiB with the "
        r"expandable segments its environment sets",
        text,
        flags=re.M,
    )
    assert m, text
    assert float(m.group(1)) == pytest.approx(perf.step_time_s, abs=5e-4)
    assert float(m.group(2)) == pytest.approx(perf.tokens_per_s_per_gpu, abs=0.05)
    assert float(m.group(3)) == pytest.approx(100 * perf.mfu, abs=0.05)
    assert float(m.group(4)) == pytest.approx(rep.peak / 2**30, abs=0.05)
    assert float(m.group(5)) == pytest.approx(rep.capacity / 2**30, abs=0.05)
    # a ZeRO-1 plan counted without expandable segments, launched with them (a QA pass found
    # the script read back 4-6% under its own header, unsaid): the second peak is that job's
    assert not plan.job.expandable_segments and plan.layout.zero_stage < 2
    grown = memory.estimate(replace(plan.job, expandable_segments=True), plan.layout)
    assert float(m.group(7)) == pytest.approx(grown.peak / 2**30, abs=0.05)
    assert grown.peak < rep.peak


def test_header_labels_both_mfus_of_an_fp8_plan() -> None:
    """An FP8 plan's header gives MFU against the bf16 peak and the FP8 one, each labelled.
    Oracle: H800's catalog peaks (dense bf16 989, FP8 1979 TFLOP/s), so the FP8 figure is
    989 / 1979 of the bf16 one, and the bf16 one is the Performance's own."""
    plan = load_plan(EXAMPLES / "deepseek-v3-h800.toml")
    assert plan.layout is not None and plan.job.precision == "fp8"
    perf = cost.estimate(plan.job, plan.layout)
    text = render(plan, "megatron-args")[1]
    m = re.search(r"MFU ([\d.]+)% of the bf16 peak, ([\d.]+)% of the FP8 peak, ", text)
    assert m, text
    bf16, fp8 = float(m.group(1)), float(m.group(2))
    assert bf16 == pytest.approx(100 * perf.mfu_bf16_peak, abs=0.05)
    assert fp8 == pytest.approx(bf16 * 989 / 1979, abs=0.06)


def test_a_plan_that_does_not_fit_says_so() -> None:
    plan = load_plan(PLANS / "launch-llama3.1-405b.toml")
    assert plan.layout is not None
    tight = plan.layout.with_(cp=1, dp=128, recompute="none")
    text = render(plan.__class__(plan.job, tight, plan.path), "torchrun")[1]
    assert "DOES NOT FIT (worst: stage" in text


def test_header_comments_cannot_be_broken_by_names() -> None:
    name = "x\nexport EVIL=1\r\n# y \u2028z"
    for target in MEGATRON_TARGETS:
        text = render(load_plan(PLAN), target, name)[1]
        lines = text.splitlines()
        first = lines[1] if lines[0].startswith("#!") else lines[0]
        assert first.endswith("'x\\nexport EVIL=1\\r\\n# y \\u2028z' from launch-llama3.1-70b.toml")
        # the header is one comment block, then the file's own first line
        start = lines.index(first)
        assert all(ln.startswith("# ") for ln in lines[start : start + 4])


def test_unwritable_out_dir_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    argv = ["launch", str(PLAN), "--target", "k8s", "--out", str(a_file / "sub")]
    code, _, err = run(argv, capsys)
    assert code == 2 and "cannot write" in err and "Traceback" not in err


def test_a_pools_plan_is_offered_only_the_targets_that_take_pools() -> None:
    """--target torchtitan on a Megatron plan over pools listed k8s and megatron-bridge among
    the targets for it, both of which refuse pools."""
    plan = load_plan(EXAMPLES / "pools-llama3.1-70b-h100-a100-plan.toml")
    with pytest.raises(InputError, match=r"targets for it: megatron-args, torchrun, slurm\)"):
        render(plan, "torchtitan")
    for target in ("k8s", "megatron-bridge"):
        with pytest.raises(InputError, match="cannot place pipeline ranks on pools"):
            render(plan, target)


def test_megatron_lm_targets_launch_the_native_fused_loss() -> None:
    # Megatron-LM d98e8a64 arguments.py asserts --cross-entropy-loss-fusion off with
    # --cross-entropy-fusion-impl te ("disabled due to stability issues"); the Megatron-Core
    # Megatron-Bridge pins only warns. A default plan (loss_fusion, TE's fused loss) is launched
    # on Megatron-LM with the compiled native fusion, and its header predicts that run.
    from dataclasses import replace

    plan = load_plan(EXAMPLES / "llama3.1-8b-h100.toml")
    assert plan.job.megatron_loss == "te"
    for target in ("megatron-args", "torchrun", "slurm", "k8s"):
        text = render(plan, target)[1]
        impl = re.search(r"--cross-entropy-fusion-impl\W+(\w+)", text)
        assert impl is not None and impl.group(1) == "native", target
    bridge = render(plan, "megatron-bridge")[1]
    assert 'cross_entropy_fusion_impl: "te"' in bridge
    native = replace(plan.job, compiled_loss_fusion=True)
    peak = memory.estimate(native, plan.require_layout()).peak / 2**30
    assert f"peak memory {peak:.1f} GiB" in render(plan, "megatron-args")[1]


def test_where_the_native_loss_would_not_fit_the_unfused_one_is_launched(tmp_path: Path) -> None:
    # Megatron-FSDP ZeRO 2 with six layers offloaded fits at 76.8 of 77.3 GiB with TE's loss
    # (6 bytes a local logit); the native fusion's fp32 copy adds 4 x 8,192 x 128,256 bytes
    # (3.9 GiB) and would not: Megatron's unfused loss, no flag, holds what TE's does, and the
    # header predicts that run, which fits
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
        "[parallel]\ntp = 1\npp = 1\nmicro_batch_size = 1\nzero_stage = 2\n"
        'recompute = "none"\ncpu_offloading_num_layers = 6\n'
    )
    plan = load_plan(path)
    assert memory.estimate(plan.job, plan.require_layout()).fits
    text = render(plan, "megatron-args")[1]
    assert "--cross-entropy-loss-fusion" not in text
    unfused = memory.estimate(plan.job, plan.require_layout()).peak / 2**30
    assert f"peak memory {unfused:.1f} GiB of 77.3 GiB usable (fits)" in text


def test_suggest_says_what_megatron_lm_launches_of_its_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # suggest ranks with TE's fused loss (Megatron-Bridge's), which Megatron-LM refuses: writing
    # the plan of Llama 3.1 8B at 32,768 tokens it says what the Megatron-LM targets launch
    # instead (the unfused loss there: the native fusion's fp32 logits, 4 x 32,768 x 128,256 B =
    # 15.7 GiB at tp 1 and cp 1 over the local tokens, would not fit; at 8,192 tokens the first
    # pick's fits them) and the step their header predicts, which is the launch file's own;
    # Megatron-Bridge launches it as ranked
    path = tmp_path / "top.toml"
    args = ["suggest", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    args += ["--seq-length", "32768", "--global-batch-size", "128", "--write-plan", str(path)]
    code, _, err = run(args, capsys)
    assert code == 0, err
    note = " ".join(err.split())
    header = render(load_plan(path), "megatron-args")[1]
    step = re.search(r"predicted: step ([\d.]+) s", header)
    assert step is not None
    assert f"predicted step {step.group(1)} s" in note
    ranked = cost.estimate(load_plan(path).job, load_plan(path).require_layout()).step_time_s
    assert f"(the plan's {ranked:.3f} s)" in note
    assert "its unfused loss" in note and "training.loss_fusion = false" in note
    assert f"predicted: step {ranked:.3f} s" in render(load_plan(path), "megatron-bridge")[1]


def test_pooled_torchrun_files_launch_the_loss_megatron_lm_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `launch --target torchrun --out DIR` of a pooled plan writes one script per pool; they
    # were rendered from the plan as ranked and passed --cross-entropy-fusion-impl te, which
    # Megatron-LM d98e8a64 refuses (the stdout script and the other targets passed native)
    plan = EXAMPLES / "pools-llama3.1-70b-h100-a100-plan.toml"
    argv = ["launch", str(plan), "--target", "torchrun"]
    code, _, err = run([*argv, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    scripts = sorted(tmp_path.glob("*.sh"))
    assert len(scripts) > 1
    code, stdout, _ = run(argv, capsys)
    want = re.search(r"--cross-entropy-fusion-impl\W+(\w+)", stdout)
    assert want is not None and want.group(1) != "te"
    for path in scripts:
        text = path.read_text()
        impl = re.search(r"--cross-entropy-fusion-impl\W+(\w+)", text)
        assert impl is not None and impl.group(1) == want.group(1), path.name


def test_a_pooled_torchrun_plan_prints_every_pools_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --out a pooled plan printed the first pool's script alone, whose header says to
    run it on every node of that pool: the other pools' nodes had nothing to run (a QA pass).
    Each script is printed, under a banner naming its pool and file, the same text --out
    writes (oracle: the written files)."""
    plan = EXAMPLES / "pools-llama3.1-70b-h100-a100-plan.toml"
    argv = ["launch", str(plan), "--target", "torchrun"]
    code, _, err = run([*argv, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    written = sorted(tmp_path.glob("*.sh"))
    assert len(written) == 2
    code, stdout, err = run(argv, capsys)
    assert code == 0 and "one torchrun script per pool" in " ".join(err.split())
    for path in written:
        assert f", {path.name} =====" in stdout
        assert path.read_text().rstrip() in stdout
