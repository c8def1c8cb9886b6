"""Calibration of the simulator on real runs: the sweep (:mod:`~mlsandbox.calibration.sweep`) measures
real jobs, fits, model-server latency and flow runs on a real backend through the declared Runtime; the
fit (:mod:`~mlsandbox.calibration.fit`) turns its records into the calibration the ``sim`` backend ships.
``mlsandbox calibrate`` runs both."""
