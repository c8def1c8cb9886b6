"""Production traffic against the episode's deployments and their monitoring (series, SLO, alerts),
on the declared serving capability."""
