"""The production scorer of a task: one registered model version, loaded in a named environment (its own
scikit-learn release) and asked for the positive class's probability of each row of a features file.

``python scorer.py --model-uri models:/NAME/VERSION --features rows.parquet --out proba.json``

``--features`` and ``--out`` may be ``s3://bucket/key`` objects (read and written with boto3 and the
standard S3 environment variables): how the kube backend runs it as a Job.

The grader runs it with the environment's interpreter, with nothing but the tracking server's address:
the model is downloaded through the server (artifacts are proxied), the rows come from a file and the
probabilities go to one. A model that cannot be loaded or cannot predict in this environment ends the
process with the library's own traceback on stderr (exit status 1). Only scikit-learn models saved with
skops whose trusted types are scikit-learn's, numpy's, scipy's or pandas' are loaded: anything else could
run code of its own.

Self-contained like the other workloads (stdlib, MLflow, pandas, numpy): it runs by path in environments
where mlsandbox is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from typing import Any

SAFE_TRUSTED_PREFIXES = ("sklearn.", "numpy.", "scipy.", "pandas.", "mlsandbox.workloads.")


class UnsafeModel(Exception):
    """A model whose loading could run code of its own: refused, never loaded."""


def load(model_uri: str) -> Any:
    import mlflow.artifacts
    import mlflow.sklearn
    from mlflow.models import Model

    with tempfile.TemporaryDirectory(prefix="mlsandbox-scorer-") as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=tmp)
        sk = Model.load(local).flavors.get("sklearn")
        if sk is None or sk.get("serialization_format") != "skops":
            raise UnsafeModel("only scikit-learn models saved with skops are scored")
        unsafe = [
            t for t in sk.get("skops_trusted_types") or [] if not str(t).startswith(SAFE_TRUSTED_PREFIXES)
        ]
        if unsafe:
            raise UnsafeModel(
                f"the skops model trusts types outside scikit-learn/numpy/scipy/pandas: {unsafe}"
            )
        return mlflow.sklearn.load_model(local)


def _s3_parts(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or not key:
        raise SystemExit(f"not an s3://bucket/key address: {uri!r}")
    return bucket, key


def _s3() -> Any:
    import boto3

    return boto3.client("s3")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-uri", required=True)
    p.add_argument("--features", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import numpy as np
    import pandas as pd

    model = load(args.model_uri)
    with tempfile.TemporaryDirectory(prefix="mlsandbox-rows-") as tmp:
        features = args.features
        if features.startswith("s3://"):
            bucket, key = _s3_parts(features)
            features = f"{tmp}/rows.parquet"
            _s3().download_file(bucket, key, features)
        rows = pd.read_parquet(features)
    proba = np.asarray(model.predict_proba(rows))[:, 1]
    text = json.dumps([float(v) for v in proba])
    if args.out.startswith("s3://"):
        bucket, key = _s3_parts(args.out)
        _s3().put_object(Bucket=bucket, Key=key, Body=text.encode())
    else:
        with open(args.out, "w") as f:
            f.write(text)
    import sklearn

    print(f"scored {len(rows)} rows with scikit-learn {sklearn.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
