import os
import unittest

import drift
from _support import DEFAULT_MODEL, SOURCE_DIR, greedy


class SamplingParamsTest(unittest.TestCase):
    def test_defaults_are_vllms(self):
        p = drift.SamplingParams()
        self.assertEqual((p.temperature, p.top_p, p.top_k, p.min_p, p.max_tokens), (1.0, 1.0, 0, 0.0, 16))
        self.assertEqual((p.stop, p.stop_token_ids, p.seed, p.logprobs, p.ignore_eos), ([], [], None, None, False))
        self.assertFalse(p.exact_verification)

    def test_values_read_back_as_written(self):
        p = drift.SamplingParams(temperature=0.7, top_p=0.95, stop="\n", seed=3, logprobs=0, exact_verification=True)
        self.assertEqual((p.temperature, p.top_p, p.stop, p.seed, p.logprobs), (0.7, 0.95, ["\n"], 3, 0))
        self.assertTrue(p.exact_verification)
        self.assertIn("temperature=0.7", repr(p))
        self.assertIn("exact_verification=True", repr(p))

    def test_out_of_range_is_a_value_error_with_the_engines_message(self):
        cases = {
            "temperature must be finite and >= 0, got -1": dict(temperature=-1),
            "top_p must be in (0, 1], got 0": dict(top_p=0),
            "min_p must be in [0, 1], got 2": dict(min_p=2),
            "top_k must be >= -1, got -5": dict(top_k=-5),
            "max_tokens must be at least 1, got 0": dict(max_tokens=0),
            "presence_penalty must be in [-2, 2], got 3": dict(presence_penalty=3),
            "top_logprobs must be in [-1, 20], got 21": dict(logprobs=21),
        }
        for message, kwargs in cases.items():
            with self.subTest(**kwargs):
                with self.assertRaises(ValueError) as caught:
                    drift.SamplingParams(**kwargs)
                self.assertEqual(str(caught.exception), message)

    def test_wrong_types_are_type_errors(self):
        for kwargs in (dict(stop=3), dict(top_k=1.5), dict(seed=-1), dict(temprature=1.0)):
            with self.subTest(**kwargs), self.assertRaises(TypeError):
                drift.SamplingParams(**kwargs)


