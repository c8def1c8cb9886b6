"""Built-in action packs, in catalog order (``module:attribute`` of each :class:`ActionPack`).

A pack's models live in a light module (imported to build tool schemas); its handlers in the pack's
implementation module (imported when an episode runs). See :mod:`mlsandbox.gateway.registry`.
"""

BUILTIN_PACKS: tuple[str, ...] = (
    "mlsandbox.gateway.packs.core.actions:PACK",
    "mlsandbox.gateway.packs.compute.actions:PACK",
    "mlsandbox.gateway.packs.tracking.actions:PACK",
    "mlsandbox.gateway.packs.flows.actions:PACK",
    "mlsandbox.gateway.packs.sources.actions:PACK",
    "mlsandbox.gateway.packs.serving.actions:PACK",
    "mlsandbox.gateway.packs.config.actions:PACK",
)
