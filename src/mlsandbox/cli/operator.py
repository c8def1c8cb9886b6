"""``mlsandbox operator ...``: run the operator, or print what it creates for a Sandbox.

Wired into the main CLI with ``app.add_typer(operator_app, name="operator")``.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

operator_app = typer.Typer(help="The Sandbox operator (kopf).", no_args_is_help=True)


@operator_app.command("run")
def run(
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="Watch only these namespaces (default: all)")
    ] = None,
) -> None:
    """Run the operator against the current kubeconfig context (``kopf run --standalone``)."""
    scope = [arg for ns in namespace or [] for arg in ("--namespace", ns)] or ["--all-namespaces"]
    argv = [
        sys.executable,
        "-m",
        "kopf",
        "run",
        "--standalone",
        *scope,
        "-m",
        "mlsandbox.k8s_operator.handlers",
    ]
    os.execv(sys.executable, argv)


@operator_app.command("render")
def render(
    name: str,
    scenario: Annotated[str, typer.Option()] = "tabular-quality-basic",
    namespace: Annotated[str, typer.Option(help="Namespace of the Sandbox object")] = "default",
    seed: Annotated[int, typer.Option()] = 0,
    control_namespace: Annotated[str, typer.Option()] = "mlsandbox",
) -> None:
    """Print the objects the operator creates for a Sandbox (no cluster needed)."""
    import yaml

    from mlsandbox.k8s_operator.model import SandboxSpec
    from mlsandbox.k8s_operator.resources import sandbox_resources

    spec = SandboxSpec(scenario=scenario, seed=seed)
    typer.echo(
        yaml.safe_dump_all(sandbox_resources(namespace, name, spec, control_namespace), sort_keys=False)
    )
