"""The samplers held to exact laws on Bayesian linear regression (``conftest.py``), through :func:`bench.api.fit`.

At full batch the gradient of the negative log posterior is exactly Lambda (theta - mu), so SGLD's and cSG-MCMC's
recursions are linear Gaussian: given a chain's start, every state it keeps is Gaussian with a mean and covariance
computed exactly from the recursion, which is what each method must reproduce (not the posterior, which a
discretised sampler reaches only as its step shrinks). Budgeted HMC, exact up to its Metropolis test, must
reproduce the posterior itself.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from approximators import hmc as budgeted_hmc
from approximators.base import PredictiveAccumulator
from bench.api import fit
from reference import diagnostics


@pytest.fixture
def kept(monkeypatch, flat):
    """The parameters ``(K, 4)`` of every group of members a method adds to its model average, in order."""
    added = []
    add = PredictiveAccumulator.add

    def keep(self, members):
        added.append(flat(members))
        return add(self, members)

    monkeypatch.setattr(PredictiveAccumulator, "add", keep)
    return added


def test_sgld_samples_the_stationary_law_of_its_own_recursion(linear, kept, moments_z):
    """Full-batch SGLD at a constant step eps is the linear recursion theta <- theta - (eps / 2) Lambda (theta - mu)
    + N(0, eps I), whose stationary law is N(mu, C) with C = eps (I - A^2)^-1 in Lambda's eigenbasis,
    A = I - eps Lambda / 2: not the posterior (C exceeds Lambda^-1 by 1 / (1 - eps lambda / 4), a third along
    Lambda's largest eigenvalue at eps lambda_max = 1). 4096 chains' last samples are independent draws: their
    mean and covariance are compared within 4.5 standard errors."""
    values, vectors = torch.linalg.eigh(linear.precision)
    eps, chains = 1 / float(values.max()), 4096
    fit(linear.task, "sgld", budget=chains * 40, settings={"chains": chains, "batch_size": linear.n,
                                                           "schedule": "constant", "lr": eps * linear.n / 2,
                                                           "burn_in": 0.9})
    draws = kept[-1]
    a = 1 - eps * values / 2
    stationary = vectors @ torch.diag(eps / (1 - a**2)) @ vectors.T
    z_mean, z_covariance = moments_z(draws, linear.mean, stationary)
    assert z_mean.abs().max() < 4.5 and z_covariance.abs().max() < 4.5, (z_mean, z_covariance)
    # ... and the same draws are far from the posterior along the largest eigenvalue.
    top = vectors[:, -1]
    assert float(top @ torch.cov(draws.T) @ top) > 1.2 * float(top @ linear.covariance @ top)


@pytest.fixture
def minibatches(monkeypatch):
    """The rows ``(K, B)`` of every minibatch a run reads through its meter, in order."""
    from bench.budget import MeteredData

    read = []
    batch = MeteredData.batch

    def recording(self, indices, passes=1):
        read.append(indices.clone())
        return batch(self, indices, passes)

    monkeypatch.setattr(MeteredData, "batch", recording)
    return read


def minibatch_terms(linear, rows: torch.Tensor):
    """For each member's minibatch ``rows`` ``(K, B)``: the Hessian ``(K, D, D)`` and the linear term ``(K, D)`` of
    the minibatch estimate of the negative log posterior's gradient, N grad(mean minibatch NLL) + theta / v =
    H_B theta - g_B, with H_B = (N / B) Phi_B^T Phi_B / s^2 + I / v and g_B = (N / B) Phi_B^T y_B / s^2."""
    phi, y = linear.phi[rows], linear.y[rows]  # (K, B, D), (K, B)
    scale = linear.n / rows.shape[1] / linear.noise**2
    eye = torch.eye(phi.shape[-1], dtype=torch.float64)
    return scale * phi.transpose(1, 2) @ phi + eye / linear.prior_variance, scale * (phi * y[..., None]).sum(1)


def whitened(draws: torch.Tensor, means: torch.Tensor, covariances: torch.Tensor) -> torch.Tensor:
    """Each draw ``(K, D)`` of its own N(mean_k, C_k) as a draw of N(0, I): L_k^-1 (theta_k - mean_k), C_k = L_k L_k^T."""
    return torch.linalg.solve_triangular(torch.linalg.cholesky(covariances), (draws - means)[..., None],
                                         upper=False)[..., 0]


@pytest.mark.parametrize("prior_variance", [None, 0.002], ids=["weak-prior", "strong-prior"])
def test_minibatch_sgld_samples_the_exact_law_of_its_recursion_given_its_minibatches(linear, problem, kept, minibatches,
                                                                                     engine_iterates, moments_z,
                                                                                     prior_variance):
    """Issue 48: every exact test ran at batch size N, where an error in the N / B scaling of the minibatch gradient
    or in the noise cannot show. At batch 8 of 64 rows, given the rows each chain read, SGLD is still a linear
    Gaussian recursion, theta <- (I - (eps / 2) H_B) theta + (eps / 2) g_B + sqrt(eps) z, so each chain's last state
    has an exact N(m_k, C_k) computed from its own minibatches and start. Whitened by its own law, the 4096 chains'
    states are draws of N(0, I): their mean and second moment within 4.5 standard errors. With the strong prior
    (precision 500, about twice the 64 rows'), a prior variance taken for a standard deviation shows too: under the
    weak one (precision 2) it would not."""
    from approximators.updates import float32_step

    if prior_variance is not None:
        linear = problem("linear-gaussian-strong", linear.n, linear.noise, prior_variance)

    values, _ = torch.linalg.eigh(linear.precision)
    eps, chains, batch = 0.5 / float(values.max()), 4096, 8
    starts = engine_iterates(lambda state: None)
    fit(linear.task, "sgld", budget=chains * 40, settings={"chains": chains, "batch_size": batch,
                                                           "schedule": "constant", "lr": eps * linear.n / 2,
                                                           "burn_in": 0.9})
    assert len(minibatches) == 40 * linear.n // batch
    mean = starts[0].start.double()  # (K, D): the engine's flat layout, weights then bias, as Phi's columns
    covariance = torch.zeros(chains, 4, 4, dtype=torch.float64)
    drift, noise = float32_step(0.5 * eps * linear.n) / linear.n, eps  # the rule's own coefficients
    for rows in minibatches:
        hessian, linear_term = minibatch_terms(linear, rows)
        step = torch.eye(4, dtype=torch.float64) - drift * hessian
        mean = (step @ mean[..., None])[..., 0] + drift * linear_term
        covariance = step @ covariance @ step.transpose(1, 2) + noise * torch.eye(4, dtype=torch.float64)
    z = whitened(kept[-1], mean, covariance)
    z_mean, z_covariance = moments_z(z, torch.zeros(4, dtype=torch.float64), torch.eye(4, dtype=torch.float64))
    assert z_mean.abs().max() < 4.5 and z_covariance.abs().max() < 4.5, (z_mean, z_covariance)


def sghmc_law(precision: torch.Tensor, rates: list[float], noisy: list[bool], friction: float, form: str):
    """The exact law of the cyclical sampler's recursion over x = theta - mu (and SGHMC's velocity v), started at
    (x_0, 0): per step, the transition ``(2D, 2D)`` from the start, and the covariance the noise has added,
    for the state (x, v). Each step is s <- M s + noise with

        sghmc:  v <- (1 - a) v - eta Lambda x + sqrt(2 a eta) z,   x <- x + v
        sgld:   x <- x - eta Lambda x + sqrt(2 eta) z              (the paper's alpha = eta, SGLD's eps = 2 eta)
    """
    dim = precision.shape[0]
    eye = torch.eye(dim, dtype=torch.float64)
    transition, noise = torch.eye(2 * dim, dtype=torch.float64), torch.zeros(2 * dim, 2 * dim, dtype=torch.float64)
    laws = []
    for eta, adds_noise in zip(rates, noisy):
        if form == "sghmc":
            step = torch.cat([torch.cat([eye - eta * precision, (1 - friction) * eye], 1),
                              torch.cat([-eta * precision, (1 - friction) * eye], 1)])
            added = 2 * friction * eta * torch.ones(2, 2, dtype=torch.float64).kron(eye)
        else:
            step = torch.block_diag(eye - eta * precision, 0 * eye)
            added = torch.block_diag(2 * eta * eye, 0 * eye)
        transition, noise = step @ transition, step @ noise @ step.T + (added if adds_noise else 0)
        laws.append((transition, noise))
    return laws


@pytest.mark.parametrize("form", ["sghmc", "sgld"])
def test_csgmcmc_samples_the_exact_law_of_its_own_recursion(linear, kept, engine_iterates, moments_z, form):
    """cSG-MCMC at its defaults (friction, temperature 1, cycles of 50 epochs, exploration 0.9, 3 samples per cycle,
    lr; full batch, so one step per epoch): Zhang et al.'s step eta_k = (lr / N) / 2 (cos(pi r_k) + 1),
    r_k = k / 50, noise only where r_k >= 0.9, samples at the ends of epochs 48, 49 and 50. The step never stays
    constant, so there is no stationary law: given each chain's start, the three samples are Gaussian with the mean
    and covariance :func:`sghmc_law` propagates. 1024 chains' deviations from their own exact means are compared
    with that covariance within 4.5 standard errors."""
    chains = 1024
    starts = engine_iterates(lambda state: None)
    fitted = fit(linear.task, "csgmcmc", budget=chains * 50, settings={"chains": chains, "batch_size": linear.n,
                                                                       "form": form})
    c = fitted.config
    assert fitted.report["cycles"] == 1 and fitted.report["epochs_per_cycle"] == 50
    proportions = [k / 50 for k in range(50)]
    rates = [c.lr / linear.n / 2 * (math.cos(math.pi * r) + 1) for r in proportions]
    laws = sghmc_law(linear.precision, rates, [r >= c.exploration for r in proportions], c.friction, form)
    start = torch.cat([starts[0].start.double() - linear.mean, torch.zeros(chains, 4, dtype=torch.float64)], 1)
    for draws, step in zip(kept, (47, 48, 49)):
        transition, noise = laws[step]
        expected = linear.mean + (start @ transition.T)[:, :4]
        z_mean, z_covariance = moments_z(draws - expected, torch.zeros(4, dtype=torch.float64), noise[:4, :4])
        assert z_mean.abs().max() < 4.5 and z_covariance.abs().max() < 4.5, (step, z_mean, z_covariance)


@pytest.mark.parametrize("form", ["sghmc", "sgld"])
def test_minibatch_csgmcmc_samples_the_exact_law_of_its_recursion_given_its_minibatches(
        linear, kept, minibatches, engine_iterates, moments_z, form):
    """Issue 48: the test above at batch 8 of 64 rows (eight steps an epoch, the same 50-epoch cycle), where an error
    in the minibatch gradient's N / B scaling or in the noise would show. Given the rows each chain read, the state
    (theta, v) is a linear Gaussian recursion with the minibatch Hessian H_B and linear term g_B, on the rule's own
    step sizes and noise flags:

        sghmc:  v <- (1 - a) v - eta (H_B theta - g_B) + sqrt(2 a eta) z,   theta <- theta + v
        sgld:   theta <- theta - (eps / 2) (H_B theta - g_B) + sqrt(eps) z

    Each chain's three samples, whitened by their own exact law, are draws of N(0, I) (4.5 standard errors)."""
    from approximators.updates import float32_step

    chains, batch = 1024, 8
    runs = engine_iterates(lambda state: None)
    fitted = fit(linear.task, "csgmcmc", budget=chains * 50, settings={"chains": chains, "batch_size": batch,
                                                                       "form": form})
    assert fitted.report["cycles"] == 1 and fitted.report["epochs_per_cycle"] == 50
    rule, steps_per_epoch = runs[0].rule, linear.n // batch
    assert len(minibatches) == 50 * steps_per_epoch
    eye = torch.eye(4, dtype=torch.float64)
    mean = torch.cat([runs[0].start.double(), torch.zeros(chains, 4, dtype=torch.float64)], 1)  # (theta, v)
    covariance = torch.zeros(chains, 8, 8, dtype=torch.float64)
    laws = {}
    for step, rows in enumerate(minibatches):
        hessian, linear_term = minibatch_terms(linear, rows)
        if form == "sghmc":
            eta, keep = rule.schedule[step], 1 - rule.alpha
            drift = float32_step(eta * linear.n) / linear.n
            top = torch.cat([eye - drift * hessian, keep * eye.expand(chains, 4, 4)], 2)
            bottom = torch.cat([-drift * hessian, keep * eye.expand(chains, 4, 4)], 2)
            shift = torch.cat([drift * linear_term, drift * linear_term], 1)
            added = 2 * rule.alpha * eta * torch.ones(2, 2, dtype=torch.float64).kron(eye)
        else:
            eps = rule.schedule[step]
            drift = float32_step(0.5 * eps * linear.n) / linear.n
            top = torch.cat([eye - drift * hessian, 0 * eye.expand(chains, 4, 4)], 2)
            bottom = torch.zeros(chains, 4, 8, dtype=torch.float64)
            shift = torch.cat([drift * linear_term, torch.zeros(chains, 4, dtype=torch.float64)], 1)
            added = torch.block_diag(eps * eye, 0 * eye)
        transition = torch.cat([top, bottom], 1)
        mean = (transition @ mean[..., None])[..., 0] + shift
        covariance = transition @ covariance @ transition.transpose(1, 2) + (added if rule.noisy[step] else 0)
        if (step + 1) % steps_per_epoch == 0:
            laws[(step + 1) // steps_per_epoch - 1] = (mean[:, :4].clone(), covariance[:, :4, :4].clone())
    for draws, epoch in zip(kept, (47, 48, 49)):
        z = whitened(draws, *laws[epoch])
        z_mean, z_covariance = moments_z(z, torch.zeros(4, dtype=torch.float64), eye)
        assert z_mean.abs().max() < 4.5 and z_covariance.abs().max() < 4.5, (epoch, z_mean, z_covariance)


def test_budgeted_hmc_samples_the_closed_form_posterior(linear, problem, monkeypatch):
    """At a generous budget the kept samples' mean and covariance are the exact posterior's, within Monte Carlo
    error measured by the samples' own effective sample size. Every chain starts at weights 3 and bias -3, about
    a hundred posterior standard deviations away: samples taken before burn-in ends would bias the moments. 64
    chains of about 120 samples each (vectorised, as cheap as a few chains): enough that HMC without its Metropolis
    test, whose leapfrog error then inflates the variances by 10-20% at the tuned step, is seen. At 750 epochs per
    chain (about 60 burn-in iterations, then 60 samples), trajectories of 5 steps near half the posterior's period
    made draws that alternate about the mean (lag-1 autocorrelation -0.5), and once dual averaging centred on the
    step found rather than 10 times it, the split R-hat of the second weight measured 1.035 to 1.069 over seeds
    0-7; at 1500, 1.015 to 1.025 over seeds 0-5."""
    def far_away():
        layer = nn.Sequential(nn.Linear(3, 1)).double()
        with torch.no_grad():
            layer[0].weight.fill_(3.0)
            layer[0].bias.fill_(-3.0)
        return layer

    positions = []
    real = budgeted_hmc._test_outputs
    monkeypatch.setattr(budgeted_hmc, "_test_outputs", lambda problem, model, position: (
        positions.append(position.detach().clone()), real(problem, model, position))[1])
    far = problem("linear-gaussian-far", linear.n, linear.noise, linear.prior_variance, model_factory=far_away)
    chains = 64
    fitted = fit(far.task, "hmc", chains * 1500, settings={"chains": chains, "leapfrog_steps": 5, "max_samples": 10_000})
    draws = torch.stack(positions, dim=1).numpy()  # (chains, samples, 4): weight then bias, Phi's order
    assert draws.shape[:2] == (chains, fitted.report["samples_per_chain"])
    assert draws.shape[1] > 50 and diagnostics.split_rhat(draws).max() < 1.05
    mean, cov = far.mean.numpy(), far.covariance.numpy()
    # Monte Carlo standard errors from the exact posterior's spread and the draws' own ESS (a sample spread would
    # grow with any stray draw and hide it): Var(theta_i) = S_ii, Var((theta_i - m_i)(theta_j - m_j)) = S_ii S_jj + S_ij^2.
    flat = draws.reshape(-1, 4)
    z_mean = (flat.mean(0) - mean) / np.sqrt(np.diag(cov) / diagnostics.bulk_ess(draws))
    assert np.abs(z_mean).max() < 4.5, z_mean
    centred = draws - mean
    second = centred[..., :, None] * centred[..., None, :]
    spread = np.sqrt(np.outer(np.diag(cov), np.diag(cov)) + cov**2)
    z_cov = (second.reshape(-1, 4, 4).mean(0) - cov) / (spread / np.sqrt(diagnostics.bulk_ess(second)))
    assert np.abs(z_cov).max() < 4.5, z_cov