class EngineErrorsTest(unittest.TestCase):
    def test_bad_model_path_names_it(self):
        missing = os.path.join(SOURCE_DIR, "models", "no-such-model")
        with self.assertRaises(drift.DriftError) as caught:
            drift.LLM(missing)
        self.assertIsInstance(caught.exception, RuntimeError)
        self.assertIn(missing, str(caught.exception))
        self.assertEqual(caught.exception.code, "not_found")

    def test_unknown_keyword_is_a_type_error_naming_it(self):
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'max_num_seqz'"):
            drift.LLM(DEFAULT_MODEL, max_num_seqz=4)
        with self.assertRaisesRegex(TypeError, "'speculative.tokens'"):
            drift.LLM(DEFAULT_MODEL, speculative={"method": "ngram", "tokens": 2})

    def test_keyword_of_the_wrong_type(self):
        with self.assertRaisesRegex(TypeError, "max_num_seqs must be an int, got str"):
            drift.LLM(DEFAULT_MODEL, max_num_seqs="4")
        with self.assertRaisesRegex(ValueError, "policy 'lifo' is not one of fcfs, small-first"):
            drift.LLM(DEFAULT_MODEL, policy="lifo")

    def test_engine_refusals_carry_its_message(self):
        with self.assertRaisesRegex(drift.DriftError, "kv_cache_dtype 'int4'"):
            drift.LLM(DEFAULT_MODEL, kv_cache_dtype="int4")

    def test_engine_config_keywords_reach_the_engine(self):
        with drift.LLM(DEFAULT_MODEL, max_model_len=64, block_size=8, kv_cache_bytes=1 << 26, max_num_seqs=2,
                       enable_prefix_cache=False, admission="optimistic", policy="small-first",
                       speculative={"method": "ngram", "num_tokens": 2}) as llm:
            self.assertEqual(llm.max_model_len, 64)
            self.assertEqual(llm.metrics()["kv_blocks_total"], 2 * 64 // 8)  # capped by max_num_seqs x length
            with self.assertRaisesRegex(drift.DriftError, "context length is 64") as caught:
                llm.generate("word " * 100)
            self.assertEqual(caught.exception.code, "invalid_argument")

    def test_specpv_and_exact_verification_reach_the_engine(self):
        prompt = [31, 75, 402, 9, 188, 77] * 22  # repeats, so prompt lookup drafts; longer than the budgets
        plain = drift.LLM(DEFAULT_MODEL)
        want = plain.generate(prompt, greedy(24, ignore_eos=True))[0].token_ids
        plain.shutdown()
        with drift.LLM(DEFAULT_MODEL, speculative={"method": "ngram", "num_tokens": 3},
                       specpv={"min_context": 64, "refresh": 8, "sink": 16, "retrieval": 16, "window": 16,
                               "buffer": 8}) as llm:
            exact = llm.generate(prompt, greedy(24, ignore_eos=True, exact_verification=True))[0]
            self.assertEqual(exact.token_ids, want)
            m = llm.metrics()
            self.assertGreater(m["spec_decode_num_full_verifies"], 0)
            self.assertEqual(m["spec_decode_num_partial_verifies"], 0)
            llm.generate(prompt, greedy(24, ignore_eos=True))
            self.assertGreater(llm.metrics()["spec_decode_num_partial_verifies"], 0)
            phases = llm.metrics()["step_phase_seconds"]
            self.assertEqual(sorted(phases), ["apply", "device", "launch", "plan"])
            self.assertGreater(phases["launch"], 0.0)
        with self.assertRaisesRegex(TypeError, "'specpv.budget'"):
            drift.LLM(DEFAULT_MODEL, specpv={"budget": 1})

    def test_eagle3_keywords_reach_the_engine(self):
        prompt = "What does the ls command do?"
        plain = drift.LLM(DEFAULT_MODEL)
        want = plain.generate(prompt, greedy(24, ignore_eos=True))[0].token_ids
        plain.shutdown()
        with drift.LLM(DEFAULT_MODEL, speculative={"method": "eagle3", "draft_dir": "auto", "num_tokens": 8,
                                                   "depth": 3, "top_k": 2}) as llm:
            self.assertEqual(llm.generate(prompt, greedy(24, ignore_eos=True))[0].token_ids, want)
            m = llm.metrics()
            self.assertGreater(m["spec_decode_num_drafts"], 0)
            self.assertGreater(m["spec_decode_num_accepted_tokens"], 0)
        with self.assertRaisesRegex(drift.DriftError, "no-such-head"):
            drift.LLM(DEFAULT_MODEL, speculative={"method": "eagle3", "draft_dir": "/no-such-head"})

    def test_metrics_give_each_kv_pool(self):
        # GPT-OSS alternates 8-token sliding windows with full attention: the sliding pool is sized for the window.
        gpt_oss = os.path.join(SOURCE_DIR, "tests", "fixtures", "models", "gpt_oss")
        with drift.LLM(gpt_oss, max_model_len=256, max_num_seqs=4, max_num_batched_tokens=32) as llm:
            llm.generate("a prompt longer than the window " * 3, greedy(4))
            m = llm.metrics()
            groups = {g["name"]: g for g in m["kv_groups"]}
            self.assertEqual(sorted(groups), ["full", "sliding"])
            self.assertEqual(groups["sliding"]["sliding_window"], 8)
            self.assertEqual(groups["full"]["sliding_window"], 0)
            self.assertLess(groups["sliding"]["blocks_total"], groups["full"]["blocks_total"])
            self.assertEqual(sum(g["blocks_total"] for g in m["kv_groups"]), m["kv_blocks_total"])

    def test_batch_errors_name_the_prompt(self):
        with drift.LLM(DEFAULT_MODEL) as llm:
            with self.assertRaisesRegex(drift.DriftError, r"^prompts\[1\]: the prompt is empty"):
                llm.generate(["fine", ""], greedy(2))
            bad = drift.SamplingParams()
            bad.temperature = -1  # attributes are checked when the request is submitted
            with self.assertRaisesRegex(ValueError, "temperature"):
                llm.generate("fine", bad)
            with self.assertRaisesRegex(TypeError, "drift.SamplingParams"):
                llm.generate("fine", {"temperature": 0})

    def test_after_shutdown_requests_are_refused(self):
        llm = drift.LLM(DEFAULT_MODEL)
        llm.shutdown()
        with self.assertRaisesRegex(drift.DriftError, "shutting down"):
            llm.generate("Hello")


if __name__ == "__main__":
    unittest.main()
