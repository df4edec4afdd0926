"""Re-execution of a claim: honest runs verify, altered predictions or budgets do not, on this machine
(bitwise) and as if from another one (against the seed-to-seed distance)."""

import io
import json
import shutil
import sys

import numpy as np
import pytest

from bench import records
from bench.executors import usable_cores
from bench.runner import RunSpec, run
from bench.verify import VerificationError, verify


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-runs")
    for budget in (5, 100):
        run(RunSpec(task="toy-gap", method="sgd", budget=budget, out=out))
    return out / "toy-gap" / "sgd"


@pytest.fixture
def honest(runs, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(runs / "budget-5" / "seed-0", folder)
    return folder


def _edit_result(folder, **changes):
    result = json.loads((folder / records.RESULT).read_text())
    (folder / records.RESULT).write_text(json.dumps({**result, **changes}))


def test_an_honest_run_verifies_bitwise(honest):
    verification = verify(honest)
    assert verification.passed and verification.mode == "bitwise" and "bitwise equal" in verification.detail


def test_one_altered_prediction_fails_bitwise(honest):
    with np.load(honest / records.PREDICTIONS) as npz:
        samples = npz["samples"].copy()
    samples[7, 3] += 1e-6  # and the record's sha256 edited to match, as a forger would
    records.write_run(honest, "samples", samples, {**json.loads((honest / records.RESULT).read_text()),
                                                   "predictions_sha256": records.predictions_sha256(samples)})
    verification = verify(honest)
    assert not verification.passed and "1 of 121000 prediction values differ" in verification.detail


def test_a_wrong_epochs_claim_is_refused_before_re_execution(honest):
    """A built-in method's cost is fixed by its budget rule before training (bench.costs, issue 65): a claim of
    another is refused in one line, as submit refuses it, without training anything."""
    _edit_result(honest, epochs_used=4.0)
    with pytest.raises(VerificationError, match=r"claims 4.0 epochs used, but sgd with these settings spends 5 of a "
                                                r"budget of 5 \(its budget rule fixes it before training\)"):
        verify(honest)


def test_a_wrong_resolved_claim_fails_and_a_record_without_one_is_refused(tmp_path, honest):
    """The settings a record says ran (automatic ones resolved) are the ones its configuration resolves to; a record
    without them (an older version's, or one with the claim removed) names a fingerprint every record of which holds
    them, and is refused before any re-execution."""
    folder = tmp_path / "csgmcmc"
    recorded = run(RunSpec(task="toy-gap", method="csgmcmc", budget=50, out=folder))
    assert (recorded["config"]["cycles"], recorded["resolved"]["cycles"]) == (0, 1)
    folder = records.run_folder(folder, "toy-gap", "csgmcmc", 50, 0)
    _edit_result(folder, resolved={**recorded["resolved"], "cycles": 5})
    with pytest.raises(VerificationError, match=r"records resolved settings its configuration does not resolve to at "
                                                r"budget 50 \(cycles: 5 there, 1 here\)"):
        verify(folder)  # planned, not trained: refused before any re-execution
    result = json.loads((honest / records.RESULT).read_text())
    del result["resolved"]
    (honest / records.RESULT).write_text(json.dumps(result))
    with pytest.raises(VerificationError, match="holds no resolved, which every record made for toy-gap's"):
        verify(honest)


def test_from_another_environment_honest_passes_and_a_longer_trained_predictive_fails(runs, honest):
    _edit_result(honest, environment={"cpu": "another machine"})
    verification = verify(honest)
    assert verification.passed and verification.mode == "cross-environment, round-off", verification.detail
    longer = runs / "budget-100" / "seed-0"
    shutil.copy(longer / records.PREDICTIONS, honest / records.PREDICTIONS)
    claims = json.loads((longer / records.RESULT).read_text())
    _edit_result(honest, predictions_sha256=claims["predictions_sha256"])
    with pytest.raises(VerificationError, match="metrics: claims w1 = .* but the predictions give"):
        verify(honest)  # its metrics are not the swapped predictions': refused before any re-execution
    _edit_result(honest, metrics=claims["metrics"], metrics_by_block=claims["metrics_by_block"])
    verification = verify(honest)  # consistent claims of a longer training: the re-execution shows it
    assert not verification.passed and "not one of its runs: w1 on all recorded" in verification.detail


def test_cli_verify_and_submit_verify_mark_the_leaderboard(runs, honest, tmp_path, run_cli):
    code, out, _ = run_cli("verify", honest)
    assert code == 0 and "1 of 1 runs verified" in out
    db = tmp_path / "board.sqlite"
    code, out, err = run_cli("submit", honest, "--db", db, "--name", "alice", "--verify")
    assert code == 0, err
    code, out, _ = run_cli("leaderboard", "--db", db, "--format", "csv")
    assert code == 0 and out.splitlines()[0].count("verified_seeds") == 1
    assert out.splitlines()[2].split(",")[out.splitlines()[0].split(",").index("verified_seeds")] == "1"

    with np.load(honest / records.PREDICTIONS) as npz:  # a forgery only its re-execution sees (its cost is checked
        samples = npz["samples"].copy()                  # before: bench.costs)
    samples[7, 3] += 1e-6
    records.write_run(honest, "samples", samples, {**json.loads((honest / records.RESULT).read_text()),
                                                   "predictions_sha256": records.predictions_sha256(samples)})
    code, out, _ = run_cli("verify", honest)
    assert code == 1 and "NOT VERIFIED" in out
    code, _, err = run_cli("submit", honest, "--db", tmp_path / "other.sqlite", "--name", "bob", "--verify")
    assert code == 2 and "does not reproduce" in err and err.count("\n") == 1


def test_verify_and_submit_verify_count_their_runs_on_a_terminal_and_draw_nothing_when_quiet(runs, tmp_path,
                                                                                           monkeypatch, every_progress_update):
    """Re-executing runs takes as long as training them: on a terminal a bar counts the runs verified, and each
    run's line is printed above it; `--quiet` draws nothing."""
    from bench.cli import main
    Terminal = every_progress_update
    folders = [str(runs / f"budget-{budget}" / "seed-0") for budget in (5, 100)]
    for command in (["verify", *folders], ["submit", *folders, "--verify", "--name", "a"]):
        for quiet in (False, True):
            terminal, printed = Terminal(), io.StringIO()
            monkeypatch.setattr(sys, "stderr", terminal)
            monkeypatch.setattr(sys, "stdout", printed)
            assert main([*command, *(["--quiet"] if quiet else []),
                         *(["--db", str(tmp_path / f"b{quiet}")] if command[0] == "submit" else [])]) == 0
            drawn = terminal.getvalue()
            assert (drawn == "") == quiet, drawn
            assert quiet or ("verify: 100%" in drawn and "| 2/2 [" in drawn and "last: seed-0" in drawn), drawn
            if command[0] == "verify":
                assert printed.getvalue().count("verified") == 3 and "2 of 2 runs verified" in printed.getvalue()


def test_a_competition_zip_cannot_be_verified(tmp_path, run_cli):
    code, _, err = run_cli("submit", tmp_path / "s.zip", "--method", "m", "--budget", "10", "--verify",
                           "--db", tmp_path / "db.sqlite")
    assert code == 2 and "cannot be re-executed" in err


def test_a_record_from_another_kernel_build_or_core_count_verifies_bitwise(honest):
    """Only what decides round-off keys the bitwise mode (bench.runner.NUMERICS), not the kernel's build string."""
    environment = json.loads((honest / records.RESULT).read_text())["environment"]
    _edit_result(honest, environment={**environment, "platform": "Linux-0.0-another-build", "cpu_count": 64})
    verification = verify(honest)
    assert (verification.mode, verification.passed) == ("bitwise", True), verification.detail


def test_a_run_recorded_on_a_gpu_is_compared_across_environments(honest):
    _edit_result(honest, device="NVIDIA H100 80GB HBM3")
    verification = verify(honest)
    assert verification.mode == "cross-environment, round-off" and "device NVIDIA H100 80GB HBM3 -> cpu" in \
        verification.detail


def test_a_run_made_with_two_threads_verifies_bitwise_with_threads_2_only(tmp_path, run_cli):
    """sgd on diabetes-gap changes round-off with the thread count: verify re-executes with its own --threads
    (default 1, whatever the caller's torch says), and says which would compare the run bitwise."""
    import torch

    if usable_cores() < 2:
        pytest.skip("one usable core: no second thread count to compare")
    torch.set_num_threads(2)
    try:
        run(RunSpec(task="diabetes-gap", method="sgd", budget=2, out=tmp_path))
        folder = records.run_folder(tmp_path, "diabetes-gap", "sgd", 2, 0)
        default = run_cli("verify", folder)
        two = run_cli("verify", folder, "--threads", "2")
    finally:
        torch.set_num_threads(1)
    code, out, err = default
    assert code == 0, err
    assert "verified (cross-environment, round-off, 1 torch thread)" in out
    assert "torch_threads 2 -> 1 (`--threads 2` compares it bitwise)" in out
    code, out, err = two
    assert code == 0 and "verified (bitwise, 2 torch threads): predictions bitwise equal" in out, out + err


def test_a_record_with_more_threads_than_this_machine_s_cores_says_it_cannot_be_bitwise_here(honest):
    environment = json.loads((honest / records.RESULT).read_text())["environment"]
    _edit_result(honest, environment={**environment, "torch_threads": usable_cores() + 1})
    verification = verify(honest)
    assert verification.passed and verification.mode == "cross-environment, round-off"
    assert f"more threads than the {usable_cores()} usable core(s) here: not bitwise" in verification.detail


@pytest.mark.parametrize("edit, message", [
    ({"seed": 10**23}, "outside [0, 2^63)"), ({"seed": -3}, "outside [0, 2^63)"),
    ({"budget": "abc"}, "field 'budget' is missing or not a int/float"),
    ({"config": [1]}, "field 'config' is missing or not a dict"),
    ({"method": 5}, "field 'method' is missing or not a str"), ({"task_version": 1.5}, "field 'task_version' is missing"),
    ({"config": {"lr": "x"}}, "of the wrong type: lr"), ({"config": {"bogus": 1}}, "unknown bogus"),
    ({"config": {"lr": True}}, "of the wrong type: lr"), ({"config": {"lr": 0.01, "min_lr": 0.5}}, "must not exceed lr"),
])
def test_an_edited_record_is_one_line_before_it_is_re_executed(honest, run_cli, edit, message):
    path = honest / records.RESULT
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    code, _, err = run_cli("verify", honest)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_record_alone_verifies_bitwise_by_its_predictions_sha256(runs, honest):
    """A folder written with --no-predictions (the shipped results) keeps the predictions' sha256: the re-execution's
    must equal it; a changed digest is not verified. (From other numerics its metrics are compared instead: below.)"""
    with np.load(honest / records.PREDICTIONS) as npz:
        digest = records.predictions_sha256(npz["samples"])
    assert json.loads((honest / records.RESULT).read_text())["predictions_sha256"] == digest
    (honest / records.PREDICTIONS).unlink()
    verification = verify(honest)
    assert (verification.mode, verification.passed) == ("bitwise", True) and "sha256 equal" in verification.detail
    _edit_result(honest, predictions_sha256="0" * 64)
    verification = verify(honest)
    assert not verification.passed and "sha256 differs" in verification.detail


def test_predictions_that_changed_after_the_run_contradict_its_sha256(runs, honest):
    """The record's sha256 names the predictions the run wrote: a predictions file swapped for another run's is one
    line, even from another machine (where the predictive comparison might let a small change pass)."""
    shutil.copy(runs / "budget-100" / "seed-0" / records.PREDICTIONS, honest / records.PREDICTIONS)
    _edit_result(honest, environment={"cpu": "another machine"})
    with pytest.raises(Exception, match="changed after the run"):
        verify(honest)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """sgd on toy-gap at budget 5, seeds 0-9, records kept alone (as the shipped results)."""
    out = tmp_path_factory.mktemp("alone")
    for seed in range(10):
        run(RunSpec(task="toy-gap", method="sgd", budget=5, seed=seed, out=out, keep_predictions=False))
    return out / "toy-gap" / "sgd" / "budget-5"


def _elsewhere(folder):
    """The record as if made on another CPU kind."""
    environment = json.loads((folder / records.RESULT).read_text())["environment"]
    _edit_result(folder, environment={**environment, "cpu": "another CPU kind", "cpu_capability": "AVX512"})


def test_a_record_kept_alone_verifies_on_another_cpu_within_round_off(alone, tmp_path):
    """Shipped records hold no predictions: on another CPU kind they were refused outright ("NOT VERIFIED
    (cross-environment)", every shipped row "verified 0/3"). Their metrics are now compared with a re-execution: to
    round-off, on every metric of every block."""
    shutil.copytree(alone, tmp_path / "budget-5")
    folder = tmp_path / "budget-5" / "seed-0"
    _elsewhere(folder)
    record = json.loads((folder / records.RESULT).read_text())
    _edit_result(folder, metrics={**record["metrics"], "w2": record["metrics"]["w2"] * (1 + 1e-7)})
    verification = verify(folder)
    assert verification.passed and verification.mode == "cross-environment, round-off", verification.detail
    _edit_result(folder, metrics={**record["metrics"], "rmse": record["metrics"]["rmse"] * 1000})
    verification = verify(folder)
    assert not verification.passed and "rmse on all" in verification.detail, "every metric, not only the fidelity ones"


def _alone_elsewhere(alone, tmp_path, seeds=range(4)):
    """The records of ``alone`` copied under ``tmp_path``, those of ``seeds`` as if made on another CPU kind."""
    shutil.copytree(alone, tmp_path / "budget-5")
    for seed in seeds:
        _elsewhere(tmp_path / "budget-5" / f"seed-{seed}")
    return [tmp_path / "budget-5" / f"seed-{seed}" for seed in seeds]


def _shift(folder, metric, by):
    record = json.loads((folder / records.RESULT).read_text())
    _edit_result(folder, metrics={**record["metrics"], metric: record["metrics"][metric] + by})


def _seed_values(alone, metric):
    """The configuration's ``metric`` on its seeds 0-9 run here: what verify re-executes, bit for bit."""
    return [json.loads((alone / f"seed-{seed}" / records.RESULT).read_text())["metrics"][metric] for seed in range(10)]


def test_where_round_off_stays_round_off_with_other_kernels_a_record_is_held_to_its_re_execution(alone, tmp_path):
    """sgd on toy-gap reproduces to round-off with another CPU kind's kernels on every seed: a record of it made on any
    CPU kind is its re-execution to round-off, so half a seed's spread added to its W2 (W2 >= W1 still holds) is
    refused, where the seeds' prediction interval would take it."""
    from bench.executors import other_kernels_differ

    if not other_kernels_differ():
        pytest.skip("torch runs its default kernels here: no other kernels to re-execute with")
    folder = _alone_elsewhere(alone, tmp_path, seeds=[0])[0]
    spread = float(np.std(_seed_values(alone, "w2"), ddof=1))
    _shift(folder, "w2", 0.5 * spread)
    verification = verify(folder)
    assert not verification.passed, verification.detail
    assert verification.mode == "cross-environment, statistical against 10 re-executed seeds"
    assert "held to 10 x the most any of 10 seeds re-executed here moved with another CPU kind's kernels" in \
        verification.detail and "not one of its runs: w2 on all recorded" in verification.detail


@pytest.fixture
def chaotic(monkeypatch):
    """Another CPU kind's kernels move every metric of every seed by far more than a seed's spread: round-off grows
    chaotically, as in a long sampler run (what the prediction interval and the group's test are for)."""
    import bench.verify

    monkeypatch.setattr(bench.verify, "_moved_with_other_kernels",
                        lambda first, native, cache, method, *_: {key: 1e3 for key in first.now})


def test_where_round_off_grows_chaotically_a_record_is_one_draw_of_its_re_executed_seeds(alone, tmp_path, chaotic):
    folder = _alone_elsewhere(alone, tmp_path, seeds=[0])[0]
    values = _seed_values(alone, "w2")
    mean, spread = float(np.mean(values)), float(np.std(values, ddof=1))
    _shift(folder, "w2", 0.5 * spread)  # a draw of the configuration, not its seed's re-execution
    verification = verify(folder)
    assert verification.passed and "0 of 4 metrics held to" in verification.detail, verification.detail
    assert verification.mode == "cross-environment, statistical against 10 re-executed seeds"
    # the prediction interval at 1% over the 4 metrics compared (competition_w is -W1): t at 9 degrees of freedom
    import scipy.stats
    half_width = scipy.stats.t.ppf(1 - 0.01 / 8, 9) * spread * (1 + 1 / 10) ** 0.5
    record = json.loads((folder / records.RESULT).read_text())
    for inside, side in ((True, 0.99), (False, 1.01)):  # each side of the interval, near it
        _edit_result(folder, metrics={**record["metrics"], "w2": mean + side * half_width})
        verification = verify(folder)
        assert verification.passed == inside, verification.detail
    assert "not one of its runs: w2 on all recorded" in verification.detail


def test_the_spread_is_re_executed_never_read_from_the_records_beside_it(alone, tmp_path, chaotic):
    folders = _alone_elsewhere(alone, tmp_path, seeds=[0])
    spread = float(np.std(_seed_values(alone, "w2"), ddof=1))
    _shift(folders[0], "w2", 100 * spread)
    for other in range(1, 4):  # the seeds beside it, edited to spread widely, change nothing: the spread is re-executed
        _shift(tmp_path / "budget-5" / f"seed-{other}", "w2", 10.0 ** other)
    verification = verify(folders[0])
    assert not verification.passed and "not one of its runs: w2 on all recorded" in verification.detail


def test_the_records_of_a_configuration_verified_together_are_tested_by_their_mean(alone, tmp_path, chaotic):
    """Ten records each within its prediction interval, all shifted the same way: their mean is not the
    configuration's, and every one of them is refused; verified one by one, each passes."""
    from bench.verify import verify_many

    shutil.copytree(alone, tmp_path / "budget-5")
    folders = [tmp_path / "budget-5" / f"seed-{seed}" for seed in range(10)]
    values = _seed_values(alone, "w2")
    spread = float(np.std(values, ddof=1))
    import scipy.stats
    group_limit = scipy.stats.t.ppf(1 - 0.01 / 2, 9) * spread * (2 / 10) ** 0.5
    record_limit = scipy.stats.t.ppf(1 - 0.01 / 8, 9) * spread * (1 + 1 / 10) ** 0.5
    shift = 1.1 * group_limit
    assert max(abs(v + shift - np.mean(values)) for v in values) < record_limit, "each record alone within its interval"
    for folder in folders:
        _elsewhere(folder)
        _shift(folder, "w2", shift)
    verifications = verify_many(folders)
    assert [v.passed for v in verifications] == [False] * 10
    assert "the 10 seeds' records' mean w2 on all" in verifications[0].detail
    assert verify(folders[3]).passed, "alone, one record is one draw of its configuration"


def test_where_this_machine_has_no_other_kernels_a_record_is_held_to_the_seeds_prediction_interval(alone, tmp_path,
                                                                                                monkeypatch):
    """A CPU without the vector units ATen uses runs torch's default kernels already: nothing shows whether round-off
    stays round-off, so a record beyond it is judged as one draw of its configuration, and the line says why."""
    import bench.verify

    monkeypatch.setattr(bench.verify, "other_kernels_differ", lambda: False)
    folder = _alone_elsewhere(alone, tmp_path, seeds=[0])[0]
    _shift(folder, "w2", 0.5 * float(np.std(_seed_values(alone, "w2"), ddof=1)))
    verification = verify(folder)
    assert verification.passed and "no other kernels to re-execute with on this machine" in verification.detail


def test_a_record_named_twice_or_copied_counts_once_in_the_test_of_its_configuration_s_mean(alone, tmp_path,
                                                                                            chaotic):
    """The test of the mean takes its records as independent draws: a folder named twice is verified once, and two
    records of one seed (a copy, or the seed run on two machines) are one draw, whatever each claims."""
    from bench.verify import verify_many

    folders = _alone_elsewhere(alone, tmp_path, seeds=[0, 1])
    shutil.copytree(folders[0], tmp_path / "copy-of-seed-0")
    verifications = verify_many([folders[0], folders[1], folders[0], tmp_path / "copy-of-seed-0"])
    assert [v.folder for v in verifications] == [folders[0], folders[1], folders[0], tmp_path / "copy-of-seed-0"]
    assert all(v.passed for v in verifications)
    from bench.verify import _group_line

    native = {seed: {("all", "w2"): float(seed)} for seed in range(10)}
    limits = {("all", "w2"): (4.5, 9.0, 1.0)}
    one_seed_twice = [(0, {("all", "w2"): 0.0}), (0, {("all", "w2"): 0.0}), (1, {("all", "w2"): 1.0})]
    assert _group_line(one_seed_twice, native, limits, {}, 10, "regression") == ""
    moved = [(0, {("all", "w2"): 9.0}), (0, {("all", "w2"): 9.0}), (1, {("all", "w2"): 10.0})]
    assert "the 2 seeds' records' mean w2 on all" in _group_line(moved, native, limits, {}, 10, "regression")


# --- the statistical judgement's thresholds, bracketed (numbers alone: bench.verify.judged) --------------------------

SIZES = {"all": 1000, "clean": 300}
SPREADS = {"agreement": (0.9, 0.02), "total_variation": (0.1, 0.01)}
"""Each classification metric's mean and seed standard deviation over the seeds re-executed here (far above round-off,
bench.drift, so that the seeds' spread decides)."""
STANDARD = np.array([-0.05, 0.05, 1.0, -1.0, 2.0, -2.0, 1.5, -1.5, 0.5, -0.5])
STANDARD = STANDARD / STANDARD.std(ddof=1)
"""Ten seeds' deviations with mean 0 and sample standard deviation 1; seeds 0 and 1 next to the mean."""


def _native() -> dict[int, dict]:
    """Ten seeds of a digits-like configuration re-executed here, on 2 blocks x 2 primary metrics (4 keys)."""
    return {seed: {(block, metric): mean + std * STANDARD[seed] for block in SIZES
                   for metric, (mean, std) in SPREADS.items()} for seed in range(10)}


def _quantile(keys: int) -> float:
    import scipy.stats

    return float(scipy.stats.t.ppf(1 - 0.01 / (2 * keys), 9))  # CROSS_CPU_LEVEL, Bonferroni over the keys


@pytest.mark.parametrize("key", [(block, metric) for block in SIZES for metric in SPREADS])
@pytest.mark.parametrize("side, passed", [(0.99, True), (1.01, False)])
def test_a_records_prediction_interval_is_bonferronis_over_every_metric_on_each_side(key, side, passed):
    """A record claiming a metric (each of the 4, on each block) 0.99 x its prediction interval's half-width from the
    seeds' mean (t at 9 degrees of freedom, 1% / (2 x 4 metrics), x sqrt(1 + 1/10)) is one of its configuration's runs,
    at 1.01 x it is not; the interval without its Bonferroni division is a third narrower."""
    from bench.verify import judged

    native = _native()
    claimed = {k: float(np.mean([native[seed][k] for seed in native])) for k in native[0]}
    claimed[key] += side * _quantile(4) * SPREADS[key[1]][1] * np.sqrt(1 + 1 / 10)
    mode, [judgement] = judged([(0, claimed)], native, None, SIZES, "classification")
    assert mode == "cross-environment, statistical against 10 re-executed seeds"
    assert judgement.passed is passed, judgement.detail
    assert passed or f"{key[1]} on {key[0]} recorded" in judgement.detail


@pytest.mark.parametrize("key", [(block, metric) for block in SIZES for metric in SPREADS])
@pytest.mark.parametrize("side, passed", [(0.99, True), (1.01, False)])
def test_the_test_of_a_configurations_mean_is_bonferronis_over_every_primary_metric_on_each_side(key, side, passed):
    """Two records (seeds 0 and 1, next to the seeds' mean), each well within its prediction interval, both shifted on
    one metric by 0.99 x and 1.01 x what the test of their mean allows (t at 9 degrees of freedom, 1% / (2 x 4 primary
    metrics), x the seeds' spread x sqrt(2 / 2 records)): the first pair is the configuration's, the second not."""
    from bench.verify import judged

    native = _native()
    shift = side * _quantile(4) * SPREADS[key[1]][1]
    claims = [(seed, {k: value + (shift if k == key else 0.0) for k, value in native[seed].items()}) for seed in (0, 1)]
    assert all(abs(c[key] - np.mean([native[s][key] for s in native])) < _quantile(4) * SPREADS[key[1]][1] * np.sqrt(
        1.1) for _, c in claims), "each record alone is within its prediction interval"
    _, judgements = judged(claims, native, None, SIZES, "classification")
    assert [j.passed for j in judgements] == [passed, passed], judgements[0].detail
    assert passed or f"the 2 seeds' records' mean {key[1]} on {key[0]}" in judgements[0].detail


@pytest.mark.parametrize("side, passed", [(0.99, True), (1.01, False)])
def test_a_metric_held_to_the_other_kernels_drift_is_held_to_ten_times_it_on_each_side(side, passed):
    """Where another CPU kind's kernels move a metric by m over the seeds, and 10 m is inside the prediction interval,
    the record is held to its own seed's re-execution within 10 m: 0.99 x it passes, 1.01 x it is refused."""
    from bench import drift
    from bench.verify import judged

    native = _native()
    moved = {key: 1e-3 for key in native[0]}
    claimed = dict(native[0])
    claimed[("clean", "total_variation")] += side * drift.OTHER_KERNELS_FACTOR * 1e-3
    _, [judgement] = judged([(0, claimed)], native, moved, SIZES, "classification")
    assert judgement.passed is passed, judgement.detail
    assert "4 of 4 metrics held to 10 x the most" in judgement.detail


def test_the_drift_with_other_kernels_is_the_most_over_every_seed_not_the_first(monkeypatch):
    """Per metric, the largest move over the seeds re-executed with another CPU kind's kernels, wherever it is: here
    W2's largest is the second seed's and W1's the first's, so a maximum that kept the first or the last seed would
    give another figure for one of them."""
    import types

    import bench.verify
    from bench.executors import Outcome

    moved = {0: {("all", "w2"): 0.125, ("all", "w1"): 0.5}, 1: {("all", "w2"): 0.75, ("all", "w1"): 0.25},
             2: {("all", "w2"): 0.25, ("all", "w1"): 0.0625}}
    native = {seed: {("all", "w2"): 1.0, ("all", "w1"): 2.0} for seed in moved}

    class OtherKernels:
        def __init__(self, *_):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *_):
            return False

        def call(self, function, folder, cache, method, seed):
            return Outcome({key: native[seed][key] - change for key, change in moved[seed].items()})

    monkeypatch.setattr(bench.verify, "other_kernels_differ", lambda: True)
    monkeypatch.setattr(bench.verify, "Isolated", OtherKernels)
    first = types.SimpleNamespace(method_source="sgd", folder=None)
    most = bench.verify._moved_with_other_kernels(first, native, None, "sgd")
    assert most == {("all", "w2"): 0.75, ("all", "w1"): 0.5}
