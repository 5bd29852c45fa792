"""A torchtitan job config TOML read as torchtitan e347b1e5 runs it, where QA found planner
predicting what torchtitan raises on, or another job than it runs (planner.inputs.
torchtitan_config, planner.inputs.torchtitan_toml).

Oracles: torchtitan e347b1e5's source, cited per case (`git show e347b1e5:<path>` in the
pytorch/torchtitan mirror), and the same job spelt the way planner already reads right (the read
plans equal, field by field)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan


def toml(
    tmp_path: Path,
    model: str = 'name = "llama3"\nflavor = "70B"\n',
    training: str = "local_batch_size = 8\nseq_len = 8192\n",
    parallelism: str = "data_parallel_shard_degree = 8\ntensor_parallel_degree = 8\n",
    extra: str = '[activation_checkpoint]\nmode = "full"\n',
) -> Path:
    path = tmp_path / "job.toml"
    text = f"[model]\n{model}[training]\n{training}[parallelism]\n{parallelism}{extra}"
    path.write_text(text)
    return path


def read(path: Path, num_gpus: int | None = None) -> Plan:
    return torchtitan_config.load(path, "h100-sxm-80gb", num_gpus)


def refused(path: Path, pattern: str) -> str:
    with pytest.raises(InputError, match=pattern) as info:
        read(path)
    return str(info.value)


PP = "data_parallel_shard_degree = 4\ntensor_parallel_degree = 8\npipeline_parallel_degree = 4\n"


def test_pipelining_with_gradient_accumulation_reads_its_schedules(tmp_path: Path) -> None:
    """train.py:561 runs global / (local x dp) accumulation steps, each one pp_schedule.step
    (train.py:502-511) of local / microbatch micro-batches (pipeline_parallel.py:186-207):
    local 8, global 128, dp 4 is 4 schedules of 8, read as `[torchtitan]
    gradient_accumulation_steps = 4` (it was refused; before that, read as one pipeline of 32)."""
    accum = "local_batch_size = 8\nglobal_batch_size = 128\nseq_len = 8192\n"
    plan = read(toml(tmp_path, training=accum, parallelism=PP))
    lay = plan.require_layout()
    assert (lay.pp, lay.dp, lay.micro_batch_size, lay.num_microbatches(128)) == (4, 4, 1, 32)
    assert plan.job.global_batch_size == 128 and plan.job.titan.gradient_accumulation_steps == 4
    one = "local_batch_size = 32\nglobal_batch_size = 128\nseq_len = 8192\n"
    plan = read(toml(tmp_path, training=one, parallelism=PP))
    lay = plan.require_layout()
    assert (lay.pp, lay.dp, lay.micro_batch_size, lay.num_microbatches(128)) == (4, 4, 1, 32)
    assert plan.job.titan.gradient_accumulation_steps == 1


def test_accumulation_without_pipelining_reads(tmp_path: Path) -> None:
    """Without PP each accumulation step is one micro-batch of local_batch_size (train.py:561,
    the non-PP forward_backward_step): planner's micro-batches, global / (dp x local)."""
    accum = "local_batch_size = 8\nglobal_batch_size = 128\nseq_len = 8192\n"
    plan = read(toml(tmp_path, training=accum))
    lay = plan.require_layout()
    assert (lay.micro_batch_size, lay.num_microbatches(plan.job.global_batch_size)) == (8, 2)


