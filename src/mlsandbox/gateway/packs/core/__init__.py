"""The ``core`` action pack: its actions (models, light) and handlers (imported when an episode runs)."""
