"""amaris: memory-augmented rubric improvement for rubric-based RL (inspired by arXiv 2605.18592)."""

__version__ = "0.1.0"
