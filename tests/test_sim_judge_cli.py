"""`amaris sim-judge` as a user runs it: a separate process, reached through the openai SDK."""

from __future__ import annotations

import re
import subprocess
import sys

import openai


def test_sim_judge_command_serves_the_openai_protocol() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", "sim-judge", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"OPENAI_BASE_URL=(http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        assert "not an LLM" in line
        client = openai.OpenAI(base_url=match.group(1), api_key="unused", max_retries=0)
        messages = [{"role": "system", "content": "The rubric (JSON):\n"
                     '[{"id": "c", "kind": "reward", "text": "The final answer is correct."}]'},
                    {"role": "user", "content": "<<<BEGIN REFERENCE 0123456789abcdef>>>\n4\n<<<END REFERENCE 0123456789abcdef>>>\n"
                     "<<<BEGIN RESPONSE 0123456789abcdef>>>\nFinal answer: 4\n<<<END RESPONSE 0123456789abcdef>>>"}]
        reply = client.chat.completions.create(model="sim", messages=messages, response_format={"type": "json_object"})
        assert reply.usage is not None and reply.usage.prompt_tokens > 0
        content = reply.choices[0].message.content
        assert content is not None and '"score":1.0' in content.replace(" ", "")
    finally:
        proc.terminate()
        proc.wait(10)


def test_faults_help_lists_every_kind_the_command_accepts() -> None:
    from amaris_cli.simjudge.faults import ALL_FAULT_KINDS, FAULT_KINDS
    from tests.conftest import invoke

    shown = invoke("sim-judge", "--help")
    assert shown.exit_code == 0
    flowing = " ".join(shown.stdout.split())
    section = flowing.split("--faults", 1)[1].split("--seed", 1)[0]
    listed = set(re.findall(r"[\w]+", section))
    assert set(ALL_FAULT_KINDS) <= listed, sorted(set(ALL_FAULT_KINDS) - listed)
    default = section.split("Default:", 1)[1].split("Also accepted:", 1)[0]
    assert set(re.findall(r"[\w]+", default)) & set(ALL_FAULT_KINDS) == set(FAULT_KINDS)
    # Every kind the help names starts the server (the process prints its URL), an unknown one is refused.
    proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", "sim-judge", "--port", "0", "--faults",
                             ", ".join(ALL_FAULT_KINDS)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        assert "OPENAI_BASE_URL=" in proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(10)
    refused = invoke("sim-judge", "--port", "0", "--faults", "429,teapot")
    assert refused.exit_code != 0 and "unknown kind(s) teapot" in refused.stderr
