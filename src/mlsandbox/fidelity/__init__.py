"""Fidelity of a simulated backend to a real one: the same agents and seeds on both
(:mod:`~mlsandbox.fidelity.run`), compared triple by triple (:mod:`~mlsandbox.fidelity.compare`),
summed up per scenario and overall with JSON and self-contained HTML pages
(:mod:`~mlsandbox.fidelity.report`); :func:`~mlsandbox.fidelity.suite.run_fidelity` does all of it and
``mlsandbox fidelity`` is its command."""
