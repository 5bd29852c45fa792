"""Operations: days, GPU-hours, dollars, energy and goodput under failures for a token budget.

Pure functions over (job, performance); nothing here prints, parses or reads files. Every figure
the code assumes is a named default in planner/ops/assumptions.py with its source, overridden
through `OpsParams`.

Time. A budget of B tokens takes S = ceil(B / tokens_per_step) optimizer steps, i.e.
T_train = S x step_time seconds without failures. Wall-clock time is T_wall = T_train / goodput
(below); days = T_wall / 86400.

Cost. GPU-hours = N x T_wall / 3600 (GPUs are paid for while they checkpoint, restart and redo
work); cost = GPU-hours x price ($/GPU-hour: the catalog's `price_usd_per_gpu_hour` and its
`price_source`, or `--price`).

Energy. IT power P_it = N x P_gpu + nodes x P_node, nodes = ceil(N / gpus_per_node), P_gpu the
GPU's TDP or the plan's `[cluster] power_limit_w` (`--gpu-power-w` overrides, up to that power:
training typically draws 70-90 % of TDP, so the default is an upper bound) and P_node the
per-node overhead (CPUs, DRAM, NICs, switches' share, fans).
Facility power = P_it x PUE; energy = facility power x T_wall (GPUs stay powered while they wait).

Checkpoints, failures and goodput: planner/ops/resilience.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import Job
from planner.inputs.units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from planner.model.performance import Performance
from planner.ops.assumptions import (
    NODE_OVERHEAD_W_PER_GPU,
    PUE,
    AssumptionError,
    OpsParams,
    for_job,
)
from planner.ops.resilience import Resilience, least_wall_per_work, num_nodes, resilience

OBJECTIVES: tuple[str, ...] = ("throughput", "cost", "goodput")


@dataclass(frozen=True)
class Budget:
    """The figures of a token budget (`Operations.budget`)."""

    tokens: int
    steps: int
    days: float
    days_no_failures: float
    gpu_hours: float
    energy_mwh: float


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

    def budget(self) -> Budget | None:
        """The token budget's figures, None without a budget."""
        if self.tokens is None or self.steps is None or self.days is None:
            return None
        assert self.days_no_failures is not None and self.gpu_hours is not None
        assert self.energy_mwh is not None  # set with the budget (`operations`)
        return Budget(
            self.tokens, self.steps, self.days, self.days_no_failures, self.gpu_hours,
            self.energy_mwh,
        )  # fmt: skip

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
    if job.pools:  # each pool at its own price (its plan's, or its GPU's), per GPU on average
        unpriced = [p for p in job.pools if p.price is None]
        if unpriced:
            return None, f"no price for pool {unpriced[0].name} ({unpriced[0].cluster.gpu.name})"
        total = sum(p.price * p.cluster.num_gpus for p in job.pools if p.price is not None)
        each = ", ".join(f"{p.name} ${p.price:g}" for p in job.pools)
        return total / job.cluster.num_gpus, f"the pools' prices, per GPU on average ({each})"
    gpu = job.cluster.gpu
    if gpu.price_usd_per_gpu_hour is not None:
        return gpu.price_usd_per_gpu_hour, gpu.price_source or f"catalog ({gpu.name})"
    return None, f"no catalog price for {gpu.name}; give --price"


