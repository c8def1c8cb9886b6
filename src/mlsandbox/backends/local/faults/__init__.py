"""Fault mechanisms of the local backend (the ``faults`` capability): signals, cgroups, Toxiproxy,
MinIO quotas, fault hooks, CPU contention, each journaled so a crash leaves nothing behind."""
