"""Inputs a fuzzing pass (2026-12-05: 47,103 mutations of plans, job files, model TOMLs, HF
config.json files and flags) found crashing, hanging or wrongly accepted, each as its reproducer.
Oracle: the contract of DESIGN.md section 2 (bad input exits 2 with a message naming the file,
the field and the value; never a traceback, never "fits" for what cannot run) and, where a
message quotes a rule, the source it cites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.inputs.errors import spelled

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"
POOLS = REPO / "examples" / "pools-llama3.1-70b-h100-a100.toml"
HF = REPO / "tests" / "data" / "hf"


def edited(tmp_path: Path, old: str, new: str, source: Path = EXAMPLE) -> Path:
    """The example plan with one line replaced."""
    text = source.read_text()
    assert old in text
    path = tmp_path / "plan.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def with_training(tmp_path: Path, line: str) -> Path:
    return edited(tmp_path, "[training]\n", f"[training]\n{line}\n")


def bad(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run argv, assert exit 2 and no traceback; the error text."""
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    return err


# --- files nested or sized past what Python converts


def test_toml_nested_deeper_than_the_recursion_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 400 nested arrays: quoting them in the message recursed past Python's limit; 5,000: so
    # did tomllib reading them
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 400 + "]" * 400 + "\n")
    assert "x: unknown key (got [[[[[[[[[...]]]]]]]]])" in bad(["check", str(path)], capsys)
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    assert f"{path}: malformed TOML: nested too deep to read" in bad(["check", str(path)], capsys)


def test_integer_of_more_digits_than_python_converts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.toml"
    path.write_text("x = " + "9" * 5000 + "\n")
    assert f"{path}: malformed TOML: " in bad(["check", str(path)], capsys)


def test_pipeline_layout_with_a_5000_digit_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = edited(tmp_path, "pp = 1\n", 'pp = 2\npipeline_model_parallel_layout = "Et*9999L"\n')
    text = path.read_text().replace("9999", "9" * 5000).replace("tp = 2", "tp = 1")
    path.write_text(text)
    err = bad(["check", str(path)], capsys)
    assert "parallel.pipeline_model_parallel_layout: cannot read" in err


def test_messages_quote_long_values_cut_short() -> None:
    # a 2,000-item list is named by its first 16 items and its count; 9 levels of nesting
    # stop at 8; 30,000 characters at 200; a 401-digit integer at 12 digits and its length
    assert spelled(list(range(2000))).endswith(", 15, ... (2,000 items)]")
    assert spelled([[[[[[[[[[]]]]]]]]]]) == "[[[[[[[[[...]]]]]]]]]"
    assert spelled("x" * 30000) == '"' + "x" * 200 + '"... (30,000 characters)'
    assert spelled(10**400) == "100000000000... (401 characters)"
    assert spelled(10**30) == "1" + "0" * 30  # 31 digits: whole
    assert spelled({"a": [1, None]}, json_syntax=True) == '{"a": [1, null]}'


def test_one_message_repeated_over_an_array_is_folded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 61 entries of 2 in moe_layer_freq (0 or 1 each): three lines, then the count of the 58 left
    model = (REPO / "model_zoo" / "deepseek-v3.toml").read_text()
    start = model.index("moe_layer_freq = [")
    end = model.index("]", start) + 1
    path = tmp_path / "m.toml"
    path.write_text(
        model[:start] + "moe_layer_freq = [" + ", ".join(["2"] * 61) + "]" + model[end:]
    )
    err = bad(["catalog", "show", str(path)], capsys)
    assert err.count("must be 0 or 1") + err.count("Input should be 0 or 1") == 4
    assert "moe_layer_freq.*: Input should be 0 or 1 (58 more items)" in err


# --- sizes past any real job


def test_model_size_past_2_to_the_53(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a legal JSON integer of 401 digits: refused when the model is built, not met as an
    # OverflowError in the model (2^53 = 9,007,199,254,740,992, the last exact float integer)
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "hidden_size": 10**400}))
    err = bad(["catalog", "show", str(path)], capsys)
    assert "hidden_size (100000000000... (401 characters)) must be at most 2^53 = 9,007," in err


