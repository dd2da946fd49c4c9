"""Reading step records back: kept as a name for the readers in artifacts.py, where paths and freshness live."""

from amaris_cli.artifacts import (  # noqa: F401
    analyses_path,
    chunk_path,
    load_analyses,
    load_retrieval,
    load_rollouts,
    load_scores,
    load_stats,
    load_summaries,
    load_summary,
    load_update,
    retrieval_path,
    scores_path,
    stats_path,
    step_numbers,
    summary_path,
    update_path,
)
