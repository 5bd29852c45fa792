"""A torchtitan configuration in the form torchtitan documents (pytorch/torchtitan b5bcd76c,
torchtitan/config/README.md): the Qwen3 30B-A3B baseline with expert parallelism and a larger
batch. Check it before running it (read, not run: torchtitan need not be installed):

    planner check --torchtitan-config examples/torchtitan_qwen3_30b_a3b.py \
        --gpu h100-sxm-80gb --num-gpus 64

and run it with torchtitan as `--module torchtitan_qwen3_30b_a3b --config qwen3_30b_a3b_ep8`
(this folder on PYTHONPATH).
"""

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.config import ParallelismConfig
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.qwen3 import model_registry
from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b
from torchtitan.trainer import Trainer


def qwen3_30b_a3b_ep8() -> Trainer.Config:
    config = qwen3_30b_a3b()
    config.model_spec = model_registry("30B-A3B", moe_comm_backend="deepep")
    config.parallelism = ParallelismConfig(expert_parallel_degree=8)
    config.training.max_context_length = 4096
    config.training.num_tokens_per_microbatch_per_dp_rank = 2 * 4096
    config.training.num_tokens_per_train_step = 512 * 4096
    config.training.disable_cuda_graphs = True  # torchtitan refuses them with expert parallelism
    config.loss = ChunkedLossWrapper.Config(
        num_chunks=8,
        loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)),
    )
    return config
