"""The ``kube`` backend: the sandbox on a Kubernetes cluster (kind locally, any cluster at scale).

- :mod:`.manifests`: pure builders of what the backend creates (training Jobs, their status mapping).
- :mod:`.chaos`: faults as Chaos Mesh resources (PodChaos, NetworkChaos, StressChaos, HTTPChaos, IOChaos,
  TimeChaos).
- :mod:`.cluster`: the Kubernetes operations of the runtime (CRUD, pod logs, in-place pod resize).
- :mod:`.backend`, :mod:`.runtime`, :mod:`.jobs`, :mod:`.faults`: the backend protocol over those.
- :mod:`.serving`: model deployments as Deployments and Services (builders, the agent's view);
  :mod:`.deployments`: the ``serving`` capability over them (an episode's deployments, requests and
  scrapes through the API server's proxy).
- :mod:`.client`: the small cluster API the operator and the backend use, over the ``kubernetes`` client.
- :mod:`.schemas`: offline strict validation of manifests with kubeconform.
"""