def test_sequence_past_2_to_the_24(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2^35 tokens: the pools solver's integer step times passed 64 bits (OR-Tools TypeError)
    path = edited(tmp_path, "seq_length = 8192", "seq_length = 34359738368", POOLS)
    err = bad(["suggest", str(path)], capsys)
    assert "training.seq_length: Input should be less than or equal to 16777216" in err


def test_empty_moe_layer_freq_with_mtp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(
        'name = "tiny-moe"\nnum_layers = 4\nhidden_size = 1024\nffn_hidden_size = 4096\n'
        "num_attention_heads = 16\nvocab_size = 32000\nnum_moe_experts = 8\n"
        "moe_router_topk = 2\nmoe_layer_freq = []\nmtp_num_layers = 1\n"
    )
    err = bad(["catalog", "show", str(path)], capsys)
    assert "moe_layer_freq has 0 entries but num_layers is 4" in err


# --- values the models took without their type


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("optimizer_offload_fraction = true", "Input should be a valid number (got true)"),
        ('optimizer_offload_fraction = "1"', 'Input should be a valid number (got "1")'),
        ("moe_paged_stash_buffer_size_factor = nan", "Input should be a finite number (got nan)"),
        ("dsa_indexer_loss_coeff = inf", "Input should be a finite number (got inf)"),
    ],
)
def test_float_fields_take_numbers_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    field = line.split(" =")[0]
    err = bad(["check", str(with_training(tmp_path, line))], capsys)
    assert f"training.{field}: {message}" in err


def test_sm_margin_must_leave_the_gemms_an_sm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # H100 SXM5 has 132 SMs (sm_count.GPU_SMS): a margin of 132 leaves none, 131 leaves one
    err = bad(["check", str(with_training(tmp_path, "gemm_sm_margin = 132"))], capsys)
    assert "training.gemm_sm_margin" in err and "h100-sxm-80gb has 132" in err
    code, _, err = run(["check", str(with_training(tmp_path, "gemm_sm_margin = 131"))], capsys)
    assert code in (0, 1), err


def test_selective_recompute_of_no_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = edited(tmp_path, 'recompute = "none"', 'recompute = "selective"\nrecompute_modules = []')
    err = bad(["check", str(path)], capsys)
    assert "parallel.recompute_modules: [] with recompute" in err


def test_names_hold_no_control_characters_and_fit_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # an escape sequence printed raw rewrites the terminal; 30,000 characters took rich 46 s
    base = 'name = "{}"\nnum_layers = 4\nhidden_size = 1024\nffn_hidden_size = 4096\n'
    base += "num_attention_heads = 16\nvocab_size = 32000\n"
    path = tmp_path / "m.toml"
    path.write_text(base.format("a\\u001b[31mb"))
    assert "name: no control characters (holds U+001B)" in bad(
        ["catalog", "show", str(path)], capsys
    )
    path.write_text(base.format("x" * 30000))
    err = bad(["catalog", "show", str(path)], capsys)
    assert "name: String should have at most 1024 characters" in err
    assert len(err) < 1000


