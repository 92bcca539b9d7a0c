"""Checks the unit-test cases in ../cases/*.json against Python's Jinja2, configured as transformers
configures it (render_jinja2.make_environment): an "expected" output must be Jinja2's output, and an
"error" case must make Jinja2 fail too. A case with a "jinja2" field states why Drift deliberately
differs from Jinja2 there, and is skipped.

Usage: python3 check_cases_jinja2.py [cases dir]
"""
import json
import sys
from pathlib import Path

from render_jinja2 import make_environment


def main(cases_dir):
    env = make_environment()
    checked = skipped = 0
    failures = []
    for path in sorted(Path(cases_dir).glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")):
            name = f"{path.stem}/{case['name']}"
            if "jinja2" in case:
                skipped += 1
                continue
            checked += 1
            try:
                output = env.from_string(case["source"]).render(**case.get("context", {}))
            except Exception as error:  # any Jinja2 failure counts for an error case
                if "error" not in case:
                    failures.append(f"{name}: Jinja2 raised {type(error).__name__}: {error}")
                continue
            if "error" in case:
                failures.append(f"{name}: Jinja2 rendered {output!r}, the case expects an error")
            elif output != case["expected"]:
                failures.append(f"{name}:\n  Jinja2:   {output!r}\n  expected: {case['expected']!r}")
    for failure in failures:
        print(failure)
    print(f"{checked - len(failures)}/{checked} cases agree with Jinja2 ({skipped} deliberate differences skipped)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "cases"))
