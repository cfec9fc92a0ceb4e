"""The documentation by reader: a README a newcomer starts from in one screen, and links that resolve."""

import re

import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as dashes."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_is_short_and_starts_a_newcomer_in_its_first_screen():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"the README has {len(lines)} lines: move what one reader needs into docs/"
    first_screen = "\n".join(lines[:50])
    for step in ("git clone", "download.pytorch.org/whl/cpu", "pip install -r requirements.txt",
                 "jupyter lab notebooks/01_dot_product_attention.ipynb"):
        assert step in first_screen, f"{step!r} is not in the README's first 50 lines"
    assert "python -m pytest" in "\n".join(lines)


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(path):
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{path.name}: {broken}"


def test_the_readme_points_each_reader_to_a_page_that_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("docs/learners.md", "docs/instructors.md", "docs/benchmarks.md", "CONTRIBUTING.md"):
        assert f"]({page}" in readme and (ROOT / page).exists(), page


def test_commit_subjects_over_72_characters_are_refused(tmp_path):
    import subprocess
    import sys

    script = ROOT / ".ci" / "commit_subject.py"
    short, long = tmp_path / "short", tmp_path / "long"
    short.write_text("Notebook 14: induction heads\n\n" + "figures in the body " * 20 + "\n# a comment line\n")
    long.write_text("# git's comment first\n" + "x" * 73 + "\n")
    assert subprocess.run([sys.executable, script, short], capture_output=True).returncode == 0
    refused = subprocess.run([sys.executable, script, long], capture_output=True, text=True)
    assert refused.returncode == 1 and "over 72 characters" in refused.stdout
    since = subprocess.run([sys.executable, script, "--since"], capture_output=True, text=True, cwd=ROOT)
    assert since.returncode == 0, since.stdout  # every commit since the rule began
