"""`amaris hackbench`: a labelled reward-hacking benchmark run through amaris's own pipeline.

Hacked variants of honest answers, built by documented transforms (transforms.py; 12 families from the
literature in ../shared/METHOD.md) or read from a labelled file (inputs.py; School of Reward Hacks columns
included), are judged with their controls for K+1 steps of an ordinary run (runner.py). Per family it
reports the analyzer's precision and recall and the hack gain at the initial rubric (they measure the
judge), the gain after K updates and the honest drift (they measure amaris), each gain with a seeded
bootstrap interval (stats.py), and the calls and tokens spent; models.py holds the result written to
OUT/hackbench.json.
"""
