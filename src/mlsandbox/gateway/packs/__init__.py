"""Built-in action packs, one package per pack: ``<name>/actions.py`` (the light models and the pack's
declaration, one :class:`~mlsandbox.gateway.registry.PackAction` per action, imported to build tool schemas)
and ``<name>/handlers.py`` (imported when an episode runs: ``handle_<type>(ctx, action)`` per action, hooks
and suppliers, each taking the episode's :class:`~mlsandbox.gateway.context.EpisodeContext`). The catalog
lists them by name (:data:`mlsandbox.gateway.registry.BUILTIN_PACKS`); see :mod:`mlsandbox.gateway.registry`.
"""
