"""Built-in action packs, one package per pack: ``<name>/actions.py`` (the light models, imported to build
tool schemas) and ``<name>/handlers.py`` (imported when an episode runs). The catalog lists them by name
(:data:`mlsandbox.gateway.registry.BUILTIN_PACKS`); see :mod:`mlsandbox.gateway.registry`.
"""
