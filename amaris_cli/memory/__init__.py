"""The evaluation memory: a vector index over the run's analyses, summaries and rubric updates.

The run's files are the source of truth. Chroma holds only ids, metadata (step, type, instance)
and vectors; the text of a hit is read back from the files, so the index can always be rebuilt.
"""
