"""The world: episode state, the compute pool, production traffic and monitoring of deployments —
what every backend shares above the declared Runtime."""
