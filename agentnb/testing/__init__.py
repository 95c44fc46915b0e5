"""Public test helpers: the store contract suite and offline doubles."""
