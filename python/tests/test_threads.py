import signal
import threading
import time
import unittest

import drift
from _support import DEFAULT_MODEL, greedy, wait_until_idle, ModelTestCase

PROMPTS = ["The history of the city", "A dictionary is", "To install the package,", "Hello"]


class Ticker(threading.Thread):
    """Counts while it can take the GIL: a 1 ms sleep per tick, so a GIL held for the whole of a call
    lets it tick at most once or twice."""

    def __init__(self):
        super().__init__(daemon=True)
        self.ticks = 0
        self.running = True

    def run(self):
        while self.running:
            self.ticks += 1
            time.sleep(0.001)


class ThreadsTest(ModelTestCase):
    def test_generate_releases_the_gil(self):
        ticker = Ticker()
        ticker.start()
        time.sleep(0.01)
        before, start = ticker.ticks, time.monotonic()
        out = self.llm.generate(PROMPTS, greedy(128, ignore_eos=True))
        seconds, ticks = time.monotonic() - start, ticker.ticks - before
        ticker.running = False
        ticker.join()
        self.assertEqual([len(o.token_ids) for o in out], [128] * len(PROMPTS))
        self.assertGreater(seconds, 0.1, "too short to tell")
        self.assertGreater(ticks, 20, f"{ticks} ticks in {seconds:.2f} s")

    def test_stream_releases_the_gil(self):
        # One sequence at a time: the second stream's first output waits for the whole first request,
        # one long wait inside next().
        with drift.LLM(DEFAULT_MODEL, max_num_seqs=1) as llm:
            first = llm.stream(PROMPTS[0], greedy(100, ignore_eos=True))
            second = llm.stream(PROMPTS[1], greedy(4))
            ticker = Ticker()
            ticker.start()
            time.sleep(0.01)
            before, start = ticker.ticks, time.monotonic()
            next(second)
            seconds, ticks = time.monotonic() - start, ticker.ticks - before
            ticker.running = False
            ticker.join()
            self.assertEqual(len([t for d in first for t in d.token_ids]), 100)
        self.assertGreater(seconds, 0.1, "too short to tell")
        self.assertGreater(ticks, 20, f"{ticks} ticks in {seconds:.2f} s")

    def test_concurrent_callers_get_their_own_results(self):
        expected = [o.token_ids for o in self.llm.generate(PROMPTS, greedy(16))]
        results = [None] * len(PROMPTS)

        def run(i):
            results[i] = self.llm.generate(PROMPTS[i], greedy(16))[0].token_ids

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, expected)

    def test_ctrl_c_cancels_generate(self):
        # Ctrl-C as the kernel delivers it, whoever holds the GIL: an alarm whose handler raises
        # KeyboardInterrupt, as Python's SIGINT handler does. Uninterrupted this runs for seconds.
        def interrupt(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            start = time.monotonic()
            with self.assertRaises(KeyboardInterrupt):
                self.llm.generate(PROMPTS, greedy(400, ignore_eos=True))
            seconds = time.monotonic() - start
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        self.assertLess(seconds, 1.0)
        m = wait_until_idle(self.llm)
        self.assertEqual((m["kv_blocks_used"], m["num_requests_running"]), (0, 0))


if __name__ == "__main__":
    unittest.main()
