"""Calibration of the simulator on real runs: everything about it lives in this package.

What the ``sim`` backend reads (the low part: it imports only pydantic, the data generator's version and
the errors, so the backends may import it):

- :mod:`~mlsandbox.calibration.model`: the schema of a calibration document;
- :mod:`~mlsandbox.calibration.shipped`: the documents the package ships (``data/generator-<N>.json``,
  one per data generator version) and their loader.

How a calibration is made (the high part: it drives a real backend through the declared Runtime, so it
sits above the world, next to the fidelity suite; nothing below it may import it):

- :mod:`~mlsandbox.calibration.plan`: the points a sweep measures, as typed models with stable ids;
- :mod:`~mlsandbox.calibration.sweep`: measures them: real jobs, model-server latency and flow runs on a
  backend, and the trainer's own pipeline fitted in this process (``mlsandbox calibrate --section fit``
  alone needs no sandbox and gives a provisional calibration); one JSON line per point
  (:mod:`~mlsandbox.calibration.records`), on rows prepared by :mod:`~mlsandbox.calibration.datasets`;
- :mod:`~mlsandbox.calibration.fit`: turns the records into the document the package ships, starting from
  the shipped one (or, when none ships, from :mod:`~mlsandbox.calibration.texts`: the figures and texts a
  sweep of fits alone does not measure).

``mlsandbox calibrate`` runs the sweep and the fit. The two parts are two layers of the import contracts
(pyproject ``[tool.importlinter]``): the low modules below the backends, the high ones above the world, and
an inner contract orders the modules of this package. This module imports nothing, so importing the
model does not import the sweep.
"""
