"""The layers above the gateway (the env and its wrappers, the integrations, the fidelity runs, the
backend checks, the agents) use other modules' public API only: no ``obj._private`` on an object other
than ``self``/``cls`` unless the module defines that name itself, no ``from module import _private``, and no
reaching into an env's or a host's ``.gateway`` (the env's public accessors say what may be read)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "mlsandbox"
PACKAGES = ("env", "integrations", "fidelity", "checks", "agents")


def _own_names(tree: ast.Module) -> set[str]:
    """The names a module defines itself: functions, classes, module and class attributes, and the
    attributes it sets on ``self``/``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Attribute) and _is_self(node.value):
            names.add(node.attr)
    return names


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(source: str, where: str) -> list[str]:
    """What ``source`` (the module at ``where``) reads of other modules' non-public API, by line."""
    tree = ast.parse(source, filename=where)
    own = _own_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not _is_self(node.value):
            if _private(node.attr) and node.attr not in own:
                found.append((node.lineno, f"{ast.unparse(node)} reads a private name of another module"))
            elif node.attr == "gateway":
                found.append(
                    (
                        node.lineno,
                        f"{ast.unparse(node)} reaches into the gateway of another object "
                        "(use the env's public accessors)",
                    )
                )
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.extend(
                (node.lineno, f"imports {alias.name} (private) from {node.module}")
                for alias in node.names
                if _private(alias.name)
            )
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_the_layers_above_the_gateway_use_public_api_only() -> None:
    files = [f for pkg in PACKAGES for f in sorted((SRC / pkg).rglob("*.py"))]
    assert len(files) > 20  # the scan sees the packages
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(SRC.parent)))]
    assert not found, "\n".join(found)


def test_the_scan_reports_each_kind_with_its_location() -> None:
    source = (
        "from mlsandbox.gateway.dispatcher import _declared_type\n"
        "class Own:\n"
        "    def __init__(self) -> None:\n"
        "        self._mine = 1\n"
        "def f(env, other: Own) -> None:\n"
        "    env.unwrapped._last\n"
        "    env.gateway.state\n"
        "    other._mine\n"
        "    env.__class__\n"
    )
    assert violations(source, "mlsandbox/env/probe.py") == [
        "mlsandbox/env/probe.py:1: imports _declared_type (private) from mlsandbox.gateway.dispatcher",
        "mlsandbox/env/probe.py:6: env.unwrapped._last reads a private name of another module",
        "mlsandbox/env/probe.py:7: env.gateway reaches into the gateway of another object (use the env's "
        "public accessors)",
    ]
