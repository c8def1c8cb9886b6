"""Model serving on the local backend: model-server and feature-service replicas as supervised
processes, each in its cgroups (the ``serving`` capability)."""
