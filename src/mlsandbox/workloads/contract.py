"""The contract between a workload and whatever runs it, the same on every backend: how a job reports
its result (a last ``MLSANDBOX_RESULT {json}`` line), how the runner annotates its log, the environment
a workload reads the sandbox's services and its CPU budget from, and how a log's tail is read.
Stdlib only: every workload imports it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

RESULT_PREFIX = "MLSANDBOX_RESULT "
NOTE_PREFIX = "[mlsandbox]"
"""Lines the runner (not the workload) appends to a job's log, e.g. why it was killed."""
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "LOKY_MAX_CPU_COUNT",
)


def result_line(result: dict[str, Any]) -> str:
    """The line a workload prints last to report success."""
    return RESULT_PREFIX + json.dumps(result, sort_keys=True, default=str)


def parse_result(text: str) -> dict[str, Any]:
    """The JSON of the last ``MLSANDBOX_RESULT`` line of a job's output ({} when none or malformed)."""
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                value = json.loads(line[len(RESULT_PREFIX) :])
            except json.JSONDecodeError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def thread_env(cpus: float) -> dict[str, str]:
    """Thread-count variables for native libraries (OpenMP, BLAS, joblib) from a CPU budget."""
    threads = str(max(1, math.floor(cpus)))
    return dict.fromkeys(THREAD_VARS, threads)


def endpoint_env(
    *, s3_url: str, s3_access_key: str, s3_secret_key: str, mlflow_url: str, prefect_api_url: str
) -> dict[str, str]:
    """How a workload reaches the sandbox's services (the variables boto3, MLflow and Prefect read)."""
    return {
        "AWS_ACCESS_KEY_ID": s3_access_key,
        "AWS_SECRET_ACCESS_KEY": s3_secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3_url,
        "MLFLOW_S3_ENDPOINT_URL": s3_url,
        "MLSANDBOX_S3_URL": s3_url,
        "MLFLOW_TRACKING_URI": mlflow_url,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "60",
        "PREFECT_API_URL": prefect_api_url,
    }


def tail_lines(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file (all of it when ``lines`` <= 0; "" when missing)."""
    try:
        with path.open("rb") as f:
            if lines <= 0:
                return f.read().decode(errors="replace")
            end = f.seek(0, os.SEEK_END)
            block, data = 8192, b""
            while end > 0 and data.count(b"\n") <= lines:
                start = max(0, end - block)
                f.seek(start)
                data = f.read(end - start) + data
                end = start
    except FileNotFoundError:
        return ""
    return b"\n".join(data.split(b"\n")[-lines - 1 :]).decode(errors="replace").lstrip("\n")
