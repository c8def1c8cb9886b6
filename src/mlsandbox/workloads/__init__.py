"""Workloads: the programs jobs run, as ``python -m mlsandbox.workloads.<name>``, on every backend.

- ``trainer``: fits a scikit-learn pipeline on a table in S3 and logs it to MLflow.
- ``burn``: allocates memory, burns CPU, sleeps, exits with a chosen status (tests, faults).

Each is self-contained (nothing imported from the rest of mlsandbox) so that it runs in any image, and
reports success with a last stdout line ``MLSANDBOX_RESULT {json}``. Nothing is imported here: starting a
workload must stay cheap.
"""
