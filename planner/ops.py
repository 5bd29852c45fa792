"""Operations: days, GPU-hours, dollars, energy and goodput under failures for a token budget.

Pure functions over (job, layout, performance); nothing here prints or reads files. Every figure
the code assumes is a named default below with its source; every one can be overridden through
`OpsParams` (the CLI's `--price`, `--failure-rate`, ... options).

Time. A budget of B tokens takes S = ceil(B / tokens_per_step) optimizer steps, i.e.
T_train = S x step_time seconds without failures. Wall-clock time is T_wall = T_train / goodput
(below); days = T_wall / 86400.

Cost. GPU-hours = N x T_wall / 3600 (GPUs are paid for while they checkpoint, restart and redo
work); cost = GPU-hours x price ($/GPU-hour: the catalog's `price_usd_per_gpu_hour` and its
`price_source`, or `--price`).

Energy. IT power P_it = N x P_gpu + nodes x P_node, nodes = ceil(N / gpus_per_node), P_gpu the
GPU's TDP or the plan's `[cluster] power_limit_w` (`--gpu-power-w` overrides: training typically
draws 70-90 % of TDP, so the default is an upper bound) and P_node the per-node overhead (CPUs,
DRAM, NICs, switches' share, fans).
Facility power = P_it x PUE; energy = facility power x T_wall (GPUs stay powered while they wait).

Checkpoints, failures and goodput: planner/resilience.py.

Defaults (sources):
- FAILURE_RATE_PER_GPU_DAY = 419 / (54 x 16,384) = 4.74e-4: Llama 3 405B pre-training, 419
  unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs (The Llama 3 Herd of Models,
  arXiv:2407.21783, section 3.3.4 and Table 5; 466 interruptions in all, 47 planned; 78 % of the
  unexpected ones hardware; one every ~3 hours). Meta reported > 90 % effective training time.
- RESTART_MIN = 10: the restart Daly's worked examples use (R = 10 min); TrainMover
  (arXiv:2412.12636) measures checkpoint-restart recovery on 1,024 GPUs at up to ~70 x its own
  10-20 s, i.e. of the order of ten minutes. With these defaults Llama 3 405B on 16,384 H100
  comes out at ~92 % goodput, consistent with Meta's > 90 % (tests/test_ops.py).
- STORAGE_GB_PER_S_PER_NODE = 1.0: Llama 3's Tectonic file system sustained 2 TB/s (7 TB/s
  peak) for 16,384 GPUs = 2,048 nodes, ~0.98 GB/s per node (same section of the Llama 3 paper).
- NODE_OVERHEAD_W_PER_GPU = 575: an NVIDIA DGX H100 draws at most 10.2 kW (DGX H100 user guide,
  power specifications: six 3.3 kW supplies, 4+2 redundant) of which 8 x 700 W are GPUs, leaving
  4.6 kW per 8-GPU node for CPUs, memory, NICs, NVSwitches and fans; the default node overhead is
  575 W x gpus_per_node.
- PUE = 1.10: Google's fleet-wide trailing average (1.10 in 2021, reported by CNBC 2022-04-13);
  the Uptime Institute's 2021 survey average for large data centres is 1.57.
- HOST_COPY_GB_PER_S = 25: planning assumption for the blocking device-to-host copy of an
  asynchronous save, ~40 % of PCIe Gen5 x16's 64 GB/s because eight GPUs share the hosts' memory.

"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from planner.cost import Performance
from planner.errors import InputError
from planner.resilience import (
    FAILURE_RATE_PER_GPU_DAY,
    HOST_COPY_GB_PER_S,
    RESTART_MIN,
    SECONDS_PER_DAY,
    STORAGE_GB_PER_S_PER_NODE,
    Resilience,
    num_nodes,
    resilience,
)
from planner.spec import Job

SECONDS_PER_HOUR = 3_600.0

NODE_OVERHEAD_W_PER_GPU = (10_200 - 8 * 700) / 8
"""Non-GPU power of a node per GPU slot: DGX H100 10.2 kW maximum minus 8 x 700 W GPUs, / 8."""

PUE = 1.10
"""Power usage effectiveness: Google's fleet average (2021)."""


