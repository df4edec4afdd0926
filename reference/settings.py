"""HMC settings of every shipped reference: the one place where they are decided.

A change here changes the reference; regenerate it with ``python -m bench reference generate
--task T --install`` and commit the new files and registry entry together.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class HMCSettings:
    """Settings of one reference run.

    ``n_chains`` independent chains (even: the noise floor compares the two halves), each with
    ``n_burnin`` adapted iterations that are discarded and ``n_samples`` kept iterations (every
    ``thinning``-th of ``n_samples * thinning``). ``trajectory_length`` None means (pi/2) sqrt(v);
    ``jitter`` j draws each iteration's length uniformly from [(1 - j) tau, (1 + j) tau]
    (:mod:`bench.hmc`). ``vectorise``: all chains in one pass, else chain by chain;
    ``compiled``: each leapfrog step one ``torch.compile``-d function. Those two change only round-off
    (and speed), but a reference reproduces bitwise only with the same choice, so they are settings too.
    """

    n_chains: int = 8
    n_burnin: int = 200
    n_samples: int = 500
    thinning: int = 1
    initial_step_size: float = 1e-3
    target_accept: float = 0.8
    trajectory_length: float | None = None
    max_leapfrog_steps: int = 10_000
    dtype: str = "float64"
    seed: int = 0
    jitter: float = 0.0
    vectorise: bool = True
    compiled: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


REFERENCE_SETTINGS: dict[str, HMCSettings] = {
    "toy-gap": HMCSettings(n_chains=8, n_burnin=100, n_samples=300),
    "diabetes-gap": HMCSettings(n_chains=8, n_burnin=100, n_samples=400),
    "digits": HMCSettings(n_chains=8, n_burnin=100, n_samples=250, dtype="float32"),
    # Chain by chain with compiled leapfrog steps, one thread per chain, so that `--workers N` samples N chains at
    # once: on one thread `python benchmarks/hmc_speed.py` measured it 2.8x vectorised for 8 chains of the CNN-LSTM
    # and within 8% of it for the convnet, which two workers then double on 2 cores (docs/speed.md); trajectory
    # lengths jittered by +-20%.
    "digits-cnn": HMCSettings(n_chains=8, n_burnin=100, n_samples=400, dtype="float32", jitter=0.2,
                              vectorise=False, compiled=True),
    # In a first generation, 300 samples left the worst split R-hat at 1.06 (20 of 14,400 predictive probabilities
    # above 1.05, all of them below 0.001); the chains were extended to 600 (`reference generate` continues
    # finished chains).
    "digits-lstm": HMCSettings(n_chains=8, n_burnin=100, n_samples=600, dtype="float32", jitter=0.2,
                               vectorise=False, compiled=True),
}

R_HAT_LIMIT = 1.05
"""A reference whose worst split R-hat over every test point's predictive (computed at generation from all its draws,
recorded as its ``generation_check``) exceeds this is refused."""

GOLD_STANDARD = {"max_split_rhat": 1.01, "min_ess_per_chain": 100}
"""What a reference must reach to be called gold-standard here, in predictive space (weight space cannot mix: a
network's symmetries make every posterior mode one of many copies), on every quantity of its evidence: worst split
R-hat below 1.01 (Vehtari et al. 2021's threshold) and bulk and tail ESS of at least 100 per chain (what rstan's
documentation of the same diagnostics asks for reliable quantiles). posteriordb's gold standard asks more: 10,000 draws whose bulk and
tail ESS are within 1% of their number, i.e. independent draws. ``reference diagnose`` says which references meet
ours."""
