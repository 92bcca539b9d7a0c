import os
import re
import shlex
import subprocess
import sys
import unittest

from _support import SOURCE_DIR

README = os.path.join(SOURCE_DIR, "python", "README.md")


def code_blocks(language):
    with open(README) as f:
        return re.findall(r"```" + language + r"\n(.*?)```", f.read(), re.S)


def run_from_repo_root(argv):
    return subprocess.run(argv, cwd=SOURCE_DIR, capture_output=True, text=True, timeout=120)


class ReadmeTest(unittest.TestCase):
    """The examples in python/README.md run as written, from the repository root."""

    def test_python_example_runs(self):
        blocks = code_blocks("python")
        self.assertTrue(blocks)
        for code in blocks:
            result = run_from_repo_root([sys.executable, "-c", code])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertTrue(result.stdout.strip())

    def test_one_liner_runs(self):
        lines = [l for block in code_blocks("sh") for l in block.splitlines() if l.startswith("python3 -c ")]
        self.assertTrue(lines)
        for line in lines:
            argv = shlex.split(line)
            result = run_from_repo_root([sys.executable] + argv[1:])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertTrue(result.stdout.strip())


if __name__ == "__main__":
    unittest.main()
