"""Commit subjects are at most 72 characters: what `git log --oneline` shows; figures and details go in the body.

    python .ci/commit_subject.py FILE          # the commit-msg hook (.pre-commit-config.yaml): the message in FILE
    python .ci/commit_subject.py --since REV   # CI (.ci/run): every commit after REV
"""

import subprocess
import sys

LIMIT = 72
# The rule holds from the commit after this one on (older subjects are history, not rewritten).
SINCE = "2091a98"


def too_long(subject: str) -> bool:
    return len(subject) > LIMIT


def main(argv: list[str]) -> int:
    if argv[:1] == ["--since"]:
        since = argv[1] if len(argv) > 1 else SINCE
        known = subprocess.run(["git", "cat-file", "-e", f"{since}^{{commit}}"], capture_output=True).returncode == 0
        if not known:
            print(f"commit subjects: {since} is not in this clone (a shallow one?): not checked")
            return 0
        log = subprocess.run(["git", "log", "--format=%h %s", f"{since}..HEAD"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
        bad = [line for line in log if too_long(line.split(" ", 1)[1] if " " in line else "")]
    else:
        with open(argv[0], encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if not line.startswith("#")]
        subject = next((line for line in lines if line.strip()), "")
        bad = [subject] if too_long(subject) else []
    for line in bad:
        print(f"commit subject over {LIMIT} characters: {line}")
    if bad:
        print("keep the subject short (what changed); put figures and details in the body, after a blank line")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
