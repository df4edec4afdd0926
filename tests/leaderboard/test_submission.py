"""`python -m bench submit`: runs are re-scored from their predictions; bad input is refused and changes nothing."""

import dataclasses
import functools
import io
import json
import re
import zipfile

import numpy as np
import pytest

from approximators import METHODS, resolve_config
from bench import records
from leaderboard import submission
from leaderboard.store import Store


def stored_rows(db_path):
    if not db_path.exists():
        return []
    with Store(db_path) as db:
        return db.runs()


def test_submit_recomputes_metrics_and_is_idempotent(tmp_path, db_path, make_run, run_cli):
    for seed in (0, 1):
        make_run(tmp_path / "runs", "digits", seed=seed)
    make_run(tmp_path / "runs", "toy-gap")
    code, out, err = run_cli("submit", str(tmp_path / "runs"), "--name", "alice", "--notes", "first try")
    assert code == 0, err
    assert "3 added, 0 already present" in out
    rows = stored_rows(db_path)
    digits = [r for r in rows if r.task == "digits"]
    claimed = json.loads((tmp_path / "runs/digits/de/budget-10/seed-0/result.json").read_text())
    assert digits[0].metrics["all"] == pytest.approx(claimed["metrics"], rel=1e-12)
    assert set(digits[0].metrics) == {"all", "clean", "gaussian-noise", "brightness", "blur"}
    assert digits[0].submitter == "alice" and digits[0].notes == "first try"
    assert sum(digits[0].reliability["count"]) == 1440
    code, out, _ = run_cli("submit", str(tmp_path / "runs"), "--name", "alice")
    assert code == 0 and "0 added, 3 already present" in out
    assert len(stored_rows(db_path)) == 3


def _tamper_metric(folder):
    path = folder / records.RESULT
    result = json.loads(path.read_text())
    result["metrics"]["total_variation"] -= 0.01
    path.write_text(json.dumps(result))


def _tamper_reference(folder):
    path = folder / records.RESULT
    result = json.loads(path.read_text())
    result["reference"]["sha256"] = "0" * 64
    path.write_text(json.dumps(result))


def _overspend(folder):
    path = folder / records.RESULT
    result = json.loads(path.read_text())
    result["epochs_used"] = result["budget"] + 1
    path.write_text(json.dumps(result))


def _stale_version(folder):
    path = folder / records.RESULT
    result = json.loads(path.read_text())
    result["task_version"] = 0
    path.write_text(json.dumps(result))


def _field_set(field, value):
    """An edit of a run folder's record: ``field`` set to ``value``."""
    def edit(folder):
        path = folder / records.RESULT
        result = json.loads(path.read_text())
        result[field] = value
        path.write_text(json.dumps(result))
    return edit


def _task_named(name):
    return _field_set("task", name)


def _predictions(array):
    def write(folder):
        records.write_run(folder, "probs", array, json.loads((folder / records.RESULT).read_text()))
    return write


def _nan_row(folder):
    with np.load(folder / records.PREDICTIONS) as npz:
        probs = npz["probs"].copy()
    probs[7, 3] = np.nan
    _predictions(probs)(folder)


def _not_probabilities(folder):
    with np.load(folder / records.PREDICTIONS) as npz:
        probs = npz["probs"].copy()
    probs[11] *= 1.5
    _predictions(probs)(folder)


