"""An example mlsandbox plug-in (see the package README)."""

from pathlib import Path


def scenario_dir() -> Path:
    """The plug-in's scenario catalog directory (``mlsandbox.scenarios`` entry point)."""
    return Path(__file__).parent / "scenarios"
