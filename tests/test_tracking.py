"""Learner progress: checks record their results; tutor.progress() and `python -m tutor progress` show them."""

import json
import os
import re
import subprocess
import sys
import time

import nbformat
import pytest
from checkkit import stub

import tutor
from conftest import ROOT
from tutor import checks, reference
from tutor.course import catalog, progress


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "data" / "progress.json"
    monkeypatch.setenv("TUTOR_PROGRESS_FILE", str(path))
    monkeypatch.delenv("TUTOR_PROGRESS", raising=False)
    progress._SESSION.clear()
    yield path
    progress._SESSION.clear()


def test_the_test_suite_never_writes_into_the_user_data_directory():
    # the root conftest.py points every test (and every kernel they start) at a throw-away file
    assert "tutor-progress-" in os.environ["TUTOR_PROGRESS_FILE"]


def test_checks_record_their_results(store):
    checks.softmax(reference.softmax)
    checks.causal_mask(lambda T, device=None: 1 / 0)
    checks.encode(stub)
    data = json.loads(store.read_text(encoding="utf-8"))["exercises"]
    assert data["softmax"]["status"] == "passed" and data["softmax"]["last_passed"]
    assert data["causal_mask"]["status"] == "failed" and data["causal_mask"]["last_passed"] is None
    assert data["encode"]["status"] == "not done"


def test_progress_shows_every_exercise_with_the_date_of_the_last_pass(store):
    checks.softmax(reference.softmax)
    checks.similarity(lambda x: x)  # wrong
    shown = tutor.progress(1)
    assert [e.name for _, e, _, _ in shown.rows] == [e.name for e in catalog.exercises(1)]
    text = shown.text()
    assert re.search(r"✅ softmax\s+passed\s+last passed \d{4}-\d\d-\d\d \d\d:\d\d", text)
    assert re.search(r"❌ similarity\s+not passing", text)
    assert re.search(r"⏳ encode\s+not started", text)
    assert "1 of 6 exercises passed" in text
    assert "<table>" in shown._repr_html_() and "✅" in shown._repr_html_()
    everything = tutor.progress()
    assert len(everything.rows) == len(catalog.EXERCISES)


def test_a_failure_after_a_pass_keeps_the_date_of_the_pass(store):
    checks.softmax(reference.softmax)
    passed = progress.load()["softmax"]["last_passed"]
    progress._SESSION.clear()  # a new session: only the file remembers
    checks.softmax(lambda x, dim=-1: x)
    entry = json.loads(store.read_text(encoding="utf-8"))["exercises"]["softmax"]
    assert entry["status"] == "failed" and entry["last_passed"] == passed
    assert tutor.progress(1).status("softmax") == "failed"
    # said so, not "not passing ... last passed <date>", which reads as a contradiction
    assert re.search(r"❌ softmax\s+not passing\s+\(it passed on \d{4}-\d\d-\d\d \d\d:\d\d, not in its last check\)",
                     tutor.progress(1).text())
    assert "last passed" not in tutor.progress(1).text().split("softmax")[1].splitlines()[0]


def test_a_corrupt_file_is_replaced(store):
    store.parent.mkdir(parents=True)
    store.write_text("{ this is not json", encoding="utf-8")
    assert checks.softmax(reference.softmax).passed
    assert json.loads(store.read_text(encoding="utf-8"))["exercises"]["softmax"]["status"] == "passed"


def test_a_stale_lock_is_replaced_and_a_held_one_does_not_block(store):
    store.parent.mkdir(parents=True)
    lock = store.with_name(store.name + ".lock")
    lock.write_text("")
    start = time.monotonic()
    checks.softmax(reference.softmax)  # held by somebody else: waits briefly, then writes anyway
    assert time.monotonic() - start < 5
    assert "softmax" in json.loads(store.read_text(encoding="utf-8"))["exercises"]
    old = time.time() - 3600
    os.utime(lock, (old, old))  # left behind by a crashed kernel
    checks.encode(reference.encode)
    assert "encode" in json.loads(store.read_text(encoding="utf-8"))["exercises"]
    assert not lock.exists()


def test_progress_never_breaks_a_check(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TUTOR_PROGRESS_FILE", str(blocker / "progress.json"))  # cannot be created
    progress._SESSION.clear()
    result = checks.softmax(reference.softmax)
    assert result.passed
    assert tutor.progress(1).status("softmax") == "passed"  # this session's results are still shown
    progress._SESSION.clear()


def test_recording_can_be_switched_off(store, monkeypatch):
    monkeypatch.setenv("TUTOR_PROGRESS", "0")
    checks.softmax(reference.softmax)
    assert not store.exists()


def test_the_terminal_command(store):
    checks.causal_mask(reference.causal_mask)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tutor", "progress", "3"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"✅ causal_mask\s+passed\s+last passed", done.stdout)
    assert "⏳ padding_mask" in done.stdout


def test_an_unknown_notebook_is_one_line_not_a_traceback(store, capsys):
    from tutor.__main__ import main

    missing = max(n.number for n in catalog.NOTEBOOKS) + 1
    with pytest.raises(tutor.TutorError, match=rf"there is no notebook {missing}: the notebooks are 01, .*08"):
        tutor.progress(missing)
    with pytest.raises(tutor.TutorError, match="there is no notebook 'three'"):
        tutor.progress("three")
    assert main(["progress", "99"]) == 2
    assert capsys.readouterr().err.startswith("error: there is no notebook 99")
    assert "03 — Masking" in tutor.progress("03").text()  # a number as text is fine


@pytest.mark.parametrize("n", catalog.NOTEBOOKS, ids=[n.slug for n in catalog.NOTEBOOKS])
def test_every_solution_notebook_ends_with_its_progress(n):
    nb = nbformat.read(ROOT / "solutions" / n.filename, as_version=4)
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert re.search(rf"^tutor\.progress\({n.number}\)\s*$", last.source, re.M), (
        f"{n.filename}: the last code cell must show this notebook's progress: tutor.progress({n.number})")
