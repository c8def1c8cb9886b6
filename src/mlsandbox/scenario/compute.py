"""The compute pool of a scenario: a machine catalog (sizes and prices) and the pool's capacity."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Machine(_Model):
    """A machine type: the CPU quota and memory limit a job on it gets, and its price."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")
    cpus: float = Field(gt=0, le=64)
    memory_mb: int = Field(ge=128, le=1_048_576)
    credits_per_second: float = Field(ge=0)
    """What a reserved machine costs per second while it sits idle (no job of the episode on it)."""


DEFAULT_MACHINES: tuple[Machine, ...] = (
    Machine(name="cpu-small", cpus=1.0, memory_mb=2048, credits_per_second=0.05),
    Machine(name="cpu-large", cpus=2.0, memory_mb=8192, credits_per_second=0.2),
)


class ComputePool(_Model):
    """Machines the episode may use and how much of them fits at once.

    Without a capacity (the default) every job starts at once, as before pools existed. With one, a job
    or reservation that does not fit in what is free waits in the queue (jobs) or is refused
    (reservations) until capacity frees."""

    machines: list[Machine] = Field(default_factory=lambda: list(DEFAULT_MACHINES), min_length=1)
    capacity_cpus: float | None = Field(default=None, gt=0)
    """CPU cores the pool holds (None: no limit)."""
    capacity_memory_mb: int | None = Field(default=None, ge=128)
    """Memory the pool holds (None: no limit)."""
    max_reservations: int = Field(default=4, ge=0, le=32)

    @model_validator(mode="after")
    def _unique(self) -> ComputePool:
        names = [m.name for m in self.machines]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate machine names: {names}")
        for m in self.machines:
            if self.capacity_cpus is not None and m.cpus > self.capacity_cpus:
                raise ValueError(f"machine {m.name!r} ({m.cpus:g} CPU) is larger than the pool")
            if self.capacity_memory_mb is not None and m.memory_mb > self.capacity_memory_mb:
                raise ValueError(f"machine {m.name!r} ({m.memory_mb} MiB) is larger than the pool")
        return self

    def machine(self, name: str) -> Machine:
        for m in self.machines:
            if m.name == name:
                return m
        raise KeyError(name)
