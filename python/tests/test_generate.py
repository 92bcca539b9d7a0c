import os
import unittest

import drift
from _support import DEFAULT_MODEL, DRIFT_CLI, cli_generate_json, greedy, ModelTestCase

PROMPTS = ["The history of the city", "A dictionary is", "To install the package,", "Hello"]


class GenerateTest(ModelTestCase):
    @unittest.skipUnless(os.path.exists(DRIFT_CLI), "the drift command is not built")
    def test_greedy_matches_the_drift_command(self):
        expected = cli_generate_json(DEFAULT_MODEL, PROMPTS[0], 24)
        out = self.llm.generate(PROMPTS[0], greedy(24))[0]
        self.assertEqual(out.prompt_token_ids, expected["prompt_token_ids"])
        self.assertEqual(out.token_ids, expected["generated_token_ids"])
        self.assertEqual(out.text, expected["text"])
        self.assertEqual(out.finish_reason, expected["finish_reason"])

    def test_tensor_parallel_size_gives_one_ranks_tokens(self):
        # vLLM's keyword: the default model split over 2 ranks (threads on the cpu) continues as one rank does.
        with drift.LLM(DEFAULT_MODEL, tensor_parallel_size=2) as split:
            got = [o.token_ids for o in split.generate(PROMPTS, greedy(12))]
        self.assertEqual(got, [o.token_ids for o in self.llm.generate(PROMPTS, greedy(12))])
        with self.assertRaisesRegex(drift.DriftError, "expert_parallel"):
            drift.LLM(DEFAULT_MODEL, tensor_parallel_size=2, enable_expert_parallel=True)

    def test_batch_comes_back_in_prompt_order(self):
        alone = [self.llm.generate(p, greedy(12))[0] for p in PROMPTS]
        batch = self.llm.generate(PROMPTS, greedy(12))
        self.assertEqual([o.prompt for o in batch], PROMPTS)
        self.assertEqual([o.token_ids for o in batch], [o.token_ids for o in alone])
        self.assertEqual(len({o.request_id for o in batch}), len(PROMPTS))

    def test_token_id_prompt_equals_its_text(self):
        from_text = self.llm.generate(PROMPTS[1], greedy(10))[0]
        ids = self.llm.encode(PROMPTS[1])
        self.assertEqual(from_text.prompt_token_ids, ids)
        for prompt in (ids, [ids], {"prompt_token_ids": ids}):
            out = self.llm.generate(prompt, greedy(10))
            self.assertEqual(len(out), 1)
            self.assertIsNone(out[0].prompt)
            self.assertEqual(out[0].token_ids, from_text.token_ids)

    def test_output_fields(self):
        out = self.llm.generate([PROMPTS[2]], greedy(8, ignore_eos=True))[0]
        self.assertTrue(out.finished)
        self.assertEqual(out.finish_reason, "length")
        self.assertEqual(len(out.token_ids), 8)
        self.assertEqual(out.text, self.llm.decode(out.token_ids))
        self.assertEqual(out.outputs[0].text, out.text)
        self.assertIsNone(out.logprobs)
        self.assertEqual(out.usage.prompt_tokens, len(out.prompt_token_ids))
        self.assertEqual(out.usage.completion_tokens, 8)
        self.assertGreaterEqual(out.timings.e2e_s, out.timings.time_to_first_token_s)

    def test_logprobs_per_token_with_alternatives(self):
        out = self.llm.generate(PROMPTS[0], greedy(6, logprobs=3))[0]
        self.assertEqual(len(out.logprobs), len(out.token_ids))
        for token, entry in zip(out.token_ids, out.logprobs):
            self.assertEqual(next(iter(entry)), token)  # the chosen token first
            self.assertGreaterEqual(len(entry), 3)
            self.assertTrue(all(lp <= 0.0 for lp in entry.values()), entry)
            # Greedy chose the most likely token.
            self.assertEqual(entry[token], max(entry.values()))

    def test_stop_string_ends_the_text(self):
        full = self.llm.generate(PROMPTS[0], greedy(24, ignore_eos=True))[0]
        stop = full.text.split()[2]
        out = self.llm.generate(PROMPTS[0], greedy(24, ignore_eos=True, stop=stop))[0]
        self.assertEqual(out.finish_reason, "stop")
        self.assertEqual(out.stop_reason, stop)
        self.assertNotIn(stop, out.text)
        self.assertTrue(full.text.startswith(out.text))

    def test_seeded_sampling_repeats(self):
        params = drift.SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=12)
        first, second = self.llm.generate([PROMPTS[3], PROMPTS[3]], params)
        self.assertEqual(first.token_ids, second.token_ids)

    def test_no_prompts_no_outputs(self):
        self.assertEqual(self.llm.generate([]), [])


if __name__ == "__main__":
    unittest.main()
