"""What the rules say of a Megatron-LM --use-torch-fsdp2 line: the error names the line's flag
beside the plan field, and the FSDP named is the one Megatron-LM names.

Oracles (NVIDIA/Megatron-LM d98e8a64 megatron/training/arguments.py): :1739 asserts an emerging
optimizer (muon, dist_muon read as muon at :1728-1732) "does not support Torch-FSDP2"; :1456-1457
name the FSDP of the TP/CP warning "Torch-FSDP2" under --use-torch-fsdp2, else "Megatron-FSDP"
(a warning on GPUs before Blackwell: the H100 here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 128 --bf16 --use-torch-fsdp2 "
    "--no-gradient-accumulation-fusion --ckpt-format torch_dist --recompute-granularity full "
    "--recompute-method uniform --recompute-num-layers 1 --lr 1e-4 --train-iters 100 "
)


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str) -> tuple[int, str]:
    path = tmp_path / "run.sh"
    path.write_text(LINE + extra + "\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    return code, err


def test_muon_beside_torch_fsdp2_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the reader refuses it first, as validate_args does (arguments.py:1726-1739): an emerging
    # optimizer beside --use-torch-fsdp2, named by its flags
    code, err = _check(tmp_path, capsys, "--optimizer dist_muon")
    assert code == 2
    assert "--optimizer: dist_muon: an emerging optimizer" in err
    assert "--use-torch-fsdp2" in err
    assert "Megatron-FSDP" not in err  # the line runs no Megatron-FSDP


@pytest.mark.parametrize("extra", ["--tensor-model-parallel-size 2", "--context-parallel-size 2"])
def test_the_tp_cp_warning_names_torch_fsdp2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str
) -> None:
    code, err = _check(tmp_path, capsys, extra)
    warned = [line for line in err.splitlines() if "CUDA_DEVICE_MAX_CONNECTIONS" in line]
    assert code == 0 and len(warned) == 1
    assert "Megatron warns: Torch-FSDP2 (use_torch_fsdp2) with tp" in warned[0]
    assert "Megatron-FSDP" not in warned[0]