OBJECTIVES: tuple[str, ...] = ("throughput", "cost", "goodput")

OPTION_NAMES = {
    "price_usd_per_gpu_hour": "--price",
    "failure_rate_per_gpu_day": "--failure-rate",
    "restart_min": "--restart-min",
    "storage_gb_per_s_per_node": "--storage-gb-per-s",
    "pue": "--pue",
    "node_overhead_w": "--node-overhead-w",
    "gpu_power_w": "--gpu-power-w",
    "host_copy_gb_per_s": "--host-copy-gb-per-s",
    "checkpoint_interval_min": "--checkpoint-interval-min",
}
"""The CLI option that sets each OpsParams field (error messages name the option)."""


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
    """Asynchronous save: training blocks only for the copy to host memory."""
    host_copy_gb_per_s: float = HOST_COPY_GB_PER_S
    """Device-to-host copy rate per GPU for asynchronous save, decimal GB/s."""
    checkpoint_interval_min: float | None = None
    """Minutes of training between checkpoints; None = Daly's optimum."""

    def __post_init__(self) -> None:
        for name, option in OPTION_NAMES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise InputError(f"{option}: expected a number (got {value!r})")
            if not math.isfinite(value) or value <= 0:
                raise InputError(f"{option}: must be a positive number (got {value!r})")
        if self.pue < 1:
            raise InputError(f"--pue: must be >= 1 (facility power / IT power; got {self.pue!r})")


# ----------------------------------------------------------------------------- parsing

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
_TOKENS_RE = re.compile(r"^\s*([0-9][0-9_,]*\.?[0-9_]*(?:[eE][+-]?[0-9]+)?)\s*([KMBGTP]?)\s*$")


def parse_tokens(text: str, option: str = "--tokens") -> int:
    """A token count: '15T', '2.5e12', '300B', '1.2M', '500k', '1_000_000' -> int (> 0).

    Suffixes are decimal: K 1e3, M 1e6, B or G 1e9, T 1e12, P 1e15 (case-insensitive)."""
    m = _TOKENS_RE.match(text.upper()) if isinstance(text, str) else None
    if m is None:
        raise InputError(
            f"{option}: expected a token count like 15T, 300B, 1.2M or 2.5e12 (got {text!r})"
        )
    number, suffix = m.groups()
    try:
        value = float(number.replace("_", "").replace(",", "")) * _SUFFIX[suffix]
    except ValueError:
        raise InputError(f"{option}: expected a token count (got {text!r})") from None
    if not math.isfinite(value) or value < 1:
        raise InputError(f"{option}: must be at least one token (got {text!r})")
    return round(value)


# ----------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class Operations:
    """Days, dollars, energy and goodput of a job and layout, for a token budget (or None)."""

    num_gpus: int
    nodes: int
    tokens: int | None
    steps: int | None
    tokens_per_s: float
    """Cluster tokens/s without failures."""
    effective_tokens_per_s: float
    """tokens_per_s x goodput."""
    train_s: float | None
    """Failure-free training time for the budget."""
    wall_s: float | None
    """Wall-clock time including checkpoints, restarts and re-done work."""
    gpu_hours: float | None
    price_usd_per_gpu_hour: float | None
    price_source: str
    cost_usd: float | None
    gpu_power_w: float
    node_overhead_w: float
    facility_power_w: float
    energy_mwh: float | None
    resilience: Resilience
    params: OpsParams

    @property
    def pue(self) -> float:
        return self.params.pue

    @property
    def days(self) -> float | None:
        return None if self.wall_s is None else self.wall_s / SECONDS_PER_DAY

    @property
    def days_no_failures(self) -> float | None:
        return None if self.train_s is None else self.train_s / SECONDS_PER_DAY

    @property
    def expected_failures(self) -> float | None:
        return None if self.wall_s is None else self.wall_s / self.resilience.mtbf_s

    @property
    def usd_per_million_tokens(self) -> float | None:
        """$ per million trained tokens, failures included (None without a price)."""
        if self.price_usd_per_gpu_hour is None:
            return None
        per_hour = self.num_gpus * self.price_usd_per_gpu_hour
        return per_hour / SECONDS_PER_HOUR / self.effective_tokens_per_s * 1e6


