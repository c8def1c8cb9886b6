"""The calibration the fit starts from when none ships (:func:`base_document`): figures and texts that a
sweep of in-process fits alone (``mlsandbox calibrate --section fit``) does not measure.

Texts are the lines the code paths print (the trainer's log lines, the job runner's notes, the flows'
log messages, the clients' error messages as the backends wrap them), written here from that code:
``captured: false`` on every one. Figures are the benchmarks' (README: a trainer's peak RSS of
312 MiB, a metrics scrape of 1.7 ms, 880 requests/s for one model-server worker) or estimates, named in
the calibration's notes. ``mlsandbox calibrate`` replaces all of it with what real runs show.
"""

from __future__ import annotations

from typing import Any

from mlsandbox.calibration.plan import TRAINER_DEFAULTS


def t(text: str) -> dict[str, Any]:
    return {"text": text, "captured": False}


def lines(*texts: str) -> list[dict[str, Any]]:
    return [t(x) for x in texts]


def const(value: float, **extra: Any) -> dict[str, Any]:
    return {"intercept": value, **extra}


TRACEBACK_HEAD = (
    "Traceback (most recent call last):",
    '  File "{package_dir}/workloads/trainer.py", line 335, in main',
    "    result = train(args, run)",
    "             ^^^^^^^^^^^^^^^^",
)
FIT_FRAMES = (
    '  File "{package_dir}/workloads/trainer.py", line 281, in train',
    "    fit(pipeline, x_train, y_train)",
    '  File "{package_dir}/workloads/trainer.py", line 196, in fit',
    "    pipeline.fit(x_train, y_train)",
)


def _algorithm(estimator: str, accepts_missing: bool, parallel: float, rss_per_krow: float) -> dict[str, Any]:
    return {
        "estimator": estimator,
        "defaults": {},
        "accepts_missing": accepts_missing,
        "auc": {},
        "resources": {
            # Interpreter start, imports (pandas, scikit-learn, MLflow, boto3), reading the object,
            # logging the model: estimates for this kind of machine, not measured by the sweep.
            "overhead_cpu_s": const(3.2, residual_sd=0.05, link="identity", minimum=0.5),
            "overhead_wall_s": const(4.0, residual_sd=0.05, link="identity", minimum=0.5),
            "fit_cpu_s": const(-1.0, link="log"),
            "parallel_fraction": parallel,
            # README: a trainer's peak RSS is 312 MiB (PyTorch kept out) on 4,000 rows.
            "peak_rss_mb": {
                "intercept": 300.0,
                "coefficients": {"rows": rss_per_krow / 1000.0},
                "residual_sd": 4.0,
            },
            "oom_at_fraction": 0.55,
            "import_rss_mb": 140.0,
        },
    }


