"""The mlsandbox operator: kopf handlers reconciling ``Sandbox`` resources (group ``mlsandbox.dev``).

- :mod:`.model`: the ``Sandbox`` spec as pydantic models (mirrors the CRD in charts/mlsandbox/crds/).
- :mod:`.resources`: pure builders of a sandbox's namespace, quota, limits, network policies and RBAC.
- :mod:`.reconcile`: reconcile and finalize over a :class:`~mlsandbox.backends.kube.client.ClusterApi`,
  returning the status to record.
- :mod:`.handlers`: the kopf registrations (``kopf run -m mlsandbox.k8s_operator.handlers``).

Named ``k8s_operator``: a package called ``operator`` would shadow the standard library.
"""
