"""The rule-based sim-judge: an OpenAI-compatible HTTP server for tests, demos and benchmarks.

It answers every amaris agent deterministically by simple rules over the prompt. It is not an
LLM and its judgements are not a model's: it exists so the tool can be tried and tested without one.
"""