def power_w(job: Job, ops: OpsParams) -> tuple[float, float, float]:
    """(per-GPU W, per-node overhead W, facility W = (N x GPU + nodes x node) x PUE); with
    pools each pool's GPUs and nodes at their own power, the first two their averages."""
    gpu_total = node_total = 0.0
    for c in [p.cluster for p in job.pools] or [job.cluster]:
        _check_gpu_power(ops.gpu_power_w, c)
        gpu_w = ops.gpu_power_w if ops.gpu_power_w is not None else c.power_w
        node_w = (
            ops.node_overhead_w
            if ops.node_overhead_w is not None
            else NODE_OVERHEAD_W_PER_GPU * c.gpus_per_node
        )
        gpu_total += c.num_gpus * gpu_w
        node_total += -(-c.num_gpus // c.gpus_per_node) * node_w
    facility = (gpu_total + node_total) * ops.pue
    gpu = ops.gpu_power_w if ops.gpu_power_w is not None else gpu_total / job.cluster.num_gpus
    node = ops.node_overhead_w if ops.node_overhead_w is not None else node_total / num_nodes(job)
    return gpu, node, facility


def _check_gpu_power(watts: float | None, cluster: ClusterSpec) -> None:
    """A GPU's power is at most its TDP or the plan's power_limit_w below it (`c.power_w`), as
    the plan's own power_limit_w is refused above the TDP (`hardware.ClusterSpec`): the average
    draw of a GPU cannot exceed the power it is allowed."""
    cap = cluster.power_w
    if watts is None or watts <= cap:
        return
    gpu = cluster.gpu
    what = (
        f"the plan's power_limit_w ({cap:g} W)"
        if cluster.power_limit_w is not None
        else f"{gpu.name}'s TDP ({gpu.tdp_w:g} W)"
    )
    raise AssumptionError(
        "gpu_power_w", f"{watts:g} W per GPU is above {what}: a GPU draws at most that"
    )


def _finite(figure: str, value: float | None, lead: str, terms: Callable[[], str]) -> None:
    """An AssumptionError where finite options multiply past a float (an infinite figure, which
    JSON cannot hold), under `lead`, the OpsParams field (or "tokens") of the option at fault,
    naming each factor with its value and where it came from (an option, or the plan's GPU and
    price): `terms()`, spelled only then. The bounds on the options (`assumptions`, the token
    budget's `units.MAX_TOKENS`) leave only the price to take a figure there."""
    if value is not None and not math.isfinite(value):
        raise AssumptionError(lead, f"the {figure} overflows a float: {terms()}")


def _power_lead(job: Job, ops: OpsParams) -> str | None:
    """The facility power's option furthest above its default (as a multiple of it): --pue or
    --node-overhead-w (--gpu-power-w is at most the GPU's power, its default); None where
    neither is above it."""
    ratios = {"pue": ops.pue / PUE}
    if ops.node_overhead_w is not None:
        per_node = NODE_OVERHEAD_W_PER_GPU * job.cluster.gpus_per_node
        ratios["node_overhead_w"] = ops.node_overhead_w / per_node
    lead = max(ratios, key=lambda k: ratios[k])
    return lead if ratios[lead] > 1 else None


def training_steps(job: Job, tokens: int, given: str | None = None) -> int:
    """ceil(tokens / tokens_per_step); a budget smaller than one step is an AssumptionError
    spelling it as `given` (as the user wrote it) where given."""
    per_step = job.tokens_per_step
    if tokens < per_step:
        raise AssumptionError(
            "tokens",
            f"{given.strip() if given else f'{tokens:,}'} tokens is less than one optimizer step "
            f"({per_step:,} tokens = global_batch_size {job.global_batch_size} x seq_length "
            f"{job.seq_length})",
        )
    return -(-tokens // per_step)


def operations(
    job: Job,
    perf: Performance,
    tokens: int | None,
    ops: OpsParams | None = None,
    zero_stage: int = 0,
) -> Operations:
    """Everything at once for `explain`, `scale` and the launch headers (`summary_lines`);
    `zero_stage`, the layout's: the checkpoint's size and so its copy and write times read it
    (`resilience`: Megatron-FSDP's fsdp_dtensor checkpoint at ZeRO 2 / 3). `ops`, the options'
    (None: the defaults), taken with the job's own asynchronous save (`assumptions.for_job`)."""
    ops = for_job(job, ops)
    steps = None if tokens is None else training_steps(job, tokens)
    res = resilience(job, perf.step_time_s, ops, steps, zero_stage=zero_stage)
    n = job.cluster.num_gpus
    tps = job.tokens_per_step / perf.step_time_s
    usd, source = price(job, ops)
    gpu_w, node_w, facility = power_w(job, ops)
    train = wall = gpu_hours = cost = energy = None
    if steps is not None:
        train = steps * perf.step_time_s
        wall = train / res.goodput
        gpu_hours = n * wall / SECONDS_PER_HOUR
        cost = None if usd is None else gpu_hours * usd
        energy = facility * wall / SECONDS_PER_HOUR / 1e6  # W x h -> MWh
    power_lead = _power_lead(job, ops)

    def power() -> str:
        return (
            f"{n} GPUs x {gpu_w:.3g} W (--gpu-power-w or the GPU's power) + "
            f"{num_nodes(job)} nodes x {node_w:.3g} W (--node-overhead-w), "
            f"x PUE {ops.pue:.3g} (--pue)"
        )

    _finite("facility power", facility, power_lead or "pue", power)
    if wall is not None and steps is not None:
        step_s = perf.step_time_s

        def budget() -> str:
            return f"{steps:.3g} steps (--tokens {tokens:.3g}) x {step_s:.3g} s / goodput"

        _finite("wall-clock time", wall, "tokens", budget)
        _finite(
            "energy",
            energy,
            power_lead or "tokens",
            lambda: f"{facility:.3g} W ({power()}) x {wall:.3g} s ({budget()})",
        )
        _finite(
            "cost",
            cost,
            "tokens" if ops.price_usd_per_gpu_hour is None else "price_usd_per_gpu_hour",
            lambda: f"{gpu_hours:.3g} GPU-hours ({budget()}) x ${usd:.3g} ({source})",
        )
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
    zero_stage: int = 0,
) -> float:
    """A score to rank layouts by (lower is better), per million tokens trained:

    throughput  seconds per 1M tokens, failure-free (step_time / tokens_per_step x 1e6)
    goodput     wall-clock seconds per 1M tokens with checkpoints and failures (/ goodput)
    cost        $ per 1M tokens with failures; GPU-hours per 1M tokens when the GPU has no price
                and no --price was given (same ranking for one GPU type)
    """
    if objective not in OBJECTIVES:
        raise AssumptionError(
            "objective", f"expected one of {', '.join(OBJECTIVES)} (got {objective!r})"
        )
    ops_params = for_job(job, ops_params)  # the job's asynchronous save, as `operations`
    s_per_mtok = perf.step_time_s / job.tokens_per_step * 1e6
    if objective == "throughput":
        return s_per_mtok
    res = resilience(job, perf.step_time_s, ops_params, zero_stage=zero_stage)
    return _of_wall(job, s_per_mtok / res.goodput, objective, ops_params)


def objective_floor(
    job: Job, step_time_s: float, objective: str, ops_params: OpsParams | None = None
) -> float:
    """The least `objective_value` any layout of the job whose step takes at least `step_time_s`
    can have: for goodput and cost, the step's seconds per 1M tokens times the job's
    `resilience.least_wall_per_work` (no goodput of the job, at any step, interval or ZeRO
    stage, is above its inverse), then as `objective_value` prices wall time."""
    ops_params = for_job(job, ops_params)
    s_per_mtok = step_time_s / job.tokens_per_step * 1e6
    if objective == "throughput":
        return s_per_mtok
    return _of_wall(job, s_per_mtok * least_wall_per_work(job, ops_params), objective, ops_params)


def _of_wall(job: Job, wall_per_mtok: float, objective: str, ops_params: OpsParams) -> float:
    """`objective_value` of `wall_per_mtok` wall-clock seconds per 1M tokens (failures and
    checkpoints counted): itself for goodput, GPU-hours or dollars for cost."""
    if objective == "goodput":
        return wall_per_mtok
    gpu_hours = job.cluster.num_gpus * wall_per_mtok / SECONDS_PER_HOUR
    usd, source = price(job, ops_params)
    if usd is None:
        return gpu_hours
    _finite(
        "cost",
        gpu_hours * usd,
        "price_usd_per_gpu_hour",
        lambda: f"{gpu_hours:.3g} GPU-hours a million tokens x ${usd:.3g} ({source})",
    )
    return gpu_hours * usd
