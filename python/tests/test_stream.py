import unittest

import drift
from _support import DEFAULT_MODEL, greedy, wait_until_idle

PROMPT = "The history of the city"


class StreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # No prefix cache: a cancelled request's blocks must all come back, none kept as cached prefix.
        cls.llm = drift.LLM(DEFAULT_MODEL, enable_prefix_cache=False)

    @classmethod
    def tearDownClass(cls):
        cls.llm.shutdown()

    def test_deltas_add_up_to_generate(self):
        params = greedy(32, logprobs=1)
        whole = self.llm.generate(PROMPT, params)[0]
        deltas = list(self.llm.stream(PROMPT, params))
        self.assertGreater(len(deltas), 1)
        self.assertEqual("".join(d.text for d in deltas), whole.text)
        self.assertEqual([t for d in deltas for t in d.token_ids], whole.token_ids)
        self.assertEqual([lp for d in deltas for lp in d.logprobs], whole.logprobs)
        self.assertTrue(all(not d.finished and d.finish_reason is None for d in deltas[:-1]))
        last = deltas[-1]
        self.assertTrue(last.finished)
        self.assertEqual(last.finish_reason, whole.finish_reason)
        self.assertEqual(last.prompt_token_ids, whole.prompt_token_ids)
        self.assertEqual(last.usage.completion_tokens, len(whole.token_ids))

    def test_breaking_out_cancels_the_request(self):
        params = greedy(400, ignore_eos=True)
        tokens_before = self.llm.metrics()["generation_tokens_total"]
        for n, delta in enumerate(self.llm.stream(PROMPT, params)):
            if n == 2:
                break
        m = wait_until_idle(self.llm)
        self.assertEqual((m["kv_blocks_used"], m["num_requests_running"]), (0, 0))
        # The engine ran far fewer than the 400 tokens asked for, and still serves.
        self.assertLess(self.llm.metrics()["generation_tokens_total"] - tokens_before, 400)
        self.assertEqual(len(self.llm.generate(PROMPT, greedy(4, ignore_eos=True))[0].token_ids), 4)

    def test_cancel_ends_the_stream(self):
        stream = self.llm.stream(PROMPT, greedy(400, ignore_eos=True))
        first = next(stream)
        stream.cancel()
        rest = list(stream)
        self.assertFalse(first.finished)
        self.assertEqual(rest[-1].finish_reason, "cancelled")
        self.assertTrue(stream.finished)
        self.assertEqual(wait_until_idle(self.llm)["kv_blocks_used"], 0)

    def test_refused_prompt_raises_at_submit(self):
        with self.assertRaises(drift.DriftError) as caught:
            self.llm.stream("word " * 5000, greedy(4))
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertIn("context length", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