@pytest.mark.parametrize(
    ("training", "parallelism", "pattern"),
    [
        # pipeline_parallel.py:189-193: local_batch_size % microbatch_size raises
        (
            "local_batch_size = 2\nseq_len = 8192\n",
            PP + "pipeline_parallel_microbatch_size = 4\n",
            r"parallelism\.pipeline_parallel_microbatch_size: 4: .* divides "
            r"training\.local_batch_size \(2\) \(distributed/pipeline_parallel\.py:186-193\)",
        ),
        # train.py:201-209 asserts global % (local x dp) == 0 (was refused in Megatron's words,
        # "micro_batch_size x dp")
        (
            "local_batch_size = 8\nglobal_batch_size = 100\nseq_len = 8192\n",
            "data_parallel_shard_degree = 8\ntensor_parallel_degree = 8\n",
            r"training\.global_batch_size: 100 is not a multiple of training\.local_batch_size x "
            r"dp \(8 x 8\).*train\.py:201-209",
        ),
        # job_config.py:439-444: Parallelism.__post_init__ raises on ""
        (
            "local_batch_size = 8\nseq_len = 8192\n",
            "data_parallel_shard_degree = 4\ntensor_parallel_degree = 8\n"
            'context_parallel_degree = 2\ncontext_parallel_load_balancer = ""\n',
            r'parallelism\.context_parallel_load_balancer: "": torchtitan raises',
        ),
        # context_parallel.py:206-209: a balancer other than headtail, ptrr or None raises
        # once CP shards the sequence
        (
            "local_batch_size = 8\nseq_len = 8192\n",
            "data_parallel_shard_degree = 4\ntensor_parallel_degree = 8\n"
            'context_parallel_degree = 2\ncontext_parallel_load_balancer = "roundrobin"\n',
            r"parallelism\.context_parallel_load_balancer: 'roundrobin': torchtitan raises "
            r"'Invalid load_balancer_type'",
        ),
        # a seq_len tp x 2 x cp does not divide (parallel_dims.py:365-372, asserted by
        # llama3/infra/parallelize.py:69-74), named in torchtitan's words, not Megatron's
        (
            "local_batch_size = 8\nseq_len = 8196\n",
            "data_parallel_shard_degree = 8\ntensor_parallel_degree = 8\n",
            r"training\.seq_len: 8196: .* tensor_parallel_degree x 2 x context_parallel_degree "
            r"\(8 x 2 x 1 = 16\)",
        ),
        (  # 8200: a multiple of tp (Megatron's condition), not of tp x 2
            "local_batch_size = 8\nseq_len = 8200\n",
            "data_parallel_shard_degree = 8\ntensor_parallel_degree = 8\n",
            r"training\.seq_len: 8200",
        ),
        # DDP (replicate without shard) beside tp: llama3/infra/parallelize.py:148-151
        (
            "local_batch_size = 8\nseq_len = 8192\n",
            "data_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n"
            "tensor_parallel_degree = 8\n",
            r"parallelism\.data_parallel_replicate_degree: 8: .* 'DDP has not supported > 1D",
        ),
    ],
)
def test_what_e347b1e5_raises_on_exits_2_naming_the_field(
    tmp_path: Path, training: str, parallelism: str, pattern: str
) -> None:
    msg = refused(toml(tmp_path, training=training, parallelism=parallelism), pattern)
    assert "Megatron" not in msg


@pytest.mark.parametrize(
    ("model", "parallelism", "pattern"),
    [
        # deepseek_v3/__init__.py "671B": attn_type="flex"; model/args.py:101-109 raises with cp
        (
            'name = "deepseek_v3"\nflavor = "671B"\n',
            "data_parallel_shard_degree = 128\ncontext_parallel_degree = 2\n"
            "expert_parallel_degree = 8\n",
            r"parallelism\.context_parallel_degree: 2: .*deepseek_v3/model/args\.py",
        ),
        # gpt_oss/__init__.py:85 and qwen3/__init__.py:199 pipelining_fn=None; train.py:218-223
        (
            'name = "gpt_oss"\nflavor = "120b"\n',
            "data_parallel_shard_degree = 16\npipeline_parallel_degree = 4\n",
            r"parallelism\.pipeline_parallel_degree: 4: .*gpt_oss has no pipelining function",
        ),
        (
            'name = "qwen3"\nflavor = "235B-A22B"\n',
            "data_parallel_shard_degree = 8\npipeline_parallel_degree = 8\n",
            r"parallelism\.pipeline_parallel_degree: 8: .*qwen3 has no pipelining function",
        ),
    ],
)
def test_models_e347b1e5_cannot_run_so_exit_2(
    tmp_path: Path, model: str, parallelism: str, pattern: str
) -> None:
    training = "local_batch_size = 1\nseq_len = 4096\n"
    refused(toml(tmp_path, model=model, training=training, parallelism=parallelism), pattern)


QWEN = 'name = "qwen3"\nflavor = "30B-A3B"\n'
DSV3 = 'name = "deepseek_v3"\nflavor = "671B"\n'
EP = "data_parallel_shard_degree = 64\nexpert_parallel_degree = 8\n"


def test_deepep_for_a_model_that_ignores_it_is_the_all_to_all(tmp_path: Path) -> None:
    """Only deepseek_v3/infra/parallelize.py:100 (and llama4's) reads
    expert_parallel_comm_backend; qwen3's parallelize builds the plain ExpertParallel: read as
    "standard", said."""
    training = "local_batch_size = 2\nseq_len = 4096\n"
    deepep = read(toml(tmp_path, QWEN, training, EP + 'expert_parallel_comm_backend = "deepep"\n'))
    standard = read(toml(tmp_path, QWEN, training, EP))
    assert deepep.require_layout() == standard.require_layout()
    assert deepep.require_layout().moe_token_dispatcher_type != "flex"
    assert [f for f, _ in deepep.inert] == ["parallelism.expert_parallel_comm_backend"]
    assert "qwen3 ignores it" in deepep.inert[0][1]


