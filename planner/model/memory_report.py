"""What `planner.model.memory` reports: the bytes on one GPU of each pipeline stage
(`StageMemory`) and the layout's report over them against the capacity (`MemoryReport`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one GPU of one pipeline stage."""

    stage: int
    layers: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    """Activation bytes, the allocator's fragmentation on them included."""
    other: float
    """Buffers (FP8 weight caches, gradient buckets, gathered ZeRO-3 layers, their fragmentation,
    workspaces, communication buffers) and the fixed costs (CUDA context, NCCL)."""
    unallocated: float = 0.0
    """Of the above, what PyTorch's allocator does not count as allocated: the CUDA context, NCCL,
    the buffers other libraries allocate themselves, and the fragmentation (reserved but free)."""
    grad_copy: float = 0.0
    """What the optimizer step holds beside the states (`rank_states.step_bytes`: the fp32 copies
    of 16-bit gradients, Muon's working set, the unscaled 16-bit states; the allocator's
    fragmentation on them included): after the activations are freed, so the stage's peak holds
    the larger of the two."""
    validation: float = 0.0
    """What torchtitan's validation forward holds beside the states after a step
    (`titan_validation.validation_bytes`, the allocator's fragmentation on it included): like
    `grad_copy`, with the activations freed, so the stage's peak holds the largest of the three."""
    pool: str = ""
    """The pool this stage runs on ("" for a one-kind cluster)."""
    gpu: str = ""
    """Its GPU's catalog name ("" for a one-kind cluster: the cluster's)."""
    capacity: float = 0.0
    """Usable bytes of its GPU (with pools; 0 = the report's `capacity`)."""

    @property
    def total(self) -> float:
        """The stage's peak: the model states and buffers, and the largest of its activations
        (in the backward), what the optimizer step holds (`grad_copy`) and what a validation
        forward does (`validation`)."""
        held = max(self.activations, self.grad_copy, self.validation)
        return self.weights + self.grads + self.optimizer + held + self.other

    @property
    def at_step(self) -> bool:
        """Whether the stage peaks at the optimizer step (`grad_copy` above its activations and
        the validation's), not in the backward."""
        return self.grad_copy > max(self.activations, self.validation)

    @property
    def at_validation(self) -> bool:
        """Whether the stage peaks in torchtitan's validation forward (`validation` above its
        activations and the optimizer step's)."""
        return self.validation > max(self.activations, self.grad_copy)

    @property
    def allocated(self) -> float:
        """What `torch.cuda.max_memory_allocated()` would report on this stage's worst rank."""
        return self.total - self.unallocated


@dataclass(frozen=True)
class MemoryReport:
    stages: tuple[StageMemory, ...]
    capacity: float
    """Usable bytes: the GPU's memory less the headroom."""
    physical: float
    headroom_pct: float

    def room(self, st: StageMemory) -> float:
        """The usable bytes of a stage's GPU."""
        return st.capacity or self.capacity

    @cached_property
    def worst(self) -> StageMemory:
        """The stage nearest its capacity (with one GPU kind: the largest); found once per
        report (`peak`, `fits` and `shortfall` all read it, the search's rungs each)."""
        return max(self.stages, key=lambda st: st.total - self.room(st))

    @property
    def peak(self) -> float:
        return self.worst.total

    @property
    def fits(self) -> bool:
        return self.shortfall <= 0

    @property
    def shortfall(self) -> float:
        """Bytes over capacity on the worst stage (<= 0 when it fits)."""
        st = self.worst
        return st.total - self.room(st)


def new_stage(
    stage: int,
    layers: int,
    weights: float,
    grads: float,
    optimizer: float,
    activations: float,
    other: float,
    unallocated: float,
    grad_copy: float,
    validation: float = 0.0,
) -> StageMemory:
    """`StageMemory` of one GPU kind (no pool, gpu or capacity of its own), made without the
    frozen dataclass's `__init__`, which sets its thirteen fields one `object.__setattr__` at a
    time (the search makes one per stage of every memory estimate): the same fields, in field
    order, the same values."""
    st = object.__new__(StageMemory)
    object.__setattr__(
        st,
        "__dict__",
        {
            "stage": stage,
            "layers": layers,
            "weights": weights,
            "grads": grads,
            "optimizer": optimizer,
            "activations": activations,
            "other": other,
            "unallocated": unallocated,
            "grad_copy": grad_copy,
            "validation": validation,
            "pool": "",
            "gpu": "",
            "capacity": 0.0,
        },
    )
    return st
