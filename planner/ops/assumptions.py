"""What operations figures assume besides the job: failure rate, restart time, storage and host-copy
bandwidth, node power, PUE, price. Each default is a named constant with its source; `OpsParams`
collects them, any of them overridden (the CLI's operations options set its fields).

Defaults (sources):
- FAILURE_RATE_PER_GPU_DAY = 419 / (54 x 16,384) = 4.74e-4: Llama 3 405B pre-training, 419
  unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs (The Llama 3 Herd of Models,
  arXiv:2407.21783, section 3.3.4 and Table 5; 466 interruptions in all, 47 planned; 78 % of the
  unexpected ones hardware; one every ~3 hours). Meta reported > 90 % effective training time.
- RESTART_MIN = 10: the restart Daly's worked examples use (R = 10 min); TrainMover
  (arXiv:2412.12636) measures checkpoint-restart recovery on 1,024 GPUs at up to ~70 x its own
  10-20 s, i.e. of the order of ten minutes. With these defaults Llama 3 405B on 16,384 H100
  comes out at ~92 % goodput, consistent with Meta's > 90 % (tests/ops/test_operations.py).
- STORAGE_GB_PER_S_PER_NODE = 1.0: Llama 3's Tectonic file system sustained 2 TB/s (7 TB/s
  peak) for 16,384 GPUs = 2,048 nodes, ~0.98 GB/s per node (same section of the Llama 3 paper).
- HOST_COPY_GB_PER_S = 25: planning assumption for the device-to-host copy of every save,
  ~40 % of PCIe Gen5 x16's 64 GB/s because eight GPUs share the hosts' memory. A synchronous
  save makes this copy too, before its write: Megatron Core's torch_dist save runs the stages of
  its asynchronous save in the foreground, one after the other (the plan, the writer's preload
  of every tensor to host memory, then the write: `TorchDistSaveShardedStrategy.save`,
  `FileSystemWriterAsync`), and PyTorch DCP's default writer (one thread, torchtitan's
  synchronous `dcp.save`) copies each tensor to the CPU and then writes it. So a synchronous
  save blocks for the copy plus the write, an asynchronous one for the copy alone
  (planner/ops/resilience.py), and asynchronous save never loses to it.
- NODE_OVERHEAD_W_PER_GPU = 575: an NVIDIA DGX H100 draws at most 10.2 kW (DGX H100 user guide,
  power specifications: six 3.3 kW supplies, 4+2 redundant) of which 8 x 700 W are GPUs, leaving
  4.6 kW per 8-GPU node for CPUs, memory, NICs, NVSwitches and fans; the default node overhead is
  575 W x gpus_per_node.
- PUE = 1.10: Google's fleet-wide trailing average (1.10 in 2021, reported by CNBC 2022-04-13);
  the Uptime Institute's 2021 survey average for large data centres is 1.57.

Bounds (each constant says why): a failure rate of at least MIN_FAILURE_RATE_PER_GPU_DAY, a PUE,
node power and checkpoint interval of at most MAX_PUE, MAX_NODE_OVERHEAD_W and
MAX_CHECKPOINT_INTERVAL_MIN; past them finite values printed hundreds of digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.inputs.errors import InputError
from planner.inputs.plan import Job

FAILURE_RATE_PER_GPU_DAY = 419 / (54 * 16_384)
"""Job interruptions per GPU per day: Llama 3 405B, 419 unexpected in 54 days on 16,384 H100."""

RESTART_MIN = 10.0
"""Minutes from an interruption to training again, excluding the checkpoint load (Daly 2006's
R = 10 min; checkpoint-restart baselines of TrainMover, arXiv:2412.12636)."""

STORAGE_GB_PER_S_PER_NODE = 1.0
"""Checkpoint write (and read) bandwidth per node, decimal GB/s: Llama 3's Tectonic, 2 TB/s
sustained over 2,048 nodes."""

HOST_COPY_GB_PER_S = 25.0
"""Device-to-host copy rate per GPU of a save, synchronous (before its write) or asynchronous
(all it blocks for): an assumption, ~40 % of PCIe Gen5 x16 (the module docstring)."""

NODE_OVERHEAD_W_PER_GPU = (10_200 - 8 * 700) / 8
"""Non-GPU power of a node per GPU slot: DGX H100 10.2 kW maximum minus 8 x 700 W GPUs, / 8."""

PUE = 1.10
"""Power usage effectiveness: Google's fleet average (2021)."""


MIN_FAILURE_RATE_PER_GPU_DAY = 1e-12
"""The least failure rate: one interruption per GPU in 2.7 billion years, a run without failures
for any purpose (give it to switch them off). Below it the time between interruptions and Daly's
interval run to hundreds of digits (1e-300 printed a 153-digit `checkpoint_interval_steps`)."""

MAX_PUE = 10.0
"""The largest PUE: nine watts of cooling and power delivery per IT watt, six times the Uptime
Institute's 2021 survey average (1.57). Past it a PUE is a typo, and the energy hundreds of
digits (--pue 1e250)."""

MAX_NODE_OVERHEAD_W = 1e6
"""The largest non-GPU power per node: 1 MW, over 200 times a DGX H100's 4.6 kW
(NODE_OVERHEAD_W_PER_GPU's source)."""

