"""Strict schema validation of Kubernetes manifests without a cluster and without network.

``kubeconform -strict`` validates every manifest we render (the Helm chart) or build (the operator's
per-sandbox resources, training Jobs, Chaos Mesh experiments). It needs JSON schemas, which it fetches from
the internet by default; here they come from local directories only:

- built-in kinds: the schemas shipped in the ``kubernetes-validate`` package (one directory per Kubernetes
  version, ``*-local-strict``: ``additionalProperties: false`` everywhere). Their ``$ref`` s point at
  ``/api/_definitions.json`` under an ``$id`` on kubernetes.io; :func:`kubernetes_schema_root` copies one
  version into the cache with the references made relative and the ids removed (so nothing is ever
  fetched), in the layout kubeconform expects
  (``vX.Y.Z-standalone-strict/<kind>-<group>-<version>.json``);
- custom resources: JSON schemas converted from a CRD's ``openAPIV3Schema`` by :func:`crd_json_schemas`
  (strict: ``additionalProperties: false`` on every object with declared properties unless it says
  ``x-kubernetes-preserve-unknown-fields``), laid out as ``<group>/<kind>_<version>.json``. Our own
  ``Sandbox`` CRD is converted at validation time; the Chaos Mesh kinds are converted once from the
  upstream CRDs of the pinned Chaos Mesh version and kept in ``chaos/schemas/``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from mlsandbox import paths
from mlsandbox.errors import MissingToolError
from mlsandbox.versions import pinned

REPO_ROOT = Path(__file__).resolve().parents[4]
CHART_DIR = REPO_ROOT / "charts" / "mlsandbox"
SANDBOX_CRD = CHART_DIR / "crds" / "sandboxes.mlsandbox.dev.yaml"
CHAOS_DIR = REPO_ROOT / "chaos"
CHAOS_SCHEMA_DIR = CHAOS_DIR / "schemas"

_SETUP_HINT = "run `make setup` (scripts/install-kube-tools.sh builds helm and kubeconform)"
_REF_PREFIX = '"$ref": "/api/_definitions.json#'

# OpenAPI v3 keywords that mean the same in JSON Schema (copied as they are, sub-schemas converted).
_SCALAR_KEYWORDS = (
    "type",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "multipleOf",
    "required",
)


def tool(name: str) -> Path:
    """A Kubernetes tool installed by ``make setup`` (helm, kubeconform); MissingToolError if absent."""
    path = paths.bin_dir() / name
    if not path.is_file():
        raise MissingToolError(f"`{name}` is not installed (expected {path}): {_SETUP_HINT}")
    return path


def kubernetes_version() -> str:
    return pinned().get("KUBERNETES_VERSION", "1.37.0")


# ------------------------------------------------------------------------------------ built-in schemas


def kubernetes_schema_root(version: str | None = None) -> Path:
    """A directory of strict schemas of the built-in kinds of Kubernetes ``version``, in kubeconform's layout.

    Made once (per version) from the ``kubernetes-validate`` package into ``$MLSANDBOX_HOME/kube-schemas``.
    """
    version = version or kubernetes_version()
    root = paths.home() / "kube-schemas" / "kubernetes"
    target = root / f"v{version}-standalone-strict"
    if (target / ".complete").is_file():
        return root
    try:
        package = resources.files("kubernetes_validate")
    except ModuleNotFoundError:
        raise MissingToolError(
            f"the Kubernetes JSON schemas come from the `kubernetes-validate` package: {_SETUP_HINT}"
        ) from None
    source = package / "kubernetes-json-schema" / f"v{version}-local-strict"
    if not source.is_dir():
        raise MissingToolError(
            f"kubernetes-validate has no schemas for Kubernetes {version}: pin a version it ships in versions.env"
        )
    # Written aside, then renamed: concurrent test processes never see (or remove) a half-written copy.
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=root, prefix=f".v{version}-"))
    for entry in source.iterdir():
        if entry.name.endswith(".json"):
            # Without its "$id" (https://kubernetes.io/api/...) a schema's relative references resolve
            # against its own file, so "_definitions.json" is read from this directory, never fetched.
            schema = json.loads(entry.read_text().replace(_REF_PREFIX, '"$ref": "_definitions.json#'))
            schema.pop("$id", None)
            (scratch / entry.name).write_text(json.dumps(schema))
    (scratch / ".complete").write_text(version + "\n")
    if target.exists() and not (target / ".complete").is_file():
        shutil.rmtree(target, ignore_errors=True)  # left half-made by an older, interrupted run
    try:
        scratch.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(scratch, ignore_errors=True)
        if not (target / ".complete").is_file():
            raise
    return root


# ---------------------------------------------------------------------------------------- CRD schemas


def openapi_to_json_schema(schema: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """A JSON Schema for one OpenAPI v3 (Kubernetes structural) schema.

    ``nullable`` becomes a ``null`` type, ``x-kubernetes-int-or-string`` an integer-or-string ``anyOf``;
    descriptions and defaults are dropped (they do not validate); with ``strict`` every object with
    declared properties rejects undeclared ones unless ``x-kubernetes-preserve-unknown-fields`` is set.
    """
    out: dict[str, Any] = {k: schema[k] for k in _SCALAR_KEYWORDS if k in schema}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if "format" in schema and schema["format"] in ("date-time", "date", "email", "uri", "ipv4", "ipv6"):
        out["format"] = schema["format"]
    for keyword in ("exclusiveMinimum", "exclusiveMaximum"):  # OpenAPI 3.0 booleans -> JSON Schema numbers
        bound = "minimum" if keyword == "exclusiveMinimum" else "maximum"
        if schema.get(keyword) is True and bound in out:
            out[keyword] = out.pop(bound)
    if "properties" in schema:
        out["properties"] = {
            name: openapi_to_json_schema(sub, strict=strict) for name, sub in schema["properties"].items()
        }
    if "items" in schema:
        out["items"] = openapi_to_json_schema(schema["items"], strict=strict)
    for keyword in ("anyOf", "allOf", "oneOf"):
        if keyword in schema:
            out[keyword] = [openapi_to_json_schema(sub, strict=strict) for sub in schema[keyword]]
    if "not" in schema:
        out["not"] = openapi_to_json_schema(schema["not"], strict=strict)
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = openapi_to_json_schema(additional, strict=strict)
    elif isinstance(additional, bool):
        out["additionalProperties"] = additional
    elif strict and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def crd_json_schemas(crd: Mapping[str, Any], *, strict: bool = True) -> dict[str, dict[str, Any]]:
    """``{"<group>/<kind>_<version>.json": schema}`` for every served version of a CRD.

    The top level pins ``apiVersion`` and ``kind``, requires both, and checks ``metadata`` as an object
    (the API server validates metadata itself).
    """
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    schemas: dict[str, dict[str, Any]] = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        converted = openapi_to_json_schema(version["schema"]["openAPIV3Schema"], strict=strict)
        properties = converted.setdefault("properties", {})
        properties["apiVersion"] = {"type": "string", "enum": [f"{group}/{version['name']}"]}
        properties["kind"] = {"type": "string", "enum": [kind]}
        properties["metadata"] = {"type": "object"}
        converted["required"] = sorted({"apiVersion", "kind", *converted.get("required", [])})
        converted["$schema"] = "http://json-schema.org/draft-07/schema#"
        schemas[f"{group}/{kind.lower()}_{version['name']}.json"] = converted
    return schemas


def write_crd_schemas(crds: Iterable[Mapping[str, Any]], root: Path) -> list[Path]:
    """Write the JSON schemas of ``crds`` under ``root`` (kubeconform's ``{{.Group}}/{{.ResourceKind}}_...``)."""
    written: list[Path] = []
    for crd in crds:
        for relative, schema in crd_json_schemas(crd).items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
            written.append(path)
    return written


def load_yaml_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


# ------------------------------------------------------------------------------------------ kubeconform


@dataclass(frozen=True)
class Result:
    """kubeconform's verdict on one resource."""

    kind: str
    name: str
    version: str
    status: str  # statusValid | statusInvalid | statusError | statusSkipped | statusEmpty
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "statusValid"


@dataclass(frozen=True)
class Report:
    results: list[Result]

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    def describe(self) -> str:
        return "\n".join(f"{r.status}: {r.kind}/{r.name} ({r.version}): {r.message}" for r in self.failures)


def kubeconform(
    documents: Sequence[Mapping[str, Any]] | str,
    *,
    crd_schema_dirs: Sequence[Path] = (),
    version: str | None = None,
) -> Report:
    """Validate manifests strictly, offline: built-in kinds of Kubernetes ``version`` plus the CRD schemas
    under ``crd_schema_dirs`` (each laid out as ``<group>/<kind>_<version>.json``). Every resource must
    find a schema: a kind without one is reported as ``statusError``, never skipped."""
    version = version or kubernetes_version()
    text = documents if isinstance(documents, str) else yaml.safe_dump_all(list(documents), sort_keys=False)
    builtin = kubernetes_schema_root(version)
    argv = [
        str(tool("kubeconform")),
        "-strict",
        "-verbose",
        "-n",
        "1",  # one worker: results come in the order of the documents
        "-output",
        "json",
        "-kubernetes-version",
        version,
        "-schema-location",
        f"{builtin}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
    ]
    for directory in crd_schema_dirs:
        argv += [
            "-schema-location",
            f"{directory}/{{{{ .Group }}}}/{{{{ .ResourceKind }}}}_{{{{ .ResourceAPIVersion }}}}.json",
        ]
    argv.append("-")
    proc = subprocess.run(argv, input=text, capture_output=True, text=True, check=False, timeout=300)
    try:
        payload = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"kubeconform failed (exit {proc.returncode}): {proc.stderr or proc.stdout}"
        ) from None
    results = [
        Result(
            kind=r.get("kind", ""),
            name=r.get("name", ""),
            version=r.get("version", ""),
            status=r.get("status", ""),
            message=r.get("msg", ""),
        )
        for r in payload.get("resources", [])
    ]
    return Report(results=results)