def test_deepep_for_deepseek(tmp_path: Path) -> None:
    """deepseek_v3/infra/parallelize.py:100-111: DeepEP with ep > 1 and no expert TP; ep 1 and
    etp > 1 raise."""
    training = "local_batch_size = 1\nseq_len = 4096\n"
    backend = 'expert_parallel_comm_backend = "deepep"\n'
    lay = read(toml(tmp_path, DSV3, training, EP + backend)).require_layout()
    assert lay.moe_token_dispatcher_type == "flex"
    no_ep = "data_parallel_shard_degree = 64\n" + backend
    refused(toml(tmp_path, DSV3, training, no_ep), r"with expert_parallel_degree 1: .*:100-106")
    etp = (
        "data_parallel_shard_degree = 32\ntensor_parallel_degree = 2\nexpert_parallel_degree = 8\n"
        "expert_tensor_parallel_degree = 2\n" + backend
    )
    refused(toml(tmp_path, DSV3, training, etp), r"expert_tensor_parallel_degree 2: .*:107-111")
    other = EP + 'expert_parallel_comm_backend = "hybridep"\n'
    refused(toml(tmp_path, DSV3, training, other), r"takes standard or deepep")


F8 = 'name = "llama3"\nflavor = "8B"\nconverters = ["quantize.linear.float8"]\n'


def _float8(tmp_path: Path, fqns: str | None) -> Plan:
    extra = '[activation_checkpoint]\nmode = "full"\n'
    if fqns is not None:
        extra += f"[quantize.linear.float8]\nfilter_fqns = {fqns}\n"
    training = "local_batch_size = 2\nseq_len = 8192\n"
    return read(toml(tmp_path, F8, training, "data_parallel_shard_degree = 64\n", extra))


def test_float8_filter_fqns(tmp_path: Path) -> None:
    """components/quantization/utils.py:10-27: a Linear stays bf16 where an entry is a substring
    of its name (float8.py:62-63 takes filter_fqns, default [] at job_config.py:741).
    ["output"] is planner's float8 (the output layer bf16); [] converts the output layer too,
    which planner cannot time in float8 (said); ["layers", "output"] converts nothing: bf16."""
    ours = _float8(tmp_path, '["output"]')
    assert ours.job.precision == "fp8" and ours.inert == ()
    default = _float8(tmp_path, None)
    assert default.job == ours.job and default.require_layout() == ours.require_layout()
    assert [f for f, _ in default.inert] == ["quantize.linear.float8.filter_fqns"]
    assert "leaves the output layer to float8" in default.inert[0][1]
    none = _float8(tmp_path, '["layers", "output"]')
    assert none.job.precision == "bf16"
    assert "keeps every decoder linear in bf16: read as bf16" in none.inert[0][1]
    with pytest.raises(InputError, match=r"filter_fqns: \[\"attention\", \"output\"\] keeps "):
        _float8(tmp_path, '["attention", "output"]')  # the feed-forward stays float8
    with pytest.raises(InputError, match=r'"auto_filter_small_kn": torchao'):
        _float8(tmp_path, '["auto_filter_small_kn"]')
    with pytest.raises(InputError, match=r"filter_fqns: expected a list"):
        _float8(tmp_path, '"output"')


def test_torchtitans_moe_filter_reads_as_planners_float8(tmp_path: Path) -> None:
    """deepseek_v3_671b.toml's ["output", "router.gate"]: the router's gate is timed at no
    precision either way, the decoder's linears are float8: no note."""
    model = DSV3 + 'converters = ["quantize.linear.float8"]\n'
    extra = '[activation_checkpoint]\nmode = "full"\n[quantize.linear.float8]\n'
    extra += 'recipe_name = "rowwise"\nfilter_fqns = ["output", "router.gate"]\n'
    training = "local_batch_size = 1\nseq_len = 4096\n"
    plan = read(toml(tmp_path, model, training, EP, extra))
    assert plan.job.precision == "fp8" and plan.inert == ()


def _ac(tmp_path: Path, option: str, mode: str = "selective") -> Plan:
    extra = f'[activation_checkpoint]\nmode = "{mode}"\nselective_ac_option = "{option}"\n'
    return read(toml(tmp_path, extra=extra))


def test_selective_ac_option_zero_and_beyond_the_layers(tmp_path: Path) -> None:
    """activation_checkpoint.py:37-40 at e347b1e5: `if not ac_freq or _layer_sac_count % ac_freq
    == 0` wraps the layer: N = 0 every layer (full, was refused); N above the rank's 80 layers
    none (was one a chunk)."""
    full = read(toml(tmp_path)).require_layout()
    assert _ac(tmp_path, "0").require_layout() == full
    big = _ac(tmp_path, "1000").require_layout()
    assert big.recompute == "none"
    assert _ac(tmp_path, "80").require_layout().recompute_num_layers == 1  # layer 80 only
    assert _ac(tmp_path, "12345678901").require_layout() == big


def test_the_cli_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # train.py:201-209 asserts global % (local x dp) == 0 (accumulation under pipelining, this
    # test's refusal until it was read as [torchtitan] gradient_accumulation_steps, reads now)
    accum = "local_batch_size = 8\nglobal_batch_size = 100\nseq_len = 8192\n"
    path = toml(tmp_path, training=accum, parallelism=PP)
    args = ["check", "--torchtitan-config", str(path), "--gpu", "h100-sxm-80gb"]
    code, _, err = run(args, capsys)
    assert code == 2 and f"{path}: training.global_batch_size: 100" in err
    assert "Traceback" not in err
