"""The guided walk leaves the prior invariant and moves in persistent directions."""

import numpy as np
import torch

from approximators import guided_walk
from reference import diagnostics


def run(n_walks, dim, steps, step_size, variance, seed=0):
    generators = [torch.Generator().manual_seed(seed + i) for i in range(n_walks)]
    state = guided_walk.init(generators, dim, variance)
    values, accepts = [], []
    for _ in range(steps):
        state, accepted = guided_walk.step(state, generators, step_size, variance)
        values.append(state.anchor)
        accepts.append(accepted)
    return torch.stack(values, 1).numpy(), torch.stack(accepts, 1).numpy()  # (walks, steps, dim)


def test_leaves_the_prior_invariant():
    """Mean and variance within 4 Monte-Carlo standard errors, each computed from the bulk ESS of
    the very quantity averaged (x for the mean, x^2 for the variance)."""
    variance = 0.5
    values, _ = run(n_walks=4, dim=6, steps=20_000, step_size=0.5, variance=variance)
    for quantity, expected in ((values, 0.0), (values**2, variance)):
        flat = quantity.reshape(-1, quantity.shape[-1])
        se = flat.std(0) / np.sqrt(diagnostics.bulk_ess(quantity))
        assert np.all(np.abs(flat.mean(0) - expected) < 4 * se), (flat.mean(0), expected, se)


def test_small_steps_move_in_persistent_directions():
    """With s << sqrt(v) nearly every step is accepted and keeps its direction, so successive
    increments share their sign far more often than the 1/2 of an undirected random walk."""
    values, accepts = run(n_walks=2, dim=50, steps=400, step_size=0.01, variance=1.0)
    increments = np.diff(values, axis=1)
    moving = (increments[:, 1:] != 0) & (increments[:, :-1] != 0)
    same_sign = (np.sign(increments[:, 1:]) == np.sign(increments[:, :-1]))[moving].mean()
    assert accepts.mean() > 0.95
    assert same_sign > 0.9, same_sign


def test_rejection_reverses_direction_and_keeps_the_anchor():
    generators = [torch.Generator().manual_seed(0)]
    state = guided_walk.GuidedWalkState(torch.tensor([[50.0, -50.0]]), torch.tensor([[1.0, -1.0]]))
    new, accepted = guided_walk.step(state, generators, step_size=1.0, prior_variance=1.0)
    assert not accepted.any()  # moving further out at 50 sd: acceptance ratio ~ exp(-50)
    torch.testing.assert_close(new.anchor, state.anchor)
    torch.testing.assert_close(new.direction, -state.direction)


def test_walks_do_not_depend_on_how_many_run_together():
    together, _ = run(n_walks=3, dim=4, steps=50, step_size=0.1, variance=1.0, seed=5)
    alone, _ = run(n_walks=1, dim=4, steps=50, step_size=0.1, variance=1.0, seed=6)
    np.testing.assert_array_equal(together[1], alone[0])
