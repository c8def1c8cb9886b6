"""The web console: ``mlsandbox console``, a browser app for people watching agents.

It reads what every interface writes (each running sandbox's audit log, through its backend's runtime;
the output directories of ``mlsandbox bench`` and their trajectory files) and the sandboxes the backend
registry lists, and can start and stop them. Its pages: sandboxes, episodes (live and finished), one episode, replay of a trajectory,
benchmarks. It is reached with its own access token (:mod:`mlsandbox.console.server`); every asset it
serves ships in the package (``console/static``, with Chart.js vendored under ``static/vendor``).
"""
