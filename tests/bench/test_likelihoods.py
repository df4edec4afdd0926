"""Likelihoods against scipy with the exact link functions, and the link inside the task fingerprint."""

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from bench import likelihoods
from bench.errors import ReferenceMismatch
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian
from bench.tasks import get_task
from reference.store import load_reference

KS_SIGNIFICANCE = 1e-3
"""A correct sampler fails a seeded KS test with this probability; a wrong link fails it for certain."""


def _outputs(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 1.5


def test_categorical_log_prob_is_log_softmax_of_the_logits():
    logits, targets = _outputs((3, 40, 5)), torch.randint(0, 5, (40,), generator=torch.Generator().manual_seed(1))
    expected = np.take_along_axis(scipy.special.log_softmax(logits.numpy(), axis=-1),
                                  np.broadcast_to(targets.numpy()[None, :, None], (3, 40, 1)), axis=-1)[..., 0]
    np.testing.assert_allclose(Categorical().log_prob(logits, targets).numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Categorical.probabilities(logits).numpy(), scipy.special.softmax(logits.numpy(), -1),
                               rtol=1e-12)


def test_heteroscedastic_log_prob_is_a_normal_with_softplus_standard_deviation():
    outputs, targets = _outputs((2, 50, 2)), _outputs((50,), seed=3)
    f = outputs.numpy()
    scale = np.logaddexp(0.0, f[..., 1])  # softplus, written independently of torch
    expected = scipy.stats.norm.logpdf(targets.numpy(), loc=f[..., 0], scale=scale)
    np.testing.assert_allclose(HeteroscedasticGaussian().log_prob(outputs, targets).numpy(), expected, rtol=1e-12)


def test_fixed_noise_log_prob_is_a_normal_with_the_given_noise():
    outputs, targets = _outputs((40, 1)), _outputs((40,), seed=4)
    expected = scipy.stats.norm.logpdf(targets.numpy(), loc=outputs.numpy()[:, 0], scale=0.7)
    np.testing.assert_allclose(FixedNoiseGaussian(0.7).log_prob(outputs, targets).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("likelihood, scale_of", [
    (HeteroscedasticGaussian(), lambda f: np.logaddexp(0.0, f[:, 1])),
    (FixedNoiseGaussian(0.7), lambda f: np.full(len(f), 0.7)),
])
def test_samples_follow_the_normal_of_the_exact_link(likelihood, scale_of):
    """Standardised by scipy's mean and scale for each point, every draw must be N(0, 1) (KS test)."""
    outputs = _outputs((30, 2))
    samples = likelihood.sample(outputs, 200, torch.Generator().manual_seed(5)).numpy()
    f = outputs.numpy()
    z = (samples - f[:, :1]) / scale_of(f)[:, None]
    assert scipy.stats.kstest(z.ravel(), "norm").pvalue > KS_SIGNIFICANCE


def test_describe_names_the_link_and_records_its_values():
    d = HeteroscedasticGaussian().describe()
    assert d["std_link"] == "softplus"
    expected = np.logaddexp(0.0, np.array(likelihoods.LINK_PROBE_POINTS))
    np.testing.assert_allclose(d["std_link_values"], expected, rtol=1e-7)
    c = Categorical().describe()
    np.testing.assert_allclose(c["link_values"], scipy.special.softmax(likelihoods.LINK_PROBE_POINTS), rtol=1e-7)
    with pytest.raises(ValueError, match="unknown standard-deviation link"):
        HeteroscedasticGaussian(std_link="exp")


def test_a_changed_link_changes_the_fingerprint_and_makes_the_reference_stale(monkeypatch):
    """The reference was sampled under softplus; with another link behind the same name it must be refused."""
    task = get_task("toy-gap")
    before = task.fingerprint()
    load_reference(task)
    monkeypatch.setitem(likelihoods.STD_LINKS, "softplus", torch.exp)
    assert task.fingerprint() != before
    with pytest.raises(ReferenceMismatch, match="stale"):
        load_reference(task)


def test_a_changed_softmax_changes_the_classification_fingerprint(monkeypatch):
    task = get_task("digits")
    before = task.fingerprint()
    monkeypatch.setattr(Categorical, "probabilities", staticmethod(lambda f: torch.softmax(2 * f, dim=-1)))
    assert task.fingerprint() != before