MAX_CHECKPOINT_INTERVAL_MIN = 1e6
"""The longest checkpoint interval given: a million minutes (694 days). A run shorter than its
interval saves once, at its end, so no longer one changes a budget's figures; without a budget
it is the interval's steps that it bounds (`resilience`: below 2^53)."""

UPPER_BOUNDS = {
    "pue": (MAX_PUE, "(nine watts of cooling and power delivery per IT watt)"),
    "node_overhead_w": (MAX_NODE_OVERHEAD_W, "W (over 200 times a DGX H100's 4.6 kW)"),
    "checkpoint_interval_min": (
        MAX_CHECKPOINT_INTERVAL_MIN,
        "minutes (694 days: a run shorter than its interval saves once, at its end)",
    ),
}
"""The OpsParams fields with a largest value, and why (the price has none: a cost past a float
is refused naming --price, `operations`)."""


class AssumptionError(InputError):
    """An assumption out of range: an OpsParams field, or the token budget (`field` "tokens").
    `field` names it, so that the command line can name the option that set it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


POSITIVE_FIELDS = (
    "price_usd_per_gpu_hour",
    "failure_rate_per_gpu_day",
    "restart_min",
    "storage_gb_per_s_per_node",
    "pue",
    "node_overhead_w",
    "gpu_power_w",
    "host_copy_gb_per_s",
    "checkpoint_interval_min",
)
"""The OpsParams fields that must be positive, finite numbers where set."""


@dataclass(frozen=True)
class OpsParams:
    """What operations depend on besides the job: prices, failures, storage, power. None = default
    derived from the catalog (price, GPU power, node overhead) or computed (checkpoint interval)."""

    price_usd_per_gpu_hour: float | None = None
    """$ per GPU-hour; None = the catalog price of the GPU (may itself be missing)."""
    failure_rate_per_gpu_day: float = FAILURE_RATE_PER_GPU_DAY
    """Job-stopping interruptions per GPU per day."""
    restart_min: float = RESTART_MIN
    """Minutes to get going again after an interruption, not counting the checkpoint load."""
    storage_gb_per_s_per_node: float = STORAGE_GB_PER_S_PER_NODE
    """Checkpoint write/read bandwidth per node, decimal GB/s."""
    pue: float = PUE
    """Facility power / IT power (>= 1)."""
    node_overhead_w: float | None = None
    """Non-GPU power per node in W; None = NODE_OVERHEAD_W_PER_GPU x gpus_per_node."""
    gpu_power_w: float | None = None
    """Power per GPU in W; None = the catalog TDP."""
    async_checkpoint: bool = False
    """Asynchronous save asked for by the options (`--async-checkpoint`): training blocks only
    for the copy to host memory, not the write. The figures save asynchronously where this or
    the job says so (`for_job`); False leaves it to the job."""
    host_copy_gb_per_s: float = HOST_COPY_GB_PER_S
    """Device-to-host copy rate per GPU of a save (synchronous or asynchronous), decimal GB/s."""
    checkpoint_interval_min: float | None = None
    """Minutes of training between checkpoints; None = Daly's optimum."""

    def is_default(self, name: str) -> bool:
        """Whether field `name` holds its default (a message can say "the default")."""
        return bool(getattr(self, name) == OpsParams.__dataclass_fields__[name].default)

    def __post_init__(self) -> None:
        for name in POSITIVE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise AssumptionError(name, f"expected a number (got {value!r})")
            if not math.isfinite(value) or value <= 0:
                raise AssumptionError(name, f"must be a positive number (got {value!r})")
        if self.pue < 1:
            raise AssumptionError(
                "pue", f"must be >= 1 (facility power / IT power; got {self.pue!r})"
            )
        for name, (most, why) in UPPER_BOUNDS.items():
            value = getattr(self, name)
            if value is not None and value > most:
                raise AssumptionError(name, f"{value!r} is too large: at most {most:g} {why}")
        if self.failure_rate_per_gpu_day < MIN_FAILURE_RATE_PER_GPU_DAY:
            raise AssumptionError(
                "failure_rate_per_gpu_day",
                f"{self.failure_rate_per_gpu_day!r} is too small: at least "
                f"{MIN_FAILURE_RATE_PER_GPU_DAY:g} per GPU-day (one interruption per GPU in 2.7 "
                "billion years: no failures; give it to switch them off)",
            )


def saves_async(job: Job) -> bool:
    """Whether the job's own launch saves asynchronously: `training.async_save` under Megatron-LM
    (its launch files write --async-save with the persistent worker, `planner.emit.megatron`;
    Megatron-Bridge's checkpoint.async_save). torchtitan does not read the setting (it is inert
    there, `planner.inputs.inert`): its launch saves synchronously."""
    return job.async_save and job.framework == "megatron"


def for_job(job: Job, params: OpsParams | None = None) -> OpsParams:
    """The assumptions a job's operations figures run under: `params` (the options; None: the
    defaults), saving asynchronously where the job's launch does (`saves_async`) or the options
    ask for it. The one place both are read (`planner.ops.resilience.resilience` and
    `planner.ops.operations.operations` take every OpsParams through it), so that explain,
    scale, suggest's objectives, the pooled search and the launch headers agree. The option on
    a job that saves synchronously is a what-if: the figures save asynchronously, the job's
    launch files do not (it has no off switch: a plan's async_save is what it launches)."""
    params = params or OpsParams()
    if params.async_checkpoint or not saves_async(job):
        return params
    return replace(params, async_checkpoint=True)
