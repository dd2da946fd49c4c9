"""Write examples/trainers/art/0002.parquet with OpenPipe ART's own trajectory logging (openpipe-art 0.5.18:
art.utils.trajectory_logging.write_trajectory_groups_parquet, what ART's Model.log writes to
trajectories/SPLIT/NNNN.parquet): the six rollouts of examples/trainers/art.jsonl as two TrajectoryGroups.

    pip install openpipe-art==0.5.18 pyarrow
    python examples/trainers/make_art_parquet.py examples/trainers/art.jsonl examples/trainers/art/0002.parquet
"""

import json
import sys
from pathlib import Path

from art import Trajectory, TrajectoryGroup
from art.utils.trajectory_logging import write_trajectory_groups_parquet
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion import Choice

source, target = Path(sys.argv[1]), Path(sys.argv[2])
trajectories = []
for line in source.read_text().splitlines():
    row = json.loads(line)
    *prompt, answer = row["messages_and_choices"]
    choice = Choice(finish_reason=answer["finish_reason"], index=answer["index"], logprobs=None,
                    message=ChatCompletionMessage(role="assistant", content=answer["message"]["content"]))
    trajectories.append(Trajectory(messages_and_choices=[*prompt, choice], reward=row["reward"],
                                   metrics={"judged": 0.0}, metadata=row["metadata"]))
groups = [TrajectoryGroup(trajectories[:3]), TrajectoryGroup(trajectories[3:])]
target.parent.mkdir(parents=True, exist_ok=True)
write_trajectory_groups_parquet(groups, target)
print(f"wrote {target}: {sum(len(g.trajectories) for g in groups)} trajectories in {len(groups)} groups")
