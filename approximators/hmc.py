r"""Budgeted full-batch Hamiltonian Monte Carlo: the reference sampler itself under the epoch budget (``hmc``).

How far is the gold standard from itself at a budget users can afford? This is the sampler that computes the
embedded tasks' references (:mod:`bench.hmc`, Izmailov et al. 2021): ``chains`` independent chains, each
iteration a fresh momentum p ~ N(0, I), n leapfrog steps of the full-data log posterior log p(D | theta) +
log N(theta; 0, v I) and a Metropolis test on the change of energy. The trajectory is either ``leapfrog_steps``
= L steps long, n = ceil(L u), or, with ``leapfrog_steps`` = 0, as the references' of fixed length tau =
``trajectory_length`` (0: (pi / 2) sqrt(v)), n = ceil(tau u / eps); u ~ U(1 - j, 1 + j) with j = ``jitter``.

The step size of each chain starts where a search for its trajectory puts it
(:func:`bench.hmc.find_reasonable_step_size`): Hoffman & Gelman's (2014) Algorithm 4, with one momentum r ~ N(0, I)
per chain, from eps = ``initial_step_size``: a = 1 if the acceptance ratio exp(-Delta H) exceeds 1/2, else -1, and
eps <- 2^a eps while ratio^a > 2^-a. Two differences from the paper: each ratio is that of a whole trajectory from
the chain's start, L leapfrog steps (unjittered) or ceil(tau / eps), where the paper's is one leapfrog step's; and
the chain ends on the accepting side of the crossing (doubling, at the last step size whose ratio exceeded 1/2, one
halving before where the paper stops; halving, where it stops). With a trajectory of fixed length, whose steps at a
tiny step size are many (tau / eps: 703 at 1e-3 on toy-gap), the search runs first with the paper's test of one
leapfrog step, and the search of the trajectory starts from the step that found. Dual averaging (the paper's Algorithm 5) then tunes
each chain's step size towards ``target_accept`` from the first iteration on, centred on the step found, mu =
log(eps), where the paper has log(10 eps) (at ``target_accept`` 0.8 the paper's first update multiplies a step its
trajectory accepted by 14 after an accepted proposal: too far for a budget of a few iterations), and it is frozen at
its averaged value when burn-in ends. After burn-in every iteration's state is a sample; the predictive is the model
average over the samples of every chain (regression: 1000 draws of y spread evenly over them).

Budget rule: every full-batch gradient of one chain reads the whole training set through the meter and is
charged one epoch: the initial gradient, each leapfrog step of the step-size search's trajectories (L, or one,
then ceil(tau / eps), per chain still searching and round) and each leapfrog step of an iteration; vectorised
chains are charged for the steps computed for chains whose trajectory already ended, as the network computes
them. Burn-in lasts while less than ``burn_in`` of the budget is spent; an iteration starts only if its
longest possible trajectory fits in what is left, so the run ends with the unspent epochs reported. At most
``2 * max_samples`` samples are kept: when that many are held, every other one is dropped and from then on
only every other iteration is kept (the kept samples stay evenly spaced). The step-size search may spend at
most half of what the initial gradients leave: it stops after 30 rounds (each search) or before a round that
would spend more (a chain cut off while doubling keeps the last step size it tested, one cut off while halving
the next halving). A budget with which some run could end before its first sample is refused when the run
is planned (:meth:`BudgetedHMC.check_budget_rule`; with a trajectory of fixed length, whose steps depend on the
step size found, only when the run ends without one).

Deviations from the references' runs: a fixed number of leapfrog steps by default (a trajectory of the
references' length takes 50 to 300 steps on the embedded tasks, so a budget of 100 epochs would not finish one),
the step-size search for the trajectory at the start and dual averaging centred on its result (the references
start every chain at 1e-3, with mu = log(1e-2), and run 100 burn-in iterations, far more than a budget of a few
hundred epochs allows), and burn-in measured in epochs rather than iterations. ``vectorise`` and ``compiled``
choose how the trajectories are computed (:class:`bench.hmc.Integrator`): all chains at once or one by one,
eagerly or as one compiled function per leapfrog step (about 20-30 s to compile, worth it only for long runs); they
change round-off and speed, and, vectorised, what finished chains are charged.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from approximators.base import (EVAL_CHUNK, Approximator, Footprint, PredictiveAccumulator, Problem,
                                member_generators, next_seed)
from approximators.refusals import budget_refusal, settings_that_lower
from bench import checkpoint
from bench.budget import MeteredData
from bench.errors import BudgetExhausted, ConfigError, SamplerStuck
from bench.functional import StackedModel
from bench import hmc

MAX_LEAPFROG_STEPS = 10_000
"""The references' cap on one trajectory's steps (``reference.settings.HMCSettings``)."""
SEARCH_ROUNDS = 30
"""At most this many rounds (doublings or halvings) of a step-size search (with a trajectory of fixed length, of each
of its two: one leapfrog step, then the trajectory)."""


@dataclass(frozen=True)
class HMCConfig:
    chains: int = 1
    burn_in: float = 0.5
    leapfrog_steps: int = 10
    trajectory_length: float = 0.0
    jitter: float = 0.2
    initial_step_size: float = 1e-3
    target_accept: float = 0.8
    max_samples: int = 500
    vectorise: bool = True
    compiled: bool = False

    BOUNDS: ClassVar[dict[str, str]] = {
        "chains": "[1, inf)",
        "burn_in": "[0, 1)",
        "leapfrog_steps": "[0, inf)",
        "trajectory_length": "[0, inf)",
        "jitter": "[0, 1)",
        # the step-size search halves or doubles at most SEARCH_ROUNDS = 30 times (a factor 2^30, about 1e9): from
        # anywhere in this interval it can reach the steps that work on the embedded tasks (1e-4 to 1e-1), where the
        # budget pays for the rounds (L gradients per chain each, with leapfrog_steps L)
        "initial_step_size": "[1e-10, 1e5]",
        "target_accept": "(0, 1)",
        "max_samples": "[1, inf)",
    }
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""


HMC_DEFAULTS: dict[str, dict] = {
    # leapfrog_steps: the lowest held-out NLL averaged over the budgets the benchmark reports, 100 and 1000, among 3,
    # 10, 30 and 100 steps (`python benchmarks/tune_trajectory.py hmc --budget 100 1000`; 30 and 100 leave no sample
    # after burn-in at 100): 3 on diabetes-gap, the class default of 10 elsewhere.
    "diabetes-gap": dict(leapfrog_steps=3),
    # Chain by chain on the convnet and the CNN-LSTM, where `benchmarks/hmc_speed.py` measured it faster.
    "digits-cnn": dict(vectorise=False),
    "digits-lstm": dict(vectorise=False),
}


class EvenlyKept:
    """Samples' test outputs kept evenly spaced in at most ``2 * limit`` entries: every ``stride``-th offered
    sample is kept, and when ``2 * limit`` are held every other one is dropped and the stride doubles."""

    def __init__(self, limit: int):
        self.limit, self.stride, self.offered, self.outputs = limit, 1, 0, []

    def wants_next(self) -> bool:
        """Whether the next offered sample will be kept (so that only kept samples are evaluated)."""
        return self.offered % self.stride == 0

    def state_dict(self) -> dict:
        """What a run's checkpoint keeps: the stride, the samples offered and the outputs kept (copies)."""
        return {"stride": self.stride, "offered": self.offered, "outputs": [o.clone() for o in self.outputs]}

    def load_state_dict(self, state: dict) -> None:
        self.stride, self.offered, self.outputs = int(state["stride"]), int(state["offered"]), list(state["outputs"])

    def offer(self, outputs: torch.Tensor | None) -> None:
        """The next sample's outputs ``(C, N_test, n_outputs)`` (None when :meth:`wants_next` was false)."""
        if self.wants_next():
            self.outputs.append(outputs)
            if len(self.outputs) == 2 * self.limit:
                self.outputs, self.stride = self.outputs[::2], 2 * self.stride
        self.offered += 1


