"""The Gaussian approximations fitted from a training run, held to their own exact targets on Bayesian linear
regression (``conftest.py``), through :func:`bench.api.fit`: SWAG's moments are those of the iterates it collected
and its draws follow them.
"""

import pytest
import torch

from approximators.swag import Moments
from bench.api import fit


@pytest.mark.parametrize("method, runs", [("swag", 1), ("swag-diag", 1), ("multiswag", 3)])
def test_swag_s_moments_are_its_iterates_and_its_draws_follow_them(linear, engine_iterates, monkeypatch, moments_z,
                                                                   method, runs):
    """Maddox et al.: the SWA mean theta_bar and the second moment are the averages of the snapshots, one at the
    end of every epoch after the first round(161 / 300 E) (minibatches of 8: eight steps an epoch, so the SGD
    iterates spread); the deviations D_i = theta_i - theta_bar_i (the running mean) of the last ``rank`` snapshots;
    and the draws N(theta_bar, scale (diag(theta2_bar - theta_bar^2) + D D^T / (K - 1))), or scale times the
    diagonal alone for SWAG-Diagonal, each of MultiSWAG's runs its own. Every target here is computed from the
    iterates the engine produced (its ``on_step`` hook), not from the method's own moments; 2000 draws per run are
    compared with it within 4.5 standard errors, and the stored moments with the iterates' to round-off."""
    runs_recorded = engine_iterates(lambda state: state.params.detach().clone())
    stored, draws = [], []
    collect, sample = Moments.collect, Moments.sample
    monkeypatch.setattr(Moments, "collect", lambda self, params: (stored.append(self), collect(self, params))[1])
    monkeypatch.setattr(Moments, "sample", lambda self, *args: draws.append(sample(self, *args)) or draws[-1])
    epochs = 100
    fitted = fit(linear.task, method, budget=epochs * runs, settings={"batch_size": 8, "samples": 2000})
    c, first = fitted.config, round(161 / 300 * epochs)
    steps_per_epoch = linear.n // 8
    iterates = torch.stack(runs_recorded[0].steps).double()  # (steps, runs, 4)
    snapshots = iterates[[epoch * steps_per_epoch - 1 for epoch in range(first + 1, epochs + 1)]]
    n = snapshots.shape[0]
    assert fitted.report["snapshots_per_run"] == n == 46
    mean, second = snapshots.mean(0), snapshots.square().mean(0)
    running = snapshots.cumsum(0) / torch.arange(1, n + 1, dtype=torch.float64)[:, None, None]
    deviations = (snapshots - running)[-c.rank:]  # (K, runs, 4)
    moments = stored[-1]
    torch.testing.assert_close(moments.mean, mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(moments.sq_mean, second, rtol=1e-12, atol=1e-12)
    ring = [index % c.rank for index in range(n - c.rank, n)]  # where the last K deviations sit in the buffer
    torch.testing.assert_close(moments.deviations[:, ring].transpose(0, 1), deviations, rtol=1e-9, atol=1e-12)
    samples = torch.stack(draws).double()  # (2000, runs, 4)
    assert samples.shape == (c.samples, runs, 4)
    for run in range(runs):
        covariance = torch.diag(second[run] - mean[run] ** 2)
        if method != "swag-diag":
            covariance = covariance + deviations[:, run].T @ deviations[:, run] / (c.rank - 1)
        z_mean, z_covariance = moments_z(samples[:, run], mean[run], c.scale * covariance)
        assert z_mean.abs().max() < 4.5 and z_covariance.abs().max() < 4.5, (run, z_mean, z_covariance)