def base_document() -> dict[str, Any]:
    """Everything but ``meta`` and the fitted parts (see the module docstring)."""
    algorithms = {
        "logistic_regression": _algorithm("LogisticRegression", False, 0.0, 2.0),
        "random_forest": _algorithm("RandomForestClassifier", True, 0.0, 6.0),
        "gradient_boosting": _algorithm("HistGradientBoostingClassifier", True, 0.8, 3.0),
        "mlp": _algorithm("MLPClassifier", False, 0.3, 2.5),
    }
    for name, alg in algorithms.items():
        alg["defaults"] = dict(TRAINER_DEFAULTS[name])
    traceback_fit = (*TRACEBACK_HEAD, *FIT_FRAMES)
    return {
        "jobs": {
            "algorithms": algorithms,
            "divergence": [
                {
                    "algorithm": "mlp",
                    "param": "learning_rate_init",
                    # SGD with momentum 0.9 on standardised features (the trainer's epoch loop, run in
                    # process on tabular-quality-basic): finite up to a learning rate of 20 (a loss near
                    # 1e19), infinite at epoch 9 at 100; a loss near 0.45 after 30 epochs below 1.
                    "log10_threshold": 1.75,
                    "scale": 0.12,
                    "first_epoch": 10.0,
                    "epoch_slope": -4.0,
                    "epochs_param": "max_iter",
                    "default_epochs": 30,
                    "initial_loss": 0.56,
                    "loss_decay": 0.993,
                }
            ],
            "failures": {
                "missing_values": {
                    "exit_code": 1,
                    "at_fraction": 0.45,
                    "log_tail": lines(*traceback_fit, "ValueError: {detail}"),
                },
                "divergence": {
                    "exit_code": 1,
                    "at_fraction": 0.4,
                    "log_tail": lines(
                        "ERROR training diverged at epoch {epoch}: loss is {loss} "
                        "(learning_rate_init={learning_rate:g}); lower the learning rate",
                        *traceback_fit[:-2],
                        '  File "{package_dir}/workloads/trainer.py", line 214, in fit',
                        "    raise TrainingDiverged(",
                        "__main__.TrainingDiverged: loss is {loss} at epoch {epoch} with "
                        "learning_rate_init={learning_rate:g}",
                    ),
                },
                "unknown_hyperparameter": {
                    "exit_code": 1,
                    "at_fraction": 0.35,
                    "log_tail": lines(
                        *TRACEBACK_HEAD,
                        '  File "{package_dir}/workloads/trainer.py", line 277, in train',
                        "    pipeline = make_pipeline(x, args.algorithm, args.hyperparams, args.seed)",
                        '  File "{package_dir}/workloads/trainer.py", line 183, in make_estimator',
                        "    return factories[algorithm]().set_params(**hyperparams)",
                        "ValueError: {detail}",
                    ),
                },
                "invalid_hyperparameter": {
                    "exit_code": 1,
                    "at_fraction": 0.4,
                    "log_tail": lines(
                        *traceback_fit, "sklearn.utils._param_validation.InvalidParameterError: {detail}"
                    ),
                },
                "missing_target": {
                    "exit_code": 1,
                    "at_fraction": 0.3,
                    "log_tail": lines(
                        *TRACEBACK_HEAD,
                        '  File "{package_dir}/workloads/trainer.py", line 268, in train',
                        "    y = table[args.target]",
                        "KeyError: '{target}'",
                    ),
                },
                "unreadable_data": {
                    "exit_code": 1,
                    "at_fraction": 0.3,
                    "log_tail": lines(*TRACEBACK_HEAD, "{detail}"),
                },
                "out_of_memory": {
                    "exit_code": 137,
                    "at_fraction": 0.55,
                    "log_tail": lines(
                        "[mlsandbox] killed: out of memory (OOMKilled, memory limit {memory_mb} MiB)"
                    ),
                },
                "timeout": {
                    "exit_code": 137,
                    "at_fraction": 1.0,
                    "log_tail": lines("[mlsandbox] timed out after {timeout_s:g} s; killing the job"),
                },
                "storage_unreachable": {
                    "exit_code": 1,
                    "at_fraction": 0.3,
                    "at_seconds": 4.5,
                    "cpu_fraction": 0.5,
                    "log_tail": lines(
                        *TRACEBACK_HEAD,
                        '  File "{package_dir}/workloads/trainer.py", line 161, in read_object',
                        '    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())',
                        'botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "{url}"',
                    ),
                },
                "storage_credentials": {
                    "exit_code": 1,
                    "at_fraction": 0.3,
                    "at_seconds": 3.2,
                    "cpu_fraction": 0.8,
                    "log_tail": lines(
                        *TRACEBACK_HEAD,
                        '  File "{package_dir}/workloads/trainer.py", line 161, in read_object',
                        '    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())',
                        "botocore.exceptions.ClientError: An error occurred ({operation}) when calling the "
                        "GetObject operation: {detail}",
                    ),
                },
                "tracker_unreachable": {
                    "exit_code": 1,
                    "at_fraction": 0.0,
                    "at_seconds": 6.0,
                    "cpu_fraction": 0.4,
                    "run_status": "none",
                    "log_tail": lines(
                        *TRACEBACK_HEAD[:2],
                        "    with mlflow.start_run(experiment_id=args.experiment_id, run_name=args.run_name) as run:",
                        "mlflow.exceptions.MlflowException: API request to {url}/api/2.0/mlflow/runs/create "
                        "failed with exception HTTPConnectionPool(host='{host}', port={port}): Max retries "
                        "exceeded with url: /api/2.0/mlflow/runs/create (Caused by NewConnectionError("
                        "'<urllib3.connection.HTTPConnection object>: Failed to establish a new connection: "
                        "[Errno 111] Connection refused'))",
                    ),
                },
                "config_missing": {
                    "exit_code": 1,
                    "at_fraction": 0.0,
                    "at_seconds": 2.0,
                    "run_status": "none",
                    "log_tail": lines(
                        *TRACEBACK_HEAD[:2],
                        "    config = read_config(args.config_prefix)",
                        "__main__.ConfigStoreError: config key '{value}' is missing from the config store",
                    ),
                },
                "config_unreachable": {
                    "exit_code": 1,
                    "at_fraction": 0.0,
                    "at_seconds": 2.0,
                    "run_status": "none",
                    "log_tail": lines(
                        *TRACEBACK_HEAD[:2],
                        "    config = read_config(args.config_prefix)",
                        "urllib.error.URLError: <urlopen error [Errno 111] Connection refused>",
                    ),
                },
                "cancelled": {
                    "exit_code": 143,
                    "at_fraction": 0.0,
                    "log_tail": lines("[mlsandbox] cancelled"),
                },
            },
            "trainer": {
                "params": ["algorithm", "seed", "data", "target", "features"],
                "metrics": ["val_auc", "val_accuracy", "val_log_loss", "train_rows", "train_seconds"],
                "validation_fraction": 0.2,
                "log": {
                    "config_line": t(
                        "config from the config store ({config_prefix}*): s3={s3_url} mlflow={mlflow_url}"
                    ),
                    "start": lines(
                        "starting run {run_name} in experiment {experiment_id}",
                        "reading s3://{bucket}/{key}",
                        "loaded {rows} rows x {columns} columns",
                        "fitting {algorithm} on {train_rows} rows ({val_rows} held out for validation) ...",
                    ),
                    "per_epoch": t("epoch {epoch}/{epochs} loss={loss:.6g}"),
                    "after_fit": lines(
                        "fitted in {seconds:.2f} s",
                        "val_auc={val_auc:.4f}",
                        "val_accuracy={val_accuracy:.4f}",
                        "val_log_loss={val_log_loss:.4f}",
                        "logging model to MLflow ...",
                    ),
                    "start_fraction": 0.35,
                },
            },
            "queue_start_s": 0.05,
            "burn_cpu_s_per_s": 1.0,
        },
        "serving": {
            # README: one model-server worker answers about 880 one-row requests/s under 16 clients
            # (about 1.1 ms each); a request by entity ids adds a lookup in the feature service.
            "service_ms": {
                name: {
                    "intercept": 1.1,
                    "coefficients": {"rows_per_request": 0.04},
                    "residual_sd": 0.25,
                    "minimum": 0.3,
                }
                for name in algorithms
            },
            "feature_lookup_ms": {
                "intercept": 1.0,
                "coefficients": {"rows_per_request": 0.02},
                "minimum": 0.2,
            },
            "workers": 1,
            "replica_start_s": const(2.5),
            "feature_service_start_s": 1.5,
            # README: a loaded model server is about 272 MiB resident (PyTorch kept out).
            "replica_rss_mb": {name: const(272.0) for name in algorithms},
            "feature_service_rss_mb": 180.0,
            "cpu_percent_busy": 100.0,
            "scrape_ms": 1.7,
            "health_ms": 1.0,
            "deploy_failed_log": lines(
                "loading model {model_name} version {version} from the registry ...",
                "ERROR {detail}",
            ),
            "oom_message": t("killed: out of memory (OOMKilled, memory limit {memory_mb} MiB)"),
        },
        "flows": {
            "pickup_s": 2.0,
            "logger_names": {"flow_runs": "prefect.flow_runs", "task_runs": "prefect.task_runs"},
            "flows": {
                "ingestion": {
                    "tasks": ["pull", "validate", "write"],
                    "task_s": {
                        "pull": const(0.15),
                        "validate": {"intercept": 0.05, "coefficients": {"rows": 2e-6}},
                        "write": {"intercept": 0.08, "coefficients": {"rows": 1e-6}},
                    },
                    "cpu_s": {"intercept": 0.35, "coefficients": {"rows": 4e-6}},
                    "retries": {"pull": 1},
                    "retry_delay_s": 2.0,
                    "logs": _flow_logs(),
                },
                "training": {
                    "tasks": ["load-lake", "train", "evaluate", "register"],
                    "task_s": {
                        "load-lake": {"intercept": 0.2, "coefficients": {"batches": 0.03}},
                        "train": const(1.2),
                        "evaluate": const(0.02),
                        "register": const(0.4),
                    },
                    "cpu_s": const(1.6),
                    "retries": {"load-lake": 1},
                    "retry_delay_s": 2.0,
                    "logs": _flow_logs(),
                },
                "batch-scoring": {
                    "tasks": [],
                    "task_s": {},
                    "cpu_s": {"intercept": 0.9, "coefficients": {"rows": 3e-6}},
                    "logs": _flow_logs(),
                },
            },
        },
        "operations": {
            # README's step latencies on this kind of machine (list_runs 14 ms through MLflow, a 4,000-row
            # object read in a few ms, get_job 0.1 ms).
            "call_s": {
                "object_store.get_object": 0.004,
                "object_store.put_object": 0.006,
                "object_store.list_objects": 0.003,
                "object_store.create_bucket": 0.01,
                "object_store.delete_bucket": 0.02,
                "tracking.create_experiment": 0.02,
                "tracking.list_runs": 0.012,
                "tracking.search_runs": 0.012,
                "tracking.get_run": 0.006,
                "tracking.register_model": 0.08,
                "tracking.list_model_versions": 0.008,
                "tracking.set_model_alias": 0.01,
                "tracking.delete_model_alias": 0.01,
                "tracking.delete_registered_model": 0.02,
                "tracking.load_model": 0.15,
                "config.get": 0.004,
                "config.set": 0.006,
                "jobs.submit": 0.03,
                "jobs.get": 0.0002,
                "jobs.logs": 0.0005,
                "flows.run": 0.05,
                "flows.get": 0.006,
            },
            "default_call_s": 0.002,
            "bytes_per_s": 200e6,
            "services": {
                name: {
                    "health_ms": health,
                    "restart_s": restart,
                    "log_lines": lines(*log),
                    "down_error": t("ConnectError: [Errno 111] Connection refused"),
                    "frozen_error": t("timed out after {seconds:g} s"),
                }
                for name, health, restart, log in (
                    (
                        "minio",
                        1.2,
                        1.5,
                        ("MinIO Object Storage Server", "API: {url}", "Status: 1 Online, 0 Offline."),
                    ),
                    (
                        "mlflow",
                        2.5,
                        9.0,
                        ("INFO:     Application startup complete.", "INFO:     Uvicorn running on {url}"),
                    ),
                    ("prefect-server", 3.0, 18.0, ("INFO:     Application startup complete.",)),
                    ("prefect-worker", 0.0, 6.0, ("Worker 'mlsandbox-worker' started!",)),
                )
            },
            "network_requests": {
                "object_store.get_object": 1,
                "object_store.put_object": 1,
                "object_store.list_objects": 1,
                "tracking.list_runs": 1,
                "tracking.get_run": 1,
                "tracking.register_model": 4,
                "tracking.load_model": 3,
            },
        },
        "environments": {
            "default_packages": _default_packages(),
            "build_s": 2.5,
            "serving_build_s": 6.0,
            "known_versions": {},
            "resolution_error": t(
                "  × No solution found when resolving dependencies:\n  ╰─▶ Because {detail}, we can conclude "  # noqa: RUF001
                "that your requirements are unsatisfiable."
            ),
        },
        "errors": {
            "storage.quota_exceeded": t(
                "S3 {what} failed at {url}: An error occurred (XMinioAdminBucketQuotaExceeded) when calling "
                "the {operation} operation: Bucket quota exceeded"
            ),
            "storage.unreachable": t(
                'S3 {what} failed: object store at {url} unreachable: Could not connect to the endpoint URL: "{url}/{bucket}"'
            ),
            "storage.timeout": t(
                'S3 {what} failed: object store at {url} unreachable: Read timeout on endpoint URL: "{url}/{bucket}"'
            ),
            "storage.reset": t(
                'S3 {what} failed: object store at {url} unreachable: Connection was closed before we received a valid response from endpoint URL: "{url}/{bucket}".'
            ),
            "storage.no_such_key": t("{key} (NoSuchKey)"),
            "storage.signature_mismatch": t(
                "The request signature we calculated does not match the signature you provided. Check your "
                "key and signing method."
            ),
            "storage.invalid_access_key": t("The Access Key Id you provided does not exist in our records."),
            "tracking.unreachable": t(
                "MLflow {what} failed at {url}: API request to endpoint {operation} failed with error code 111 != 200"
            ),
            "tracking.timeout": t(
                "MLflow {what} failed at {url}: API request to endpoint {operation} timed out"
            ),
            "tracking.reset": t(
                "MLflow {what} failed at {url}: API request to endpoint {operation} failed: connection reset by peer"
            ),
            "tracking.run_not_found": t("get_run: Run with id={value} not found"),
            "tracking.bad_filter": t("search_runs: {detail}"),
            "sources.api_unreachable": t(
                "cannot reach http://{host}:{port}/v1/datasets/{dataset}/records: ConnectError: [Errno 111] Connection refused"
            ),
            "sources.postgres_unreachable": t(
                'connection failed: connection to server at "{host}", port {port} failed: Connection refused\n'
                "\tIs the server running on that host and accepting TCP/IP connections?"
            ),
            "sources.postgres_auth": t(
                'connection failed: connection to server at "{host}", port {port} failed: FATAL:  password '
                'authentication failed for user "{role}"'
            ),
            "sources.postgres_no_role": t(
                'connection failed: connection to server at "{host}", port {port} failed: FATAL:  role "{role}" '
                "does not exist"
            ),
            "flows.orchestrator_unreachable": t(
                "the orchestrator cannot deploy the flows: All connection attempts failed"
            ),
        },
    }


def _flow_logs() -> dict[str, list[dict[str, Any]]]:
    return {
        "start": lines("Beginning flow run '{flow_run_name}' for flow '{flow}'"),
        "task_start": lines("Created task run '{task}-0' for task '{task}'"),
        "task_end": lines("Finished in state Completed()"),
        "completed": lines("Finished in state Completed()"),
        "failed": lines(
            "Encountered exception during execution: {detail}",
            "Finished in state Failed('Flow run encountered an exception: {detail}')",
        ),
        "usage": lines("resource usage: cpu_seconds={seconds:.3f}"),
    }


def _default_packages() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("scikit-learn", "numpy", "pandas", "scipy", "mlflow", "pyarrow", "boto3", "skops"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out
