"""Drift from Python: offline generation, streaming and chat on a Drift engine, with vLLM's names.

    import drift
    llm = drift.LLM("models/default")
    for out in llm.generate(["The history of the city"], drift.SamplingParams(temperature=0, max_tokens=32)):
        print(out.text)

python/README.md states what the binding guarantees (threads, the GIL, errors, cancellation).
"""

import json
import os

from ._drift import (
    CompletionOutput,
    DriftError,
    RequestOutput,
    RequestStream,
    SamplingParams,
    Timings,
    Usage,
)
from . import _drift

__all__ = [
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "RequestStream",
    "Usage",
    "Timings",
    "DriftError",
]


def _as_prompt(prompt):
    """One prompt as the engine takes it: text, or token ids (a list of int or vLLM's dict forms)."""
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            return list(prompt["prompt_token_ids"])
        if "prompt" in prompt:
            return prompt["prompt"]
        raise TypeError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise TypeError(f"a prompt is a str or a list of token ids, got {type(prompt).__name__}")


def _as_prompt_list(prompts):
    # A bare list of ints is one tokenized prompt, not many.
    if isinstance(prompts, (str, dict)) or (
        isinstance(prompts, (list, tuple)) and prompts and all(isinstance(t, int) for t in prompts)
    ):
        return [_as_prompt(prompts)]
    return [_as_prompt(p) for p in prompts]


def _checked_params(params):
    if params is None:
        return SamplingParams()
    if not isinstance(params, SamplingParams):
        raise TypeError(f"sampling_params must be a drift.SamplingParams, got {type(params).__name__}")
    return params


def _is_conversation(messages):
    return isinstance(messages, (list, tuple)) and (not messages or isinstance(messages[0], dict))


class LLM:
    """A Drift engine serving one Hugging Face model folder.

    device is "cpu" or "cuda". Every other keyword sets the EngineConfig field of that name
    (max_model_len, max_num_seqs, kv_cache_bytes, kv_cache_dtype, block_size, enable_prefix_cache,
    admission="guaranteed"|"optimistic", policy="fcfs"|"small-first", speculative={"method": "ngram"}, ...);
    an unknown one raises TypeError. A model that cannot load raises DriftError with the engine's message.
    """

    def __init__(self, model, device="cpu", **engine_kwargs):
        self._engine = _drift.Engine(os.fspath(model), device, **engine_kwargs)

    def generate(self, prompts, sampling_params=None):
        """Runs every prompt concurrently; returns a RequestOutput per prompt, in order.

        prompts: a str, a list of str, token ids (a list of int), or a list of those.
        A prompt the engine refuses or a request that fails raises DriftError.
        """
        params = _checked_params(sampling_params)
        return self._engine.generate(_as_prompt_list(prompts), params, True)

    def stream(self, prompt, sampling_params=None):
        """Submits one prompt and returns a RequestStream: iterate it for the new text and token ids as
        the engine produces them. Leaving the loop early cancels the request."""
        return self._engine.stream(_as_prompt(prompt), _checked_params(sampling_params), True)

    def chat(self, messages, sampling_params=None, add_generation_prompt=True, tools=None,
             chat_template_kwargs=None):
        """Renders a conversation (a list of {"role", "content"} dicts) or a list of conversations with the
        model's chat template and generates the replies: one RequestOutput per conversation, whose prompt
        is the rendered text. DriftError when the model has no chat template."""
        conversations = [messages] if _is_conversation(messages) else list(messages)
        params = _checked_params(sampling_params)
        prompts = [
            self._engine.render_chat(json.dumps(c), json.dumps(tools), add_generation_prompt,
                                     json.dumps(chat_template_kwargs or {}))
            for c in conversations
        ]
        # The template wrote the special tokens (BOS) itself, as the server's chat endpoint relies on.
        return self._engine.generate(prompts, params, False)

    def encode(self, text, add_special_tokens=True):
        """Token ids of text, as the engine tokenizes a prompt (BOS included by default)."""
        return self._engine.encode(text, add_special_tokens)

    def decode(self, token_ids, skip_special_tokens=False):
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def metrics(self):
        """The engine's counters and gauges (vLLM's names): requests running, KV blocks used, ..."""
        return self._engine.metrics()

    @property
    def max_model_len(self):
        return self._engine.max_model_len

    @property
    def model_name(self):
        return self._engine.model_name

    def shutdown(self):
        """Cancels what is outstanding and stops the engine; later requests raise DriftError."""
        self._engine.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
