"""The stages of one step (score, analyze, summarize, update) and the loop over steps."""
