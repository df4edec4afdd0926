"""Every method trains and predicts on every competition architecture (random data of the official
shapes: the official files cannot be downloaded in tests), charged exactly its budget."""

import numpy as np
import pytest
import torch

from approximators import METHODS, resolve_config
from bench.runner import metered
from bench.tasks.competition import SPECS, generated_task

SHORT = {  # (budget, settings): a couple of epochs per member or chain, few test passes
    "sgd": (1, {}), "de": (2, {"members": "2"}), "ae": (2, {"epochs": "1"}),
    "sae": (3, {"first_epochs": "1", "sequential_epochs": "1", "chains": "1"}),
    "swag": (4, {"samples": "2"}), "swag-diag": (4, {"samples": "2"}), "multiswag": (8, {"runs": "2", "samples": "2"}),
    # Samplers with small steps: with 10 random rows the posterior is nearly the prior, whose draws
    # overflow the deeper networks' outputs at the competition defaults' step sizes.
    "sgld": (2, {"chains": "2", "burn_in": "0", "lr": "1e-3"}),
    "csgmcmc": (4, {"samples_per_cycle": "1", "exploration": "0.5", "lr": "1e-3"}),
    "vogn": (2, {"samples": "2"}),
    "mfvi": (2, {"samples": "2"}),
    "mc-dropout": (1, {"samples": "2"}),
    "laplace": (2, {"samples": "2"}),
    "hmc": (12, {"leapfrog_steps": "2", "burn_in": "0.2", "initial_step_size": "1e-4"}),
}
CHARGED = {"vogn": 1 + 4 / 10}  # the initialisation minibatch (4 of 10 rows), then whole epochs; the rest unspent


def test_every_method_has_a_short_run_here():
    assert set(SHORT) == set(METHODS)


@pytest.mark.parametrize("task_name", list(SPECS))
@pytest.mark.parametrize("method", list(SHORT))
def test_method_runs_on_the_competition_model(method, task_name):
    task = generated_task(task_name, 10, test_rows=10)
    budget, overrides = SHORT[method]
    cls = METHODS[method]
    batch = {"batch_size": "4"} if "batch_size" in cls.Config.__dataclass_fields__ else {}
    config = resolve_config(cls, task_name, {**batch, **overrides})
    problem, data = metered(task, budget)
    approximator = cls(config)
    approximator.fit(problem, data, torch.Generator().manual_seed(0))
    predictive = approximator.predictive()
    # hmc stops before a trajectory that would not fit: what it leaves is reported, never more than the budget.
    charged = budget - approximator.report["epochs_unspent"] if method == "hmc" else CHARGED.get(method, budget)
    assert data.meter.epochs_used == pytest.approx(charged, abs=1e-12) and data.meter.epochs_used <= budget
    assert np.isfinite(predictive).all()
    assert predictive.shape == ((10, 1000) if task.n_classes is None else (10, task.n_classes))