def _truncated(folder):
    data = (folder / records.PREDICTIONS).read_bytes()
    (folder / records.PREDICTIONS).write_bytes(data[: len(data) // 2])


def _zip_bomb(folder):
    """A tiny file that would unpack to far more than any digits prediction can need."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, probs=np.zeros((1440, 2000)))
    (folder / records.PREDICTIONS).write_bytes(buffer.getvalue())


def _huge_file(folder):
    with open(folder / records.PREDICTIONS, "wb") as f:
        f.truncate(1 << 31)  # sparse: 2 GiB on paper, nothing on disk


def _broken_json(folder):
    (folder / records.RESULT).write_text('{"task": "digits", ')


def _labelled(label):
    return _field_set("label", label)


@pytest.mark.parametrize("damage, message", [
    (_tamper_metric, "claims total_variation = "),
    (_tamper_reference, "scored against reference sha256 0000000000000000"),
    (_overspend, "epochs used, outside [0, 10]"),
    (_stale_version, "made for digits version 0"),
    (_task_named("mnist"), "task mnist is not available"),
    (_task_named("cifar10"), "run `python -m bench fetch --task cifar10`"),
    (_predictions(np.full((1440, 9), 1 / 9)), "needs probs of shape (1440, 10)"),
    (_nan_row, "non-finite values (NaN or inf) in rows 7"),
    (_not_probabilities, "rows must sum to 1"),
    (_truncated, "not a readable .npz file"),
    (_zip_bomb, "holds float64 of shape (1440, 2000)"),
    (_huge_file, "larger than 180736 bytes"),
    (_broken_json, "run record is damaged"),
    *[(_labelled(label), "result.json: a label must be 1 to 100 printable characters, not only spaces")
      for label in ("", "   ", "x" * 101, "two\nlines", "bell\x07", 7, ["a"])],
    (_labelled("Shipped"), "the label 'shipped' marks the results shipped with bdl-bench"),
    (_field_set("predictions_sha256", "0" * 64), "they changed after the run"),
    (_field_set("predictions_sha256", "ABC"), "predictions_sha256 must be null or 64 lowercase hexadecimal digits"),
    (lambda folder: (folder / records.PREDICTIONS).unlink(), "holds its record alone (written with --no-predictions)"),
])
def test_bad_submissions_are_refused_with_one_line_and_change_nothing(damage, message, tmp_path, db_path, make_run,
                                                                      run_cli):
    good = make_run(tmp_path / "runs", "digits", seed=0)
    assert run_cli("submit", str(good))[0] == 0
    before = db_path.read_bytes()
    bad = make_run(tmp_path / "runs", "digits", seed=1)
    also_good = make_run(tmp_path / "runs", "digits", seed=2)
    damage(bad)
    code, out, err = run_cli("submit", str(also_good), str(bad))
    assert code == 2, out
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert [r.seed for r in stored_rows(db_path)] == [0], "a refused submission adds nothing, not even its good runs"
    assert db_path.read_bytes() == before


def test_metric_mismatch_names_the_metric_and_the_difference(tmp_path, make_run):
    folder = make_run(tmp_path, "digits")
    _tamper_metric(folder)
    with pytest.raises(submission.SubmissionError, match=r"total_variation = .* \(difference -0\.01\)"):
        submission.score_run(folder, "alice")


def test_same_run_with_other_predictions_is_refused(tmp_path, db_path, make_run, run_cli):
    assert run_cli("submit", str(make_run(tmp_path / "a", "toy-gap", amount=0.1)))[0] == 0
    code, _, err = run_cli("submit", str(make_run(tmp_path / "b", "toy-gap", amount=0.2)))
    assert code == 2 and "already on the leaderboard with different predictions" in err
    assert len(stored_rows(db_path)) == 1


def _competition_zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _savetxt(array, **kwargs) -> bytes:
    buffer = io.StringIO()
    np.savetxt(buffer, array, **kwargs)
    return buffer.getvalue().encode()


TEST_FILES = {"toy_samples.csv": "toy-gap", "digits_probs.csv": "digits"}
"""Official-style file names mapped to the embedded tasks, standing in for the competition's."""


@pytest.mark.parametrize("delimiter", [" ", ","])
def test_competition_zip_is_scored_at_the_declared_budget(tmp_path, blurred, delimiter):
    samples, probs = blurred("toy-gap", 0.1), blurred("digits", 0.2)
    archive = _competition_zip(tmp_path / "sub.zip", {"toy_samples.csv": _savetxt(samples, delimiter=delimiter),
                                                      "digits_probs.csv": _savetxt(probs, delimiter=delimiter)})
    rows = submission.score_competition_zip(archive, "my-method", 1000, 0, "bob", file_tasks=TEST_FILES)
    assert {r.task for r in rows} == {"toy-gap", "digits"}
    assert all(r.budget == 1000 and r.epochs_used is None and r.source == "competition-zip" for r in rows)
    toy = next(r for r in rows if r.task == "toy-gap")
    from bench.runner import score
    from bench.tasks import get_task
    from reference.store import load_reference

    task = get_task("toy-gap")
    expected, _ = score(task, samples, load_reference(task))
    assert toy.metrics["all"]["w2"] == pytest.approx(expected["w2"], rel=1e-9)


@pytest.mark.parametrize("members, message", [
    ({"../toy_samples.csv": b"1"}, "no paths"),
    ({"/etc/toy_samples.csv": b"1"}, "no paths"),
    ({"sub/toy_samples.csv": b"1"}, "no paths"),
    ({"evil.csv": b"1"}, "official files"),
    ({}, "official files"),
    ({"toy_samples.csv": b"1 2 3\n4 5 6\n"}, "needs samples of shape (121, 1000)"),
    ({"toy_samples.csv": b"not numbers at all\n"}, "not numpy text of numbers"),
    ({"toy_samples.csv": b"0" * 5_000_000}, "unpacks to 5000000 bytes, more than"),
])
def test_hostile_competition_zips_are_refused(members, message, tmp_path):
    archive = _competition_zip(tmp_path / "sub.zip", members)
    with pytest.raises(submission.SubmissionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        submission.score_competition_zip(archive, "m", 100, 0, "bob", file_tasks=TEST_FILES)


def test_official_zip_for_a_task_that_is_not_fetched_names_the_fetch_command(tmp_path, db_path, run_cli):
    archive = _competition_zip(tmp_path / "sub.zip", {"cifar10_probs.csv": b"0.5 0.5\n"})
    code, _, err = run_cli("submit", str(archive), "--method", "m", "--budget", "100")
    assert code == 2 and "run `python -m bench fetch --task cifar10`" in err and err.count("\n") == 1
    assert stored_rows(db_path) == []


def test_exported_competition_zip_is_rescored_like_the_run_it_came_from(
        tmp_path, db_path, file_server, official_files, fixture_checksums, run_cli):
    """uci-gap at fixture size: fetch, run, export the official zip, submit both; the scores agree."""
    file_server.files.update(official_files)
    cache = str(tmp_path / "cache")
    assert run_cli("fetch", "--task", "uci-gap", "--cache", cache, "--data-url", file_server.url + "data/",
                   "--reference-url", file_server.url + "reference/", "--quiet")[0] == 0
    assert run_cli("--method", "de", "--budget", "10", "--task", "uci-gap", "--cache", cache,
                   "--out", str(tmp_path / "runs"), "--quiet")[0] == 0
    run = tmp_path / "runs" / "uci-gap" / "de" / "budget-10" / "seed-0"
    archive = tmp_path / "submission.zip"
    assert run_cli("export-submission", str(run), "--out", str(archive), "--cache", cache)[0] == 0
    code, out, err = run_cli("submit", str(run), "--cache", cache)
    assert code == 0, err
    code, out, err = run_cli("submit", str(archive), "--method", "de", "--budget", "10", "--cache", cache)
    assert code == 0, err
    rows = stored_rows(db_path)
    assert len(rows) == 2
    run_metrics = json.loads((run / records.RESULT).read_text())["metrics"]
    assert sorted(row.source for row in rows) == ["competition-zip", "run"]
    for row in rows:
        assert row.metrics["all"]["competition_w"] == pytest.approx(run_metrics["competition_w"], abs=1e-12)


def test_zip_needs_a_declared_budget(tmp_path, run_cli):
    archive = _competition_zip(tmp_path / "sub.zip", {"uci_samples.csv": b"1\n"})
    code, _, err = run_cli("submit", str(archive), "--method", "m")
    assert code == 2 and "--budget" in err


def test_not_a_run_folder(tmp_path, run_cli):
    code, _, err = run_cli("submit", str(tmp_path))
    assert code == 2 and "holds no run folder" in err


def test_a_record_label_is_stored_and_an_older_record_without_one_has_none(tmp_path, db_path, make_run, run_cli):
    make_run(tmp_path / "runs", "digits", seed=0, label="x" * 100)
    make_run(tmp_path / "runs", "toy-gap")  # as a release before labels wrote it: no "label" field
    assert "label" not in json.loads((tmp_path / "runs/toy-gap/de/budget-10/seed-0/result.json").read_text())
    code, _, err = run_cli("submit", str(tmp_path / "runs"))
    assert code == 0, err
    assert {r.task: r.label for r in stored_rows(db_path)} == {"digits": "x" * 100, "toy-gap": None}


def test_the_same_run_under_another_label_is_refused_and_stays_one_entry(tmp_path, db_path, make_run, run_cli):
    folder = make_run(tmp_path / "runs", "digits", label="first name")
    assert run_cli("submit", str(folder))[0] == 0
    before = db_path.read_bytes()
    _labelled("second name")(folder)
    code, _, err = run_cli("submit", str(folder))
    assert code == 2 and err.count("\n") == 1
    assert "already on the leaderboard labelled 'first name', submitted now labelled 'second name'" in err
    assert db_path.read_bytes() == before
    entries = json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"][0]["entries"]
    assert [(e["label"], e["seeds"]) for e in entries] == [("first name", [0])]


def test_a_competition_zip_takes_a_label(tmp_path, db_path, blurred, run_cli, monkeypatch):
    """`submit --label` labels every row of a zip (the test files stand in for the official ones)."""
    monkeypatch.setattr(submission, "score_competition_zip",
                        functools.partial(submission.score_competition_zip, file_tasks=TEST_FILES))
    archive = _competition_zip(tmp_path / "sub.zip", {"toy_samples.csv": _savetxt(blurred("toy-gap", 0.1)),
                                                      "digits_probs.csv": _savetxt(blurred("digits", 0.2))})
    code, _, err = run_cli("submit", str(archive), "--method", "mine", "--budget", "10", "--label", "zip v1")
    assert code == 0, err
    assert {(r.task, r.label) for r in stored_rows(db_path)} == {("toy-gap", "zip v1"), ("digits", "zip v1")}


def test_label_options_a_submission_cannot_take_are_one_line(tmp_path, db_path, make_run, run_cli):
    folder = make_run(tmp_path / "runs", "digits")
    code, _, err = run_cli("submit", str(folder), "--label", "mine")
    assert code == 2 and err.count("\n") == 1 and "a run folder carries the label it was run with" in err
    code, _, err = run_cli("submit", str(tmp_path / "sub.zip"), "--method", "m", "--budget", "10", "--label", "y" * 101)
    assert code == 2 and err.count("\n") == 1 and "a label must be 1 to 100 printable characters" in err
    assert stored_rows(db_path) == []


def test_one_configuration_is_one_entry_however_its_record_spells_it(tmp_path, db_path, make_run, run_cli):
    """A record that leaves a setting at its default unsaid, or gives a float setting as a whole number, is the same
    configuration as one that spells every setting: one entry, one hash (two entries once split one run's seeds)."""
    full = records.as_recorded(dataclasses.asdict(resolve_config(METHODS["sgd"], "digits")))
    fewer = {name: value for name, value in full.items() if name != "beta1"}
    assert full["beta1"] == METHODS["sgd"].Config().beta1, "left unsaid, a setting takes its class default"
    whole = {**full, "min_lr": 0}  # a float setting given as a whole number
    make_run(tmp_path / "runs", "digits", method="sgd", seed=0, config=full | {"min_lr": 0.0})
    make_run(tmp_path / "runs", "digits", method="sgd", seed=1, config=whole)
    make_run(tmp_path / "runs", "digits", method="sgd", seed=2, config=fewer | {"min_lr": 0.0})
    assert len({submission.config_hash(submission.complete_config("sgd", c))
                for c in (full | {"min_lr": 0.0}, whole, fewer | {"min_lr": 0.0})}) == 1
    assert run_cli("submit", str(tmp_path / "runs"))[0] == 0
    entries = json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"][0]["entries"]
    assert [(e["method"], e["seeds"]) for e in entries] == [("sgd", [0, 1, 2])]


def test_what_the_method_warned_of_its_run_is_stored_with_the_row(tmp_path, db_path, make_run, run_cli):
    """The record's method_report warnings reach the database (and from there the board's notes); a record without
    them stores none."""
    make_run(tmp_path / "runs", "toy-gap", seed=0)
    make_run(tmp_path / "runs", "toy-gap", seed=1)
    _field_set("method_report", {"warnings": ["the MAP has not converged"]})(tmp_path / "runs/toy-gap/de/budget-10/seed-1")
    code, _, err = run_cli("submit", str(tmp_path / "runs"))
    assert code == 0, err
    assert {r.seed: r.warnings for r in stored_rows(db_path)} == {0: (), 1: ("the MAP has not converged",)}


@functools.lru_cache(maxsize=None)
def _scored(task_name: str) -> dict:
    """What the validator recomputes of a run of ``task_name`` whose predictive is the reference's blurred by 0.2:
    every metric on the whole test set and on each block."""
    from bench.tasks import get_task
    from reference.store import load_reference
    from tests.leaderboard.conftest import blurred_predictions

    task = get_task(task_name)
    return submission.scored(task, load_reference(task), blurred_predictions(task_name, 0.2))


def _claims(scored: dict) -> dict:
    """A record claiming exactly ``scored`` (a copy: the test edits it)."""
    return {"metrics": dict(scored["all"]),
            "metrics_by_block": {block: dict(values) for block, values in scored.items() if block != "all"}}


def _claimed_block(record: dict, block: str) -> dict:
    return record["metrics"] if block == "all" else record["metrics_by_block"][block]


@pytest.mark.parametrize("task_name", ["digits", "toy-gap"])
def test_every_metric_of_every_block_is_held_to_the_recomputed_value_on_each_side_of_the_tolerance(task_name):
    """Each claimed metric, on the whole test set and on every block (not only the first: a digits record claiming
    agreement 1.0 on clean was verified while the tests edited blur, which sorts first), is refused 1.1 x the tolerance
    from the recomputed value and accepted 0.9 x it (absolute plus relative: 1e-9 x (1 + |value|)); each is named with
    its block."""
    scored = _scored(task_name)
    submission.check_scored_claims(_claims(scored), scored, "r.json")
    for block, values in scored.items():
        for metric, value in values.items():
            reach = 1e-9 * (1 + abs(value))  # the tolerance docs/leaderboard.md states
            for side, refused in ((0.9, False), (1.1, True), (-1.1, True)):
                record = _claims(scored)
                _claimed_block(record, block)[metric] = value + side * reach
                where = "metrics" if block == "all" else f"metrics_by_block[{block!r}]"
                if refused:
                    with pytest.raises(submission.SubmissionError, match=rf"r.json {re.escape(where)}: claims "
                                                                         rf"{metric} = "):
                        submission.check_scored_claims(record, scored, "r.json")
                else:
                    submission.check_scored_claims(record, scored, "r.json")


@pytest.mark.parametrize("edit, message", [
    (lambda claims, block, metric: claims.pop(metric), "metrics do not match the recomputed set (missing [{metric!r}]"),
    (lambda claims, block, metric: claims.update(extra=0.5), "metrics do not match the recomputed set (missing [], "
                                                             "unexpected ['extra'])"),
    (lambda claims, block, metric: claims.update({metric: float("nan")}), "{metric} = nan is not a finite number"),
    (lambda claims, block, metric: claims.update({metric: "0.5"}), "{metric} = '0.5' is not a finite number"),
])
def test_a_missing_extra_or_non_numeric_metric_is_refused_on_every_block(edit, message):
    scored = _scored("digits")
    for block, values in scored.items():
        for metric in values:
            record = _claims(scored)
            edit(_claimed_block(record, block), block, metric)
            with pytest.raises(submission.SubmissionError, match=re.escape(message.format(metric=metric))):
                submission.check_scored_claims(record, scored, "r.json")


@pytest.mark.parametrize("change, message", [("drop", "metrics_by_block has blocks"), ("add", "metrics_by_block has "
                                                                                              "blocks"),
                                             ("not an object", "is not an object")])
def test_a_block_missing_added_or_not_an_object_is_refused(change, message):
    scored = _scored("digits")
    for block in [b for b in scored if b != "all"]:
        record = _claims(scored)
        if change == "drop":
            del record["metrics_by_block"][block]
        elif change == "add":
            record["metrics_by_block"][block + "-2"] = dict(scored[block])
        else:
            record["metrics_by_block"][block] = [1.0]
        with pytest.raises(submission.SubmissionError, match=re.escape(message)):
            submission.check_scored_claims(record, scored, "r.json")


def _agreeing_record(task_name: str) -> tuple:
    from bench.tasks import get_task
    from reference.store import load_reference

    task = get_task(task_name)
    record = _claims(_scored(task_name))
    submission.check_claims_agree(record, task, load_reference(task), "r.json")  # an honest record's claims agree
    return task, load_reference(task), record


@pytest.mark.parametrize("factor, refused", [(0.5, False), (2.0, True)])
def test_every_mean_metric_on_the_whole_test_set_is_the_mean_of_its_blocks_on_each_side_of_round_off(factor, refused):
    """A record alone: each metric that is a mean over test points (and RMSE's square), on the whole test set, edited
    by 0.5 x and 2 x the 1e-9 round-off the identity allows (relative to its blocks' weighted magnitude); agreement
    0.999 everywhere, so that accuracy's own identity leaves room."""
    task, reference, honest = _agreeing_record("digits")
    weights = {b.name: (b.stop - b.start) / task.n_test for b in task.test_blocks}
    checked = [m for m in honest["metrics"] if m in submission.MEAN_METRICS or m == "rmse"]
    assert {"agreement", "total_variation", "accuracy", "nll"} <= set(checked)
    for metric in checked:
        scale = sum(w * abs(honest["metrics_by_block"][b][metric]) for b, w in weights.items())
        record = _claims(_scored("digits"))
        for claims in [record["metrics"], *record["metrics_by_block"].values()]:  # room for accuracy's identity
            claims["agreement"] = 0.999
        record["metrics"][metric] -= factor * 1e-9 * scale
        if refused:
            with pytest.raises(submission.SubmissionError, match=f"{metric} .* on the whole test set, but its blocks"):
                submission.check_claims_agree(record, task, reference, "r.json")
        else:
            submission.check_claims_agree(record, task, reference, "r.json")


@pytest.mark.parametrize("by, refused", [(0.5e-9, False), (-0.5e-9, False), (2e-9, True), (-2e-9, True)])
def test_the_accuracy_identity_is_checked_on_every_block_on_each_side_of_round_off(by, refused):
    """Accuracy lies within the disagreement (1 - agreement) of the reference's own accuracy, on the whole test set and
    on every block: where agreement is 1 (the blurred predictive keeps every argmax), accuracy moved by 0.5 x the 1e-9
    round-off passes and by 2 x it is refused, naming the block."""
    task, reference, honest = _agreeing_record("digits")
    for block in ["all", *[b.name for b in task.test_blocks]]:
        assert _claimed_block(honest, block)["agreement"] == 1.0
        record = _claims(_scored("digits"))
        _claimed_block(record, block)["accuracy"] += by
        if refused:
            where = "metrics" if block == "all" else f"metrics_by_block[{block!r}]"
            with pytest.raises(submission.SubmissionError, match=re.escape(f"{where} contradict each other: accuracy")):
                submission.check_claims_agree(record, task, reference, "r.json")
        else:
            submission.check_claims_agree(record, task, reference, "r.json")


@pytest.mark.parametrize("edit, refused", [
    (lambda m: m.update(w2=m["w1"] * (1 - 0.5e-9)), False), (lambda m: m.update(w2=m["w1"] * (1 - 2e-9)), True),
    (lambda m: m.update(competition_w=-m["w1"] * (1 + 0.5e-9)), False),
    (lambda m: m.update(competition_w=-m["w1"] * (1 + 2e-9)), True),
    (lambda m: m.update(competition_w=-m["w1"] * (1 - 2e-9)), True),
])
def test_the_regression_identities_are_bracketed_at_round_off(edit, refused):
    """W2 >= W1 and the competition's score -W1, each just within and just beyond the 1e-9 round-off."""
    task, reference, record = _agreeing_record("toy-gap")
    edit(record["metrics"])
    if refused:
        with pytest.raises(submission.SubmissionError, match="contradict each other"):
            submission.check_claims_agree(record, task, reference, "r.json")
    else:
        submission.check_claims_agree(record, task, reference, "r.json")


@pytest.mark.parametrize("factor, refused", [(1 + 0.5e-9, False), (1 + 2e-9, True)])
def test_ece_on_the_whole_test_set_is_at_most_its_blocks_weighted_mean_on_each_side_of_round_off(factor, refused):
    task, reference, record = _agreeing_record("digits")
    weights = {b.name: (b.stop - b.start) / task.n_test for b in task.test_blocks}
    bound = sum(w * record["metrics_by_block"][b]["ece"] for b, w in weights.items())
    record["metrics"]["ece"] = bound * factor + (factor - 1)
    if refused:
        with pytest.raises(submission.SubmissionError, match="ECE .* on the whole test set above the"):
            submission.check_claims_agree(record, task, reference, "r.json")
    else:
        submission.check_claims_agree(record, task, reference, "r.json")