class BudgetedHMC(Approximator):
    name = "hmc"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "full-batch HMC, the references' sampler, under the budget: one epoch per chain-gradient"
    paper = "Neal 2011; Izmailov et al. 2021"
    Config = HMCConfig
    TASK_DEFAULTS = HMC_DEFAULTS
    check_budget = 100.0

    def resolved(self, problem: Problem) -> HMCConfig:
        """``trajectory_length`` as the references' tau = (pi / 2) sqrt(v) where it says 0 and sets the trajectory
        (``leapfrog_steps`` 0)."""
        c = self.config
        if c.leapfrog_steps or c.trajectory_length:
            return c
        return dataclasses.replace(c, trajectory_length=hmc.default_trajectory_length(problem.prior_variance))

    def footprint(self, budget: float, n_train: int) -> Footprint:
        self.check_budget_rule(budget)  # refused when the run is planned, before training
        return Footprint(self.config.chains, 0, what="chain", members=self.config.chains, rows=n_train)

    def check_budget_rule(self, budget: float) -> None:
        """Refuses, in one line, a budget with which some run could end before its first sample. With
        ``leapfrog_steps`` = L, an iteration costs at most T = chains * ceil(L (1 + jitter)) gradients, the initial
        gradients and the step-size search at most chains + (budget - chains) / 2, and the last burn-in iteration
        ends before burn_in * budget + T: a sample is certain once budget >= chains + 2 T and
        budget (1 - burn_in) >= 2 T. With a trajectory of fixed length, its steps depend on the step size the search
        finds, so only chains + chains epochs (one leapfrog step) are asked here and :meth:`fit` refuses the rest."""
        c = self.config
        if c.leapfrog_steps and c.trajectory_length:
            raise ConfigError(f"hmc: trajectory_length sets the trajectory only with leapfrog_steps=0 (got "
                              f"leapfrog_steps={c.leapfrog_steps}); set one of the two")
        if budget < 2 * c.chains:
            raise self._refusal(budget, f"leaves {c.chains} chain(s) no leapfrog step after their initial gradients")
        if c.leapfrog_steps and math.floor(budget + 1e-9) < self.smallest_budget():
            raise self._refusal(budget, f"could end before a sample: {c.chains} chain(s) of up to "
                                        f"{math.ceil(c.leapfrog_steps * (1 + c.jitter))} leapfrog steps per iteration, "
                                        f"burn_in={c.burn_in:g}")

    def _refusal(self, budget: float, why: str) -> BudgetExhausted:
        least_asking = {"chains": 1, "jitter": 0.0, "burn_in": 0.0, **({"leapfrog_steps": 1}
                                                                         if self.config.leapfrog_steps else {})}
        return budget_refusal("hmc", budget, why, self.smallest_budget(),
                              settings_that_lower(self, type(self).smallest_budget, least_asking))

    def smallest_budget(self) -> int:
        """What :meth:`check_budget_rule` asks (its docstring derives it): a leapfrog step per chain after the
        initial gradients, and with ``leapfrog_steps`` fixed, a sample certain before the budget ends."""
        c = self.config
        least = 2 * c.chains
        if c.leapfrog_steps:
            iteration = c.chains * math.ceil(c.leapfrog_steps * (1 + c.jitter))
            least = max(least, c.chains + 2 * iteration, math.ceil(2 * iteration / (1 - c.burn_in) - 1e-9))
        return least

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        meter = data.meter
        self.check_budget_rule(meter.budget_epochs)
        generators = member_generators(generator, c.chains)
        model = StackedModel(problem.model_factory())
        rows = torch.arange(data.n_train)

        def log_likelihood(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return problem.likelihood.log_prob(model.flat(theta, x), y).double().sum(-1)

        target = hmc.Target(log_likelihood, problem.prior_variance,
                            data=lambda chains: data.shared_batch(rows, copies=chains))
        integrator = hmc.Integrator(target, vectorise=c.vectorise, compiled=c.compiled)
        initial = model.layout.flatten(StackedModel.seeded(
            problem.model_factory, [next_seed(g) for g in generators])).to(data.device)
        fixed_length = c.trajectory_length or hmc.default_trajectory_length(problem.prior_variance)
        start = initial.clone()
        state = hmc.init(initial, target, c.initial_step_size, adapt=True)
        tape = checkpoint.active()
        # The step-size search is one resumable call and the sampling another (bench.checkpoint): a resumed run
        # replaying past the search skips it, since the sampling's saved state holds what it found.
        saved = tape.enter_call() if tape is not None else None
        if saved is None:
            state = self._searched(state, target, generators, integrator, fixed_length, meter)
        elif not saved.get("skip"):
            state = _state_from(saved["hmc"], data.device)
            tape.resumed_here()
        if tape is not None:
            tape.leave_call(lambda: {"kind": "end", "hmc": _state_dict(state)})
        kept = EvenlyKept(c.max_samples)
        iterations, burn_in_iterations, accepted = 0, 0, 0.0
        saved = tape.enter_call() if tape is not None else None
        if saved is not None:
            state, start = _state_from(saved["hmc"], data.device), saved["start"].to(data.device)
            kept.load_state_dict(saved["kept"])
            iterations, burn_in_iterations, accepted = saved["iterations"], saved["burn_in"], saved["accepted"]
            tape.resumed_here()

        def sampling(kind: str) -> dict:
            """The sampling call's state as the run's checkpoint keeps it."""
            return {"kind": kind, "hmc": _state_dict(state), "start": start.clone(), "kept": kept.state_dict(),
                    "iterations": iterations, "burn_in": burn_in_iterations, "accepted": accepted}

        while True:
            adapting = state.adaptation is not None
            if adapting and meter.epochs_used >= c.burn_in * meter.budget_epochs:
                state, adapting = hmc.freeze(state), False
            if c.leapfrog_steps:
                longest = torch.full((c.chains,), math.ceil(c.leapfrog_steps * (1 + c.jitter)))
            else:
                longest = hmc.leapfrog_steps(fixed_length * (1 + c.jitter), state.step_size, MAX_LEAPFROG_STEPS)
            if integrator.gradient_evaluations(longest) > self._gradients_left(meter):
                break
            state, info = hmc.step(state, target, fixed_length, generators, c.target_accept, MAX_LEAPFROG_STEPS,
                                   c.jitter, integrator, n_leapfrog=c.leapfrog_steps or None)
            iterations += 1
            if adapting:
                burn_in_iterations += 1
            else:
                accepted += float(info.accepted.double().mean())
                kept.offer(_test_outputs(problem, model, state.position) if kept.wants_next() else None)
            if tape is not None:
                tape.after_step(lambda: sampling("step"))
        if tape is not None:
            tape.leave_call(lambda: sampling("end"))
        if not kept.outputs:
            raise BudgetExhausted(f"hmc: a budget of {meter.budget_epochs:g} epochs ended {c.chains} chain(s) after "
                                  f"{burn_in_iterations} burn-in iteration(s), before any sample; raise the budget, "
                                  f"lower burn_in or trajectory_length")
        stuck = unmoved_chains(start, state.position, state.step_size, iterations)
        outputs = torch.cat(kept.outputs).double()
        accumulator = PredictiveAccumulator(problem, outputs.shape[0], generator)
        accumulator.add_outputs(outputs)
        samples = iterations - burn_in_iterations
        self.report = {"chains": c.chains, "iterations": iterations, "burn_in_iterations": burn_in_iterations,
                       "samples_per_chain": samples, "samples_kept": outputs.shape[0],
                       "acceptance_rate": accepted / samples if samples else None,
                       "step_sizes": state.step_size.tolist(),
                       "trajectory": f"{c.leapfrog_steps} steps" if c.leapfrog_steps else f"length {fixed_length:g}",
                       "epochs_unspent": meter.epochs_left}
        warnings = []
        if stuck:
            warnings.append(f"chain(s) {', '.join(map(str, stuck))} of {c.chains} never left their start: their "
                            "samples are the untrained network")
        if samples and not accepted:  # it moved in burn-in, then stood still: its samples are one point
            warnings.append(f"no proposal was accepted after burn-in: the {samples} sample(s) of each chain are its "
                            "last burn-in position; a larger budget adapts the step size longer")
        if warnings:
            self.report["warnings"] = warnings
        self._predictive = accumulator.result()

    def _searched(self, state: hmc.HMCState, target, generators, integrator, fixed_length: float,
                  meter) -> hmc.HMCState:
        """The step size found for the trajectory: one-step rounds first where the trajectory has a fixed length (a
        trajectory of length tau at a tiny step is tau / eps steps), then rounds of whole trajectories, after which
        dual averaging restarts centred on the step found."""
        c = self.config
        allowance = self._gradients_left(meter) // 2
        if not c.leapfrog_steps:
            left = self._gradients_left(meter)
            state = hmc.find_reasonable_step_size(state, target, generators, integrator, max_doublings=SEARCH_ROUNDS,
                                                  max_gradients=allowance)
            allowance -= left - self._gradients_left(meter)
        return hmc.find_reasonable_step_size(
            state, target, generators, integrator, max_doublings=SEARCH_ROUNDS, n_leapfrog=c.leapfrog_steps,
            trajectory_length=None if c.leapfrog_steps else fixed_length, max_leapfrog_steps=MAX_LEAPFROG_STEPS,
            max_gradients=allowance, adaptation_centre=1.0)

    @staticmethod
    def _gradients_left(meter) -> int:
        """Full-data chain-gradients the budget still pays for."""
        return round(meter.epochs_left * meter.n_train) // meter.n_train


_ADAPTATION_FIELDS = ("mu", "h_bar", "log_step_bar", "iteration", "gamma", "t0", "kappa")


def _state_dict(state: hmc.HMCState) -> dict:
    """The chains' state as a run's checkpoint keeps it (tensors cloned; the adaptation's, or None once frozen)."""
    adaptation = state.adaptation
    return {"position": state.position.clone(), "log_likelihood": state.log_likelihood.clone(),
            "log_prior": state.log_prior.clone(), "grad": state.grad.clone(), "step_size": state.step_size.clone(),
            "adaptation": None if adaptation is None else {
                name: (value.clone() if isinstance(value, torch.Tensor) else value)
                for name, value in ((name, getattr(adaptation, name)) for name in _ADAPTATION_FIELDS)}}


def _state_from(saved: dict, device: torch.device) -> hmc.HMCState:
    """The chains' state :func:`_state_dict` kept, on ``device``."""
    on = lambda value: value.to(device) if isinstance(value, torch.Tensor) else value  # noqa: E731
    adaptation = saved["adaptation"]
    return hmc.HMCState(*(on(saved[name]) for name in ("position", "log_likelihood", "log_prior", "grad", "step_size")),
                        None if adaptation is None else hmc.DualAveraging(**{n: on(adaptation[n])
                                                                            for n in _ADAPTATION_FIELDS}))


def unmoved_chains(start: torch.Tensor, position: torch.Tensor, step_sizes: torch.Tensor, iterations: int) -> list[int]:
    """The chains that never left their start (``start``, ``position``: ``(C, P)``): every proposal rejected, or steps
    too small to change a parameter. Where every chain did, the run is refused (its predictive would be the untrained
    network's); where some did, they are returned, for the report's warnings."""
    stuck = [chain for chain in range(start.shape[0]) if torch.equal(start[chain], position[chain])]
    if len(stuck) == start.shape[0]:
        raise SamplerStuck(f"hmc: no chain left its start in {iterations} iteration(s) (step size "
                           f"{float(step_sizes[0]):.3g}): every proposal was rejected or moved no parameter; raise the "
                           "budget, or set initial_step_size nearer 1e-3")
    return stuck


def _test_outputs(problem: Problem, model: StackedModel, position: torch.Tensor) -> torch.Tensor:
    """The chains' outputs on the test inputs ``(C, N_test, n_outputs)`` float32 on the CPU, evaluated
    :data:`~approximators.base.EVAL_CHUNK` rows at a time (a test pass per chain)."""
    x = problem.x_test
    with torch.no_grad():
        outputs = torch.cat([model.flat(position, x[i:i + EVAL_CHUNK]).float().cpu()
                             for i in range(0, x.shape[0], EVAL_CHUNK)], dim=1)
    problem.meter.record_test_pass(position.shape[0] * x.shape[0], x.shape[0])
    return outputs