def price(job: Job, ops: OpsParams) -> tuple[float | None, str]:
    """$/GPU-hour and where it comes from: the option, the catalog, or nowhere (None)."""
    if ops.price_usd_per_gpu_hour is not None:
        return ops.price_usd_per_gpu_hour, "--price"
    gpu = job.cluster.gpu
    if gpu.price_usd_per_gpu_hour is not None:
        return gpu.price_usd_per_gpu_hour, gpu.price_source or f"catalog ({gpu.name})"
    return None, f"no catalog price for {gpu.name}; give --price"


def power_w(job: Job, ops: OpsParams) -> tuple[float, float, float]:
    """(per-GPU W, per-node overhead W, facility W = (N x GPU + nodes x node) x PUE)."""
    c = job.cluster
    gpu_w = ops.gpu_power_w if ops.gpu_power_w is not None else c.power_w
    node_w = (
        ops.node_overhead_w
        if ops.node_overhead_w is not None
        else NODE_OVERHEAD_W_PER_GPU * c.gpus_per_node
    )
    facility = (c.num_gpus * gpu_w + num_nodes(job) * node_w) * ops.pue
    return gpu_w, node_w, facility


def training_steps(job: Job, tokens: int, option: str = "--tokens") -> int:
    """ceil(tokens / tokens_per_step); a budget smaller than one step is an input error."""
    per_step = job.tokens_per_step
    if tokens < per_step:
        raise InputError(
            f"{option}: {tokens:,} tokens is less than one optimizer step "
            f"({per_step:,} tokens = global_batch_size {job.global_batch_size} x seq_length "
            f"{job.seq_length})"
        )
    return -(-tokens // per_step)


def operations(
    job: Job, perf: Performance, tokens: int | None, ops: OpsParams | None = None
) -> Operations:
    """Everything at once for `explain`, `scale` and the launch headers (`summary_lines`)."""
    ops = ops or OpsParams()
    res = resilience(job, perf.step_time_s, ops)
    n = job.cluster.num_gpus
    tps = job.tokens_per_step / perf.step_time_s
    usd, source = price(job, ops)
    gpu_w, node_w, facility = power_w(job, ops)
    steps = train = wall = gpu_hours = cost = energy = None
    if tokens is not None:
        steps = training_steps(job, tokens)
        train = steps * perf.step_time_s
        wall = train / res.goodput
        gpu_hours = n * wall / SECONDS_PER_HOUR
        cost = None if usd is None else gpu_hours * usd
        energy = facility * wall / SECONDS_PER_HOUR / 1e6  # W x h -> MWh
    return Operations(
        num_gpus=n,
        nodes=num_nodes(job),
        tokens=tokens,
        steps=steps,
        tokens_per_s=tps,
        effective_tokens_per_s=tps * res.goodput,
        train_s=train,
        wall_s=wall,
        gpu_hours=gpu_hours,
        price_usd_per_gpu_hour=usd,
        price_source=source,
        cost_usd=cost,
        gpu_power_w=gpu_w,
        node_overhead_w=node_w,
        facility_power_w=facility,
        energy_mwh=energy,
        resilience=res,
        params=ops,
    )


def objective_value(
    job: Job,
    perf: Performance,
    objective: str,
    ops_params: OpsParams | None = None,
) -> float:
    """A score to rank layouts by (lower is better), per million tokens trained:

    throughput  seconds per 1M tokens, failure-free (step_time / tokens_per_step x 1e6)
    goodput     wall-clock seconds per 1M tokens with checkpoints and failures (/ goodput)
    cost        $ per 1M tokens with failures; GPU-hours per 1M tokens when the GPU has no price
                and no --price was given (same ranking for one GPU type)
    """
    if objective not in OBJECTIVES:
        raise InputError(
            f"--objective: expected one of {', '.join(OBJECTIVES)} (got {objective!r})"
        )
    ops_params = ops_params or OpsParams()
    s_per_mtok = perf.step_time_s / job.tokens_per_step * 1e6
    if objective == "throughput":
        return s_per_mtok
    wall_per_mtok = s_per_mtok / resilience(job, perf.step_time_s, ops_params).goodput
    if objective == "goodput":
        return wall_per_mtok
    gpu_hours = job.cluster.num_gpus * wall_per_mtok / SECONDS_PER_HOUR
    usd, _ = price(job, ops_params)
    return gpu_hours if usd is None else gpu_hours * usd


# ----------------------------------------------------------------------------- text


def _scaled(x: float, units: tuple[tuple[str, float], ...], spec: str) -> str | None:
    """x in the largest of the (suffix, scale) units it reaches, largest first (1.5e6 -> '1.5M');
    None below the smallest."""
    for suffix, scale in units:
        if abs(x) >= scale:
            return f"{x / scale:{spec}}{suffix}"
    return None


def format_si(x: float, spec: str = ".3g") -> str:
    """67800 -> '67.8k', 1.35e5 -> '135k', 12.5 -> '12.5' (G, M, k)."""
    return _scaled(x, (("G", 1e9), ("M", 1e6), ("k", 1e3)), spec) or f"{x:{spec}}"


def format_tokens(n: float) -> str:
    """15e12 -> '15T', 3e11 -> '300B', 1.2e6 -> '1.2M'."""
    units = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))
    return _scaled(n, units, ".3g") or f"{n:.0f}"