def test_hf_topk_method_is_one_of_deepseek_v2s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = json.loads((HF / "deepseek-v2.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "topk_method": "typo"}))
    err = bad(["catalog", "show", str(path)], capsys)
    assert 'topk_method: must be "greedy" or "group_limited_greedy"' in err


def test_catalog_show_of_a_gpu_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "hardware_catalog" / "gpus" / "h100-sxm-80gb.toml"
    err = bad(["catalog", "show", str(path)], capsys)
    assert "a GPU's TOML, not a model's" in err and "(h100-sxm-80gb)" in err


# --- flags


def test_check_of_a_plan_refuses_cluster_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # they were ignored: the plan's 8 x H100 checked whatever --gpu said
    err = bad(["check", str(EXAMPLE), "--gpu", "a100-sxm-40gb"], capsys)
    assert "check: --gpu: only with --megatron-args" in err
    assert "--num-gpus: only with" in bad(["check", str(EXAMPLE), "--num-gpus", "16"], capsys)


def test_no_cp_beside_a_cp_bound(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--no-cp contradicts --cp" in bad(["suggest", "--no-cp", "--cp", "2"], capsys)
    assert "--no-cp contradicts --max-cp" in bad(["suggest", "--no-cp", "--max-cp", "2"], capsys)


def test_tokens_past_a_float(capsys: pytest.CaptureFixture[str]) -> None:
    err = bad(["explain", str(EXAMPLE), "--tokens", "1e400"], capsys)
    assert "--tokens: too large to be a number (got '1e400')" in err


# --- torchtitan on pools, launch refusals


def test_torchtitan_on_pools_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the pools solver ran 20 s a layout (over 5 minutes) for a job no target launches
    err = bad(["suggest", str(POOLS), "--framework", "torchtitan"], capsys)
    assert "--framework: torchtitan: torchtitan trains on one kind of GPU" in err
    plan = edited(tmp_path, "[training]\n", '[training]\nframework = "torchtitan"\n', POOLS)
    assert "training.framework: torchtitan trains on one kind of GPU" in bad(
        ["check", str(plan)], capsys
    )


def test_launch_refusal_names_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 8,388,608 GPUs: one step outlasts the mean time between interruptions
    path = edited(tmp_path, "num_gpus = 8", "num_gpus = 8388608")
    path.write_text(
        path.read_text().replace("global_batch_size = 128", "global_batch_size = 16777216")
    )
    err = bad(["launch", str(path), "--target", "megatron-args"], capsys)
    assert err.startswith(f"planner: error: {path}: step_time: one step takes")


# --- found checking `suggest` and `launch` on MoE jobs


def test_nothing_fits_names_no_infinite_size(capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss-20b on 3 H100: only pipelined structures pass the rules (batch 128 is not a
    # multiple of dp 3), none fits: the message said "the leanest layout (?) needs inf GiB" and
    # "GPUs with at least inf GiB each"; the leanest layout is sized at pp 3 with ZeRO 1 (the
    # most sharding searched with pipelines)
    code, out, err = run(["suggest", "--model", "gpt-oss-20b", "--num-gpus", "3"], capsys)
    assert code == 1, err
    text = " ".join((out + err).split())  # rich wraps the line
    assert "nothing fits: memory: the leanest layout (tp1 pp3 dp1 mbs1 zero1" in text
    assert "inf GiB" not in text


def test_torchtitan_toml_target_refuses_deepep_where_the_model_ignores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torchtitan e347b1e5: only deepseek_v3 and llama4 read expert_parallel_comm_backend;
    # qwen3's parallelize builds the plain ExpertParallel (models/qwen3/infra/parallelize.py)
    path = tmp_path / "q30.toml"
    path.write_text(
        '[model]\nname = "qwen3-30b-a3b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        '[training]\nseq_length = 4096\nglobal_batch_size = 128\nframework = "torchtitan"\n'
        "[parallel]\ntp = 1\npp = 1\nep = 8\netp = 1\nmicro_batch_size = 2\nzero_stage = 3\n"
        'moe_token_dispatcher_type = "flex"\nmoe_flex_dispatcher_backend = "deepep"\n'
    )
    err = bad(["launch", str(path), "--target", "torchtitan"], capsys)
    assert "parallel.moe_token_dispatcher_type: flex (DeepEP)" in err
    assert "qwen3 ignores expert_parallel_comm_backend" in err


# --- a second pass (2026-12-05, session 24): 689 bad inputs, about 3,000 runs


def _job_file(tmp_path: Path, line: str) -> Path:
    """The example plan without its [parallel] table, with one [training] line added: a job."""
    text = EXAMPLE.read_text()
    text = text[: text.index("[parallel]")] if "[parallel]" in text else text
    path = tmp_path / "job.toml"
    path.write_text(text.replace("[training]\n", f"[training]\n{line}\n", 1))
    return path


def test_suggest_and_scale_refuse_a_job_setting_check_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # MoE router groups on a dense model: `check` refuses every plan of the job (the rule's own
    # message); suggest ranked layouts and wrote one, exit 0, before
    job = _job_file(tmp_path, "moe_router_num_groups = 3")
    for argv in (["suggest", str(job), "--top", "1"], ["scale", str(job), "--num-gpus", "8,16"]):
        err = bad(argv, capsys)
        assert f"{job}: training.moe_router_num_groups" in err
        assert "mixture-of-experts" in err


def test_suggest_max_cp_zero_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # `--max-cp 0` read as "no bound" (MAX_CP) and listed cp 2 layouts; --max-tp 0 is refused
    err = bad(["suggest", "--num-gpus", "16", "--max-cp", "0"], capsys)
    assert "--max-cp" in err and "at least 1" in err


def test_check_takes_one_reading_of_one_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # with a plan and --megatron-args, or --megatron-args and --torchtitan-config, check used one
    # and ignored the other, exit 0
    line = tmp_path / "line.txt"
    line.write_text("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128")
    err = bad(["check", str(EXAMPLE), "--megatron-args", str(line)], capsys)
    assert "give one of PLAN, --megatron-args" in err
    titan = tmp_path / "titan.toml"
    titan.write_text('[model]\nname = "llama3"\nflavor = "8B"\n')
    cluster = ["--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    argv = ["check", "--megatron-args", str(line), "--torchtitan-config", str(titan), *cluster]
    err = bad(argv, capsys)
    assert "give one of --megatron-args, --torchtitan-config" in err


def test_megatron_line_with_fp16_and_bf16_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Megatron-LM d98e8a64 validate_args: `if args.fp16: assert not args.bf16` (and the
    # converse): the line does not start; it was read as bf16 with a note, exit 0 or 1
    line = tmp_path / "line.txt"
    words = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128"
    words += " --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8"
    line.write_text(words + " --vocab-size 1000 --bf16 --fp16")
    cluster = ["--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    err = bad(["check", "--megatron-args", str(line), *cluster], capsys)
    assert f"{line}: --fp16: not with --bf16" in err


def test_a_long_unknown_name_is_quoted_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a 100,000-character GPU name was echoed whole (100 KB on stderr) after a fuzzy match
    # over it; strings elsewhere are cut at SPELLED_CHARS
    name = "x" * 100_000
    err = bad(["suggest", "--gpu", name, "--num-gpus", "8"], capsys)
    assert len(err) < 2_000 and "100000" in err.replace(",", "")


def test_suggest_says_a_plans_parallel_table_is_not_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a whole plan is a job too; its layout was dropped without a word
    code, _, err = run(["suggest", str(EXAMPLE), "--top", "1"], capsys)
    assert code == 0, err
    assert "its [parallel] not read" in " ".join(err.split())


def test_recompute_layers_without_full_recompute_names_that_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # recompute_num_layers = 1000 with recompute "none" blamed parallel.recompute_method, which
    # the plan left at its default (uniform); the field it set is named now
    line = 'recompute = "none"\n'
    plan = edited(tmp_path, line, line + "recompute_num_layers = 3\n")
    err = bad(["check", str(plan)], capsys)
    assert f"{plan}: parallel.recompute_num_layers:" in err
    plan = edited(tmp_path, line, line + 'recompute_method = "block"\n')
    err = bad(["check", str(plan)], capsys)
    assert f"{plan}: parallel.recompute_method:" in err


def test_a_bridge_override_is_named_not_read_as_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `launch --target megatron-bridge` writes a ConfigContainer override (YAML); read by
    # check --megatron-args it was "NeMo-style overrides", and with --nemo-model "Megatron-LM
    # flags": two contradicting reasons for a file that is neither
    path = tmp_path / "bridge.yaml"
    code, text, _ = run(["launch", str(EXAMPLE), "--target", "megatron-bridge"], capsys)
    assert code == 0
    path.write_text(text)
    cluster = ["--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    for extra in ([], ["--nemo-model", "llama31_8b"]):
        err = bad(["check", "--megatron-args", str(path), *cluster, *extra], capsys)
        assert f"{path}: a Megatron-Bridge ConfigContainer override" in err
