import pytest
import torch

from bench.budget import PROGRESS_REPORTS, BudgetMeter, MeteredData
from bench.errors import BudgetExhausted, ConfigError, MeterMisuse


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
    with pytest.raises(ConfigError, match="the budget must be a positive number of epochs"):
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


def test_a_batch_used_for_several_passes_is_charged_each_pass():
    data = MeteredData(torch.arange(20.0).reshape(10, 2), torch.arange(10), BudgetMeter(1, n_train=10))
    xb, _ = data.batch(torch.tensor([[0, 1], [2, 3]]), passes=2)
    assert xb.shape == (2, 2, 2) and data.meter.examples == 8
    with pytest.raises(BudgetExhausted):
        data.batch(torch.tensor([4]), passes=3)
    assert data.meter.examples == 8


@pytest.mark.parametrize("passes", [0, -1, 1.5, True])
def test_a_batch_goes_through_the_network_a_whole_number_of_times(passes):
    data = MeteredData(torch.zeros(10, 2), torch.zeros(10), BudgetMeter(5, n_train=10))
    with pytest.raises(MeterMisuse, match="passes"):
        data.batch(torch.arange(4), passes=passes)
    assert data.meter.examples == 0


def test_test_passes_are_reported_not_charged():
    meter = BudgetMeter(1, n_train=10)
    meter.record_test_pass(50, n_test=25)
    assert meter.test_passes == 2 and meter.examples == 0


@pytest.mark.parametrize("copies", [0, -1, -3, True, 1.5, "2"])
def test_shared_batch_needs_at_least_one_whole_copy(copies):
    data = MeteredData(torch.zeros(10, 2), torch.zeros(10), BudgetMeter(5, n_train=10))
    with pytest.raises(MeterMisuse, match="copies"):
        data.shared_batch(torch.arange(4), copies=copies)
    assert data.meter.examples == 0


@pytest.mark.parametrize("charge", [0, -1, -10, 2.5, 1.0, True, float("nan")])
def test_zero_negative_and_fractional_charges_are_refused(charge):
    meter = BudgetMeter(2, n_train=10)
    meter.charge(5)
    with pytest.raises(MeterMisuse, match="charge"):
        meter.charge(charge)
    assert meter.examples == 5, "a refused charge must change nothing (no refund)"


def test_an_empty_read_is_refused_not_free():
    data = MeteredData(torch.zeros(10, 2), torch.zeros(10), BudgetMeter(5, n_train=10))
    with pytest.raises(MeterMisuse):
        data.batch(torch.zeros(0, dtype=torch.int64))


@pytest.mark.parametrize("field", ["budget_epochs", "examples", "n_train", "_examples", "_limit", "limit_examples"])
def test_meter_fields_cannot_be_assigned(field):
    meter = BudgetMeter(2, n_train=10)
    with pytest.raises(MeterMisuse, match="read-only"):
        setattr(meter, field, 1e9)
    with pytest.raises(AttributeError):  # MeterMisuse is an AttributeError too, as Python code expects
        setattr(meter, field, 1e9)
    assert meter.budget_epochs == 2 and meter.epochs_left == 2


def test_metered_data_cannot_be_rebound():
    data = MeteredData(torch.zeros(10, 2), torch.zeros(10), BudgetMeter(1, n_train=10))
    for field in ("meter", "_meter", "_x"):
        with pytest.raises(MeterMisuse):
            setattr(data, field, None)


def test_full_read_is_a_charged_copy_not_the_live_training_set():
    x, y = torch.arange(20.0).reshape(10, 2), torch.arange(10)
    data = MeteredData(x, y, BudgetMeter(2, n_train=10))
    xf, yf = data.full()
    assert data.meter.epochs_used == 1
    xf.zero_()
    yf.fill_(-1)
    assert x.sum() == 190 and y.sum() == 45, "writing into the full read must not edit the training set"
    xb, _ = data.batch(torch.arange(10))
    assert xb.data_ptr() != x.data_ptr()


def test_indices_must_be_integer_tensors():
    data = MeteredData(torch.zeros(10, 2), torch.zeros(10), BudgetMeter(1, n_train=10))
    with pytest.raises(MeterMisuse):
        data.batch(torch.tensor([True, False] * 5))  # a mask would read 5 rows but be charged 10
    with pytest.raises(MeterMisuse):
        data.batch([0, 1])


def test_test_passes_refuse_negative_rows():
    meter = BudgetMeter(1, n_train=10)
    with pytest.raises(MeterMisuse):
        meter.record_test_pass(-25, n_test=25)


def test_the_progress_observer_hears_the_epochs_used_as_they_are_charged_and_when_the_budget_is_spent():
    heard = []
    meter = BudgetMeter(2, n_train=10, on_progress=heard.append)
    meter.charge(3)
    meter.charge(12)
    with pytest.raises(BudgetExhausted):
        meter.charge(6)
    assert heard == [0.3, 1.5], "a refused charge is not reported"
    meter.charge(5)
    assert heard == [0.3, 1.5, 2.0]


def test_the_progress_observer_is_called_at_most_a_thousand_times_per_run_and_ends_on_the_last_charge():
    """A long run of small batches: the observer hears each 1/1000 of the budget once, not every batch."""
    heard = []
    meter = BudgetMeter(7.3, n_train=1000, on_progress=heard.append)  # 7300 examples: a report every 8
    while meter.epochs_left > 0:
        meter.charge(min(3, meter._limit - meter.examples))
    assert 900 < len(heard) <= PROGRESS_REPORTS
    assert heard == sorted(heard) and heard[-1] == meter.epochs_used == 7.3


def test_a_runs_meter_reports_its_progress_to_the_runner_s_caller(tmp_path):
    from bench.runner import RunSpec, run

    heard = []
    result = run(RunSpec(task="toy-gap", method="sgd", budget=2, out=tmp_path), on_progress=heard.append)
    assert heard and heard == sorted(heard) and heard[-1] == result["epochs_used"] == 2


def test_the_progress_observer_cannot_be_replaced():
    meter = BudgetMeter(1, n_train=10)
    with pytest.raises(MeterMisuse, match="read-only"):
        meter._on_progress = print
