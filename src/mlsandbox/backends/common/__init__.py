"""Implementations every backend that runs the real services shares: the S3 and MLflow clients, the
Prefect client, the job contract of the workloads (result line, environment, log tail), MinIO's admin
API, the wall clock and the audit log in files."""
