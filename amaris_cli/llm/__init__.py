"""The OpenAI-compatible judge client: limits, retries, JSON repair and validation, call log."""
