import pytest
import torch

from bench.budget import BudgetMeter, MeteredData
from bench.errors import BudgetExhausted


def test_charges_exact_examples_and_refuses_overspending():
    meter = BudgetMeter(2, n_train=10)
    meter.charge(15)
    assert meter.epochs_used == 1.5
    with pytest.raises(BudgetExhausted, match="over budget"):
        meter.charge(6)
    assert meter.examples == 15, "a refused request must not be charged"
    meter.charge(5)
    assert meter.epochs_used == 2.0 and meter.epochs_left == 0


def test_fractional_budget_is_exact_in_examples():
    meter = BudgetMeter(0.5, n_train=7)
    meter.charge(3)
    with pytest.raises(BudgetExhausted):
        meter.charge(1)


@pytest.mark.parametrize("budget", [0, -1, float("inf"), float("nan")])
def test_invalid_budget_is_refused(budget):
    with pytest.raises(BudgetExhausted):
        BudgetMeter(budget, n_train=10)


def test_metered_data_charges_before_handing_over():
    x, y = torch.arange(20.0).reshape(10, 2), torch.arange(10)
    data = MeteredData(x, y, BudgetMeter(1, n_train=10))
    xb, yb = data.batch(torch.tensor([[0, 1, 2], [3, 4, 5]]))
    assert xb.shape == (2, 3, 2) and yb.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert data.meter.examples == 6
    with pytest.raises(BudgetExhausted):
        data.full()
    data.batch(torch.tensor([6, 7, 8, 9]))
    assert data.meter.epochs_used == 1.0


def test_test_passes_are_reported_not_charged():
    meter = BudgetMeter(1, n_train=10)
    meter.record_test_pass(50, n_test=25)
    assert meter.test_passes == 2 and meter.examples == 0
