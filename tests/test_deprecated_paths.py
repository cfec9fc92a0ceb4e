"""The old import paths that learners' saved notebooks use keep working for one release, with a
``TutorDeprecationWarning`` naming the new home: ``from tutor import trainer as tr`` (now ``tutor.train``),
``scale.train`` and the other names notebook 10 took from ``tutor.scale`` (now ``tutor.train.long_run``), and
``from tutor import bpe_vs_chars`` (now ``tutor.train.bpe_vs_chars``)."""

import sys

import pytest

import tutor
from tutor import train
from tutor.deprecation import TutorDeprecationWarning
from tutor.train import bpe_vs_chars, long_run


def forget(monkeypatch, name):
    """Make the next ``from tutor import <name>`` a first import, as in a fresh kernel (the warning is given then)."""
    monkeypatch.delitem(sys.modules, f"tutor.{name}", raising=False)
    monkeypatch.delattr(tutor, name, raising=False)


def test_tutor_trainer_warns_and_still_gives_every_name(monkeypatch):
    forget(monkeypatch, "trainer")
    with pytest.warns(TutorDeprecationWarning, match="tutor.trainer has moved to tutor.train"):
        from tutor import trainer as tr
    assert tr.fit is train.fit and tr.CPU_CONFIG is train.CPU_CONFIG and tr.use_fused_kernels is train.use_fused_kernels
    for name in train.__all__:
        assert getattr(tr, name) is getattr(train, name), name


def test_tutor_scale_forwards_what_notebook_10_uses_with_a_warning():
    from tutor import scale

    with pytest.warns(TutorDeprecationWarning, match="tutor.scale.train has moved to tutor.train.long_run.train"):
        assert scale.train is long_run.train
    for name in ("IGNORE_NONE", "PRESETS", "ScaleConfig", "preset", "n_params", "sample_text", "max_difference",
                 "data_parallel_step"):
        with pytest.warns(TutorDeprecationWarning, match=f"tutor.train.long_run.{name}"):
            assert getattr(scale, name) is getattr(long_run, name)
    with pytest.raises(AttributeError):
        scale.no_such_name


def test_tutor_bpe_vs_chars_warns_and_forwards(monkeypatch):
    forget(monkeypatch, "bpe_vs_chars")
    with pytest.warns(TutorDeprecationWarning, match="tutor.train.bpe_vs_chars"):
        from tutor import bpe_vs_chars as payoff
    assert payoff.train is bpe_vs_chars.train and payoff.BPE_VOCAB == bpe_vs_chars.BPE_VOCAB
