"""Built-in action packs, in catalog order (``module:attribute`` of each :class:`ActionPack`).

A pack's models live in a light module (imported to build tool schemas); its handlers in the pack's
implementation module (imported when an episode runs). See :mod:`mlsandbox.gateway.registry`.
"""

BUILTIN_PACKS: tuple[str, ...] = (
    "mlsandbox.gateway.actions:CORE_PACK",
    "mlsandbox.gateway.packs.compute:PACK",
    "mlsandbox.gateway.packs.tracking:PACK",
    "mlsandbox.gateway.packs.flows:PACK",
    "mlsandbox.gateway.packs.sources:PACK",
    "mlsandbox.gateway.packs.serving:PACK",
    "mlsandbox.gateway.packs.config:PACK",
)
