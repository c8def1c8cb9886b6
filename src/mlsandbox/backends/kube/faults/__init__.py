"""Fault mechanisms of the kube backend (the ``faults`` capability): scaling, Kubernetes-native faults
recorded on the objects they change, and Chaos Mesh objects."""