def format_money(usd: float) -> str:
    """7.1e7 -> '$71M', 950 -> '$950'."""
    scaled = _scaled(usd, (("B", 1e9), ("M", 1e6), ("k", 1e3)), ".3g")
    return f"${scaled or f'{usd:,.0f}'}"


def format_bytes(n: float) -> str:
    """5.68e12 -> '5.68 TB'."""
    return _scaled(n, ((" TB", 1e12), (" GB", 1e9), (" MB", 1e6)), ".3g") or f"{n:.0f} B"


def format_duration(seconds: float) -> str:
    if seconds >= 2 * SECONDS_PER_HOUR:
        return f"{seconds / SECONDS_PER_HOUR:.1f} h"
    if seconds >= 600:
        return f"{seconds / 60:.0f} min"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1e3:.2g} ms"


def cost_text(o: Operations) -> str | None:
    """'$71M at $2/GPU-hour', or None without a price (or a budget)."""
    if o.cost_usd is None or o.price_usd_per_gpu_hour is None:
        return None
    return f"{format_money(o.cost_usd)} at ${o.price_usd_per_gpu_hour:g}/GPU-hour"


def summary_lines(o: Operations) -> list[str]:
    """Plain sentences (no comment marker) describing an Operations, for headers and logs."""
    r = o.resilience
    lines: list[str] = []
    if o.tokens is not None and o.days is not None and o.gpu_hours is not None:
        cost = f"{cost_text(o) or 'cost unknown'} ({o.price_source})"
        lines.append(
            f"{format_tokens(o.tokens)} tokens in {o.steps:,} steps: {o.days:.1f} days "
            f"wall-clock ({o.days_no_failures:.1f} without failures), "
            f"{o.gpu_hours / 1e6:.3g}M GPU-hours, {cost}"
        )
        lines.append(
            f"energy {o.energy_mwh:,.0f} MWh: {o.facility_power_w / 1e6:.2f} MW facility "
            f"({o.gpu_power_w:g} W/GPU + {o.node_overhead_w:g} W/node overhead, PUE {o.pue:g})"
        )
    mode = "async" if r.async_checkpoint else "sync"
    lines.append(
        f"checkpoint {format_bytes(r.checkpoint_bytes)} ({mode}, write "
        f"{format_duration(r.checkpoint_write_s)}, blocks "
        f"{format_duration(r.checkpoint_blocking_s)}) every {r.interval_steps:,} steps = "
        f"{format_duration(r.interval_s)}; MTBF {format_duration(r.mtbf_s)} at "
        f"{o.params.failure_rate_per_gpu_day:.3g} failures/GPU-day"
    )
    lines.append(
        f"goodput {r.goodput:.1%} (checkpoints {r.lost_checkpoint:.1%}, failures "
        f"{r.lost_failures:.1%}); effective {o.effective_tokens_per_s:,.0f} tokens/s"
    )
    return lines
