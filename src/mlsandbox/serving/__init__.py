"""Serving on the local backend: deployments of model servers, the feature service, production traffic
and monitoring (used by the ``serving`` action pack)."""
