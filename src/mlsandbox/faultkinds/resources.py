"""Faults of resources: the episode's jobs' limits, CPU, its bucket's space, its compute pool."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlsandbox.faultkinds.base import FaultKind, FaultParams, Mechanism


class MemoryLimitFault(FaultParams):
    """The memory limit of the episode's jobs is cut to ``memory_mb``: a job needing more is OOM-killed
    by the kernel (exit 137). Applies to running jobs and to jobs started while the fault is active."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "resource"
    type: Literal["memory_limit"] = "memory_limit"
    memory_mb: int = Field(default=64, ge=8, le=8192)


MEMORY_LIMIT = FaultKind(
    params=MemoryLimitFault,
    symptom="jobs are OOM-killed (exit code 137)",
    behaviour="MemoryLimit",
    backends={
        "local": Mechanism("cgroup", "the jobs' memory limit cut (an rlimit without cgroups)"),
        "kube": Mechanism("pod-resize", "the jobs' pods resized in place"),
        "sim": Mechanism("simulated", "a job over the limit is killed with exit code 137"),
    },
)


class CpuThrottleFault(FaultParams):
    """The CPU quota (cgroup ``cpu.cfs_quota_us``) of the episode's jobs is cut to ``cpus`` cores."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "resource"
    type: Literal["cpu_throttle"] = "cpu_throttle"
    cpus: float = Field(default=0.05, ge=0.01, le=2)


CPU_THROTTLE = FaultKind(
    params=CpuThrottleFault,
    symptom="jobs run much slower than they should",
    behaviour="CpuThrottle",
    backends={
        "local": Mechanism("cgroup", "the jobs' cpu.cfs_quota_us cut"),
        "kube": Mechanism("pod-resize", "the jobs' pods resized in place"),
        "sim": Mechanism("simulated", "the jobs' progress slowed to the quota"),
    },
)


class DiskFullFault(FaultParams):
    """A hard quota of ``quota_bytes`` on the episode's bucket (MinIO admin API): writes fail with the
    real ``XMinioAdminBucketQuotaExceeded`` error."""

    targets = ("bucket",)
    default_target = "bucket"
    category = "resource"
    type: Literal["disk_full"] = "disk_full"
    quota_bytes: int = Field(default=1, ge=1)


DISK_FULL = FaultKind(
    params=DiskFullFault,
    symptom="writes to the bucket fail with XMinioAdminBucketQuotaExceeded",
    behaviour="DiskFull",
    backends={
        "local": Mechanism("minio-admin", "a hard bucket quota"),
        "kube": Mechanism("minio-admin", "a hard bucket quota"),
        "sim": Mechanism("simulated", "puts over the quota fail with MinIO's error"),
    },
)


class CpuContentionFault(FaultParams):
    """``workers`` CPU burners (``mlsandbox.workloads.burn``) compete for the target's CPU: the burners and
    the target's processes are pinned to one CPU (``pin``; else the burners spread over every CPU), so the
    target gets a fraction of it and its work slows. Jobs started while active are pinned too."""

    targets = ("jobs", "service")
    default_target = "jobs"
    category = "resource"
    type: Literal["cpu_contention"] = "cpu_contention"
    workers: int = Field(default=3, ge=1, le=32)
    pin: bool = True


CPU_CONTENTION = FaultKind(
    params=CpuContentionFault,
    symptom="the target's work slows down: something else takes its CPU",
    behaviour="CpuContention",
    backends={
        "local": Mechanism("burners", "CPU burner processes pinned with the target to one CPU"),
        "kube": Mechanism("chaos-mesh", "StressChaos cpu stressors on the target's pods"),
        "sim": Mechanism("simulated", "the target gets 1 / (1 + workers) of a CPU"),
    },
)


class PoolShrinkFault(FaultParams):
    """``cpus`` cores and ``memory_mb`` MiB are taken out of the episode's compute pool (lost capacity):
    running jobs go on, new jobs queue and reservations are refused while they do not fit; recovery gives
    the capacity back and queued jobs that fit start. Needs a pool with a capacity in that dimension."""

    targets = ("pool",)
    default_target = "pool"
    category = "resource"
    type: Literal["pool_shrink"] = "pool_shrink"
    cpus: float = Field(default=0.0, ge=0, le=1024)
    memory_mb: int = Field(default=0, ge=0, le=16_777_216)

    @model_validator(mode="after")
    def _something(self) -> PoolShrinkFault:
        if self.cpus <= 0 and self.memory_mb <= 0:
            raise ValueError("pool_shrink takes cpus or memory_mb (or both) greater than 0")
        return self


POOL_SHRINK = FaultKind(
    params=PoolShrinkFault,
    symptom="new jobs queue and reservations are refused: the pool has less capacity",
    behaviour="PoolShrink",
    backends={
        "local": Mechanism("compute-pool", "capacity taken out of the world's compute pool"),
        "kube": Mechanism("compute-pool", "capacity taken out of the world's compute pool"),
        "sim": Mechanism("compute-pool", "capacity taken out of the world's compute pool"),
    },
)
