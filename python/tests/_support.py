"""What the Python tests share: where the models and the drift command are, and a few waits."""

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import drift

SOURCE_DIR = os.environ.get("DRIFT_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
DEFAULT_MODEL = os.path.join(SOURCE_DIR, "models", "default")
FIXTURE_LLAMA = os.path.join(SOURCE_DIR, "tests", "fixtures", "models", "llama")
DRIFT_CLI = os.environ.get("DRIFT_CLI", os.path.join(SOURCE_DIR, "build", "apps", "drift", "drift"))

# The template tests/e2e/test_server.cc gives the fixture, which has none of its own.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def greedy(max_tokens, **kwargs):
    return drift.SamplingParams(temperature=0, max_tokens=max_tokens, **kwargs)


def chat_model_dir():
    """A copy of the llama fixture with a chat template; removed when the tests end."""
    root = tempfile.mkdtemp(prefix="drift-python-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    model = os.path.join(root, "llama")
    shutil.copytree(FIXTURE_LLAMA, model)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    return model


def wait_until_idle(llm, timeout_s=10.0):
    """The engine's gauges once nothing runs and no KV block is held (or as they are at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = llm.metrics()
        idle = m["kv_blocks_used"] == 0 and m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.005)


def cli_generate_json(model, prompt, max_tokens):
    """drift generate --output json for one prompt (greedy, as the command defaults to)."""
    out = subprocess.run([DRIFT_CLI, "generate", "--model", model, "--prompt", prompt, "--max-tokens",
                          str(max_tokens), "--output", "json"],
                         check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.splitlines()[0])


class ModelTestCase(unittest.TestCase):
    """One LLM per test class, shut down after it: MODEL and KWARGS say which."""

    MODEL = DEFAULT_MODEL
    KWARGS = {}

    @classmethod
    def setUpClass(cls):
        cls.llm = drift.LLM(cls.MODEL, **cls.KWARGS)

    @classmethod
    def tearDownClass(cls):
        cls.llm.shutdown()
