"""Values remembered per job and key, for the search's hot path.

The search scores thousands of layouts of one job that share most of what the model computes
(one layer's time, a pipeline rank's states). `JobMemo` keeps those per job, by identity: an
entry holds the job itself, so its id is not reused while the entry lives, and a memo forgets
everything once it holds more than a few jobs (a process plans one job, a benchmark a few dozen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, ClassVar, Generic, TypeVar

from planner.inputs.plan import Job

K = TypeVar("K")
V = TypeVar("V")


class JobMemo(Generic[K, V]):
    """A dict per job (`of`), forgotten all at once past `jobs` jobs or on `clear`; every memo
    is forgotten by `forget_all` (when a model constant changes: `calibratable`)."""

    _every: ClassVar[list[JobMemo[Any, Any]]] = []

    def __init__(self, jobs: int = 8) -> None:
        self._jobs = jobs
        self._entries: dict[int, tuple[Job, dict[K, V]]] = {}
        self._dependants: list[JobMemo[Any, Any]] = []
        JobMemo._every.append(self)

    def clears(self, *memos: JobMemo[Any, Any]) -> None:
        """Let `clear` clear `memos` too: memos of values computed along with this one's (a
        caller that clears this one to recompute its values, after setting a constant, must
        not read theirs)."""
        self._dependants += memos

    @classmethod
    def forget_all(cls) -> None:
        """Clear every memo: what they hold was computed with the constants of their time."""
        for memo in cls._every:
            memo.clear()

    def of(self, job: Job) -> dict[K, V]:
        entry = self._entries.get(id(job))
        if entry is None or entry[0] is not job:
            self._make_room()
            entry = self._entries[id(job)] = (job, {})
        return entry[1]

    def share(self, job: Job, like: Job) -> None:
        """Let `job` read and fill `like`'s entries: for a job that differs from `like` only
        in what this memo's values do not depend on (the caller's proof; e.g. the number of
        GPUs, for the layer times of `planner.search.scaling`)."""
        self._make_room()
        self._entries[id(job)] = (job, self.of(like))

    def _make_room(self) -> None:
        """Forget everything once `jobs` distinct dicts are held (jobs that share one count
        once)."""
        if len({id(d) for _, d in self._entries.values()}) >= self._jobs:
            self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()
        for memo in self._dependants:
            memo.clear()


class ModelMemo(Generic[K, V]):
    """Values per model (by identity: an entry holds the model, so its id is not reused while
    the entry lives; hashing a model would hash its every field) and key; forgotten all at once
    past `size` entries. For what depends on the model alone, never on a calibrated constant."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._entries: dict[tuple[int, K], tuple[object, V]] = {}

    def get(self, model: object, key: K, make: Callable[[], V]) -> V:
        hit = self._entries.get((id(model), key))
        if hit is not None and hit[0] is model:
            return hit[1]
        if len(self._entries) >= self._size:
            self._entries.clear()
        value = make()
        self._entries[id(model), key] = (model, value)
        return value

    def clear(self) -> None:
        self._entries.clear()


_HASHED: dict[type, tuple[str, ...]] = {}
"""Per dataclass, the fields its generated `__hash__` reads (`kept_hash`)."""


def kept_hash(obj: Any) -> int:
    """The hash a frozen dataclass's generated `__hash__` returns (of the tuple of its fields
    that hash, in field order: the same value), computed once per object and kept in its
    `__dict__` under "_hash" (no field: `__eq__`, `__repr__` and `dataclasses.replace` read
    the fields alone). For the values the memos here are keyed on, asked again on every look-up:
    a `Shard` has forty fields, and a tuple's hash is never remembered. Only for classes whose
    instances nothing changes after construction and whose `__dict__` nothing else reads."""
    d = obj.__dict__
    h = d.get("_hash")
    if h is None:
        names = _HASHED.get(type(obj))
        if names is None:
            hashed = (f for f in fields(obj) if (f.compare if f.hash is None else f.hash))
            names = _HASHED[type(obj)] = tuple(f.name for f in hashed)
        h = d["_hash"] = hash(tuple([d[n] for n in names]))
    return h
