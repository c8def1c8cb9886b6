"""The ``workspace`` pack: files and the agent's own Python, run as isolated jobs of the episode."""
