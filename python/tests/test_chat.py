import unittest

import drift
from _support import FIXTURE_LLAMA, chat_model_dir, greedy

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hello there "}]
RENDERED = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n")


class ChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = drift.LLM(chat_model_dir())

    @classmethod
    def tearDownClass(cls):
        cls.llm.shutdown()

    def test_renders_the_template_and_generates(self):
        out = self.llm.chat(MESSAGES, greedy(6, ignore_eos=True))
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0].prompt, RENDERED)
        self.assertEqual(len(out[0].token_ids), 6)
        # The template wrote BOS: the prompt is tokenized without adding another.
        self.assertEqual(out[0].prompt_token_ids, self.llm.encode(RENDERED, add_special_tokens=False))
        same = self.llm.generate(out[0].prompt_token_ids, greedy(6, ignore_eos=True))[0]
        self.assertEqual(out[0].token_ids, same.token_ids)

    def test_many_conversations(self):
        second = [{"role": "user", "content": "Bye"}]
        out = self.llm.chat([MESSAGES, second], greedy(3))
        self.assertEqual([o.prompt for o in out][0], RENDERED)
        self.assertIn("Bye<|eot_id|>", out[1].prompt)

    def test_without_generation_prompt(self):
        out = self.llm.chat(MESSAGES, greedy(2), add_generation_prompt=False)[0]
        self.assertTrue(out.prompt.endswith("Hello there<|eot_id|>"))

    def test_unknown_role_is_a_value_error(self):
        with self.assertRaisesRegex(ValueError, "role 'robot'"):
            self.llm.chat([{"role": "robot", "content": "hi"}])

    def test_model_without_template(self):
        with drift.LLM(FIXTURE_LLAMA) as llm:
            with self.assertRaisesRegex(drift.DriftError, "no chat template") as caught:
                llm.chat(MESSAGES)
            self.assertEqual(caught.exception.code, "not_found")


if __name__ == "__main__":
    unittest.main()
