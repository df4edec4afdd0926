"""A run record is a file anyone can edit: ``verify`` and ``submit`` read it through one validator
(:func:`bench.records.checked_result`), so an edit one of them refuses the other refuses in the same line, and an
edit either accepts holds nothing that a re-execution, a budget plan or the database would fail on."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from approximators import METHOD_NAME, METHODS, resolve_config
from approximators.base import recorded_config
from bench import records
from bench.arguments import SEED_LIMIT
from bench.budget import MAX_BUDGET_EPOCHS
from bench.errors import EXIT_BAD_INPUT, BenchError
from bench.verify import VerificationError, _recorded
from leaderboard import submission
from tests.leaderboard.conftest import write_run
from tests.reliability.test_error_boundary import assert_one_line


def genuine_record(out):
    """A run folder of sgd on toy-gap whose record holds every field ``run`` writes (no training: its predictions
    derive from the reference)."""
    config = records.as_recorded(dataclasses.asdict(resolve_config(METHODS["sgd"], "toy-gap")))
    return write_run(out, "toy-gap", method="sgd", budget=2.0, config=config, resolved=config, method_source=None,
                     label=None, architecture_change=None, method_report={"epochs": 2},
                     environment={"torch": "test", "cpu": "a CPU", "torch_threads": 1, "cpu_count": 2},
                     command="python -m bench --method sgd --budget 2 --task toy-gap", git=None)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return genuine_record(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def record(folder):
    return json.loads((folder / records.RESULT).read_text())


def edited(folder, record: dict, **changes) -> None:
    (folder / records.RESULT).write_text(json.dumps({**record, **changes}))


def outcome(call, folder):
    """``("accepted", None)`` or ``("refused", line)`` for a reader of the run folder."""
    try:
        call(folder)
    except (VerificationError, submission.SubmissionError, BenchError) as error:
        return "refused", str(error)
    return "accepted", None


# Values an edit puts in a field: JSON of any shape, and the numbers and names that broke readers before.
HOSTILE = st.sampled_from([
    math.inf, -math.inf, math.nan, -0.0, 1e-300, 1e300, 10**30, 10**400, -1, 0, True, False, None, "", "2", [], {},
    [1], {"a": 1}, "../../etc", "os:system", "x\x1b[2J\u202e",
])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
FIELDS = ["task", "task_version", "task_fingerprint", "method", "method_source", "budget", "epochs_used",
          "test_passes", "seed", "metrics", "metrics_by_block", "wall_seconds", "device", "config", "resolved",
          "versions", "environment", "reference", "label", "finished_at", "architecture_change"]
METHOD_NAMES = st.sampled_from(["../../../tmp/x", "..", "os:system", "nosuch", "de\x1b[31m", "a" * 101, "sgd", "mfvi",
                                "hmc", "mc-dropout", "my-method"])
METHOD_SOURCES = st.sampled_from([None, "os:system", "mine.methods:Mine", "../x:y", "a:b\x1b[2J", 5, ""])


def _config_edits():
    """A setting of sgd's config (or one it lacks) given any value: zero, a bool, a float for an int, 10^30, NaN."""
    names = [f.name for f in dataclasses.fields(METHODS["sgd"].Config)] + ["evil", "1x"]
    values = st.one_of(HOSTILE, st.integers(-10, 10**20), st.floats(), st.text(max_size=4))
    return st.dictionaries(st.sampled_from(names), values, min_size=1, max_size=3)


EDITS = st.one_of(
    st.tuples(st.sampled_from(FIELDS), st.one_of(HOSTILE, JSON)).map(lambda kv: {kv[0]: kv[1]}),
    st.tuples(METHOD_NAMES, METHOD_SOURCES).map(lambda m: {"method": m[0], "method_source": m[1]}),
    _config_edits().map(lambda values: {"config_edit": values}),
)


def _apply(record: dict, edit: dict) -> dict:
    if "config_edit" in edit:
        return {**record, "config": {**record["config"], **edit["config_edit"]}}
    return {**record, **edit}


def _holds_nothing_that_fails_later(result: dict) -> None:
    """What an accepted record promises the code that uses it."""
    assert 0 < result["budget"] <= MAX_BUDGET_EPOCHS and math.isfinite(float(result["budget"]))
    # 0 epochs: a method that read no training data (records.checked_result; tests/bench/test_runner.py)
    assert 0 <= result["epochs_used"] <= result["budget"] and 0 <= result["seed"] < SEED_LIMIT
    assert METHOD_NAME.fullmatch(result["method"])
    json.dumps(result["config"], allow_nan=False)
    environment = result.get("environment")
    assert environment is None or all(isinstance(v, (str, int, type(None))) for v in environment.values())
    if result["method"] in METHODS:
        assert result.get("method_source") is None
        recorded_config(METHODS[result["method"]], result["config"])  # the re-execution's config builds
    else:
        assert records.METHOD_SOURCE.fullmatch(result["method_source"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=EDITS)
@example(edit={"epochs_used": -0.0})  # the boundary, every time: a random draw found the promise stale once
@example(edit={"epochs_used": -1e-300})
def test_verify_and_submit_refuse_exactly_the_same_edits_in_the_same_line(folder, record, edit):
    (folder / records.RESULT).write_text(json.dumps(_apply(record, edit)))
    by_verify, by_submit = outcome(_recorded, folder), outcome(submission.read_result, folder)
    assert by_verify == by_submit
    verdict, line = by_verify
    if verdict == "refused":
        assert "\n" not in line and line.startswith(str(folder)), line
    else:
        _holds_nothing_that_fails_later(records.checked_result(folder))


@pytest.mark.parametrize("edit, fragment", [
    ({"method": "../../../tmp/x"}, "the method name must be"),
    ({"method": "os:system"}, "the method name must be"),
    ({"method": "nosuch"}, "'nosuch' is not a method of this installation"),
    ({"method_source": "os:system"}, "sgd is a built-in method, whose runs record no method_source"),
    ({"config_edit": {"batch_size": 0}}, "batch_size must lie in [1, inf)"),
    ({"config_edit": {"batch_size": True}}, "of the wrong type: batch_size"),
    ({"config_edit": {"batch_size": 16.5}}, "of the wrong type: batch_size"),
    ({"config_edit": {"evil": 1}}, "unknown evil"),
    ({"config_edit": {"batch_size": 10**30}}, "whole ones within 64 bits"),
    ({"budget": math.inf}, "the budget must be a number of epochs in (0, 1,000,000]"),
    ({"budget": 10**400}, "the budget must be a number of epochs"),
    ({"seed": 10**400}, "lies outside [0, 2^63)"),
    ({"wall_seconds": 10**400}, "wall_seconds must be a finite number"),
    ({"environment": [1]}, "field 'environment' must be null or a dict"),
    ({"environment": {"torch_threads": "x\x1b[2J"}}, "environment must map"),
    ({"resolved": {"lr": math.nan}}, "resolved must map setting names to numbers"),
    ({"metrics": {"w1": math.nan}}, "metrics must map metric names to finite numbers"),
    ({"metrics_by_block": {"all": {"w1": "0.1"}}}, "metrics_by_block['all'] must map metric names to finite numbers"),
])
def test_each_kind_of_edit_is_one_line_from_verify_and_submit_alike(tmp_path, run_cli, edit, fragment):
    folder = genuine_record(tmp_path / "runs")
    edited(folder, _apply(json.loads((folder / records.RESULT).read_text()), edit))
    lines = []
    for command in (("verify", folder), ("submit", folder, "--db", tmp_path / "board.sqlite", "--name", "m")):
        code, _, err = run_cli(*command)
        assert_one_line(code, err, EXIT_BAD_INPUT, str(folder / records.RESULT), fragment)
        lines.append(err)
    assert lines[0] == lines[1]
    assert not (tmp_path / "board.sqlite").exists()


@pytest.mark.parametrize("text, fragment", [
    ('{"budget": 1e400}', "the budget must be"),  # JSON's 1e400 reads as infinity
    ('{"seed": ' + "9" * 5000 + "}", "it holds a number too long to read"),
    ('{"budget": ' + "9" * 5000 + "}", "it holds a number too long to read"),
    ('{"budget": Infinity}', "the budget must be"),
])
def test_numbers_json_cannot_hold_as_python_floats_are_one_line(tmp_path, run_cli, text, fragment):
    folder = genuine_record(tmp_path / "runs")
    record = (folder / records.RESULT).read_text()
    key = text[2:text.index('"', 2)]
    start = record.index(f'"{key}": ')
    end = record.index("\n", start)
    (folder / records.RESULT).write_text(record[:start] + text[1:-1] + ("," if record[end - 1] == "," else "")
                                         + record[end:])
    for command in (("verify", folder), ("submit", folder, "--db", tmp_path / "board.sqlite", "--name", "m")):
        code, _, err = run_cli(*command)
        assert_one_line(code, err, EXIT_BAD_INPUT, str(folder / records.RESULT), fragment)


@pytest.mark.parametrize("command", ["verify", "submit", "export-submission"])
def test_a_folder_where_the_record_should_be_is_named_by_its_path(tmp_path, run_cli, command):
    """A folder opened for reading was reported by its file descriptor ("Is a directory: 3")."""
    folder = genuine_record(tmp_path / "runs")
    (folder / records.RESULT).unlink()
    (folder / records.RESULT).mkdir()
    extra = {"submit": ("--db", tmp_path / "board.sqlite", "--name", "m"), "export-submission": ("--out",
                                                                                                tmp_path / "s.zip")}
    code, _, err = run_cli(command, folder, *extra.get(command, ()))
    assert_one_line(code, err, EXIT_BAD_INPUT, f"{folder / records.RESULT}: the run record is not a regular file but "
                                               "a folder")


def test_a_fifo_for_the_predictions_is_refused_by_verify_without_waiting(tmp_path, run_cli):
    folder = genuine_record(tmp_path / "runs")
    (folder / records.PREDICTIONS).unlink()
    os.mkfifo(folder / records.PREDICTIONS)
    code, _, err = run_cli("verify", folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, "predictions file is not a regular file")


def test_a_record_verify_accepts_is_planned_from_its_checked_budget(tmp_path, run_cli):
    """The planned re-execution sums checked budgets: an infinite one was OverflowError (exit 70) in the plan."""
    folders = [genuine_record(tmp_path / "a"), genuine_record(tmp_path / "b")]
    edited(folders[1], json.loads((folders[1] / records.RESULT).read_text()), budget=math.inf)
    code, _, err = run_cli("verify", *folders)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(folders[1] / records.RESULT), "the budget must be")


def test_every_method_source_run_records_is_one_the_validator_takes(tmp_path):
    """``run`` records a method of one's own as module:qualname, a class made in a function among them
    (``f.<locals>.Mine``, the API's and the guide's way): submit must take the record run wrote."""
    from approximators import method_source

    def make():
        class Mine:
            name = "mine"
        return Mine

    class Module:
        name = "mine2"

    for cls in (make(), Module):
        source = method_source(cls)
        folder = genuine_record(tmp_path / cls.name)
        edited(folder, json.loads((folder / records.RESULT).read_text()), method=cls.name, method_source=source,
               config={})
        assert records.checked_result(folder)["method_source"] == source


def _digits_reference_sha():
    from bench.tasks import get_task
    from reference.store import load_reference

    return load_reference(get_task("digits")).sha256


@pytest.mark.parametrize("edit, fragment", [
    (lambda r: {"metrics": {**r["metrics"], "w1": 0.001}}, "metrics: claims w1 = 0.001 but the predictions give"),
    (lambda r: {"metrics": {k: v for k, v in r["metrics"].items() if k != "w2"}}, "metrics do not match"),
    (lambda r: {"reference": {**r["reference"], "sha256": _digits_reference_sha()}}, "scored against reference sha256"),
    (lambda r: {"task_fingerprint": "0" * 64}, "with other data, settings or network"),
    (lambda r: {"task_version": r["task_version"] + 1}, "with other data, settings or network than this "),  # alone
    (lambda r: {"task": "nosuch"}, "result.json: task nosuch is not available in this installation"),
    (lambda r: {"task": "imdb"}, "result.json: the data of task imdb are not in "),  # a competition task not fetched
    # the sha256 edited after the 16 characters a line shows: the line shows all 64, so that they differ
    (lambda r: {"reference": {**r["reference"], "sha256": r["reference"]["sha256"][:40] + "0" * 24}},
     "0" * 24 + ", but the registry's toy-gap reference is "),
    (lambda r: {"reference": {**r["reference"], "key": "probs"}}, "scored against the reference's array 'probs'"),
    (lambda r: {"noise_floor": {"all": {**r["noise_floor"]["all"], "w1": 0.5}}},
     "claims another noise floor than its reference publishes"),
    (lambda r: {"noise_floor": None}, "claims another noise floor than its reference publishes (None there"),
    # claims an older version's record lacks, every current one makes: removing one would switch off its check
    (lambda r: {"resolved": None}, "holds no resolved, which every record made for toy-gap's fingerprint holds"),
    (lambda r: {"predictions_sha256": None}, "holds no predictions_sha256, which every record"),
    (lambda r: {"environment": None}, "holds no environment, which every record"),
    (lambda r: {"noise_floor": "garbage"}, "field 'noise_floor' must be null or a dict"),
    (lambda r: {"noise_floor": {"all": {"w1": "0.1"}}}, "noise_floor must map blocks to metric names"),
    (lambda r: {"versions": {**r["versions"], "torch": "1.0"}}, "versions and environment name other versions of torch"),
    (lambda r: {"environment": {**r["environment"], "torch_threads": "1"}},
     "environment.torch_threads must be null or a whole number of at least 1, got '1'"),
    (lambda r: {"environment": {**r["environment"], "cpu_count": 0}}, "environment.cpu_count must be null or a whole"),
    (lambda r: {"finished_at": "yesterday"}, "finished_at must be null or an ISO 8601 timestamp"),
    (lambda r: {"architecture_change": "relu->tanh"}, "sgd with these settings leaves the task's network as it is"),
    # runs that cannot exist: a budget the method's budget rule refuses
    (lambda r: {"method": "de", "config": {}, "architecture_change": None}, "a run that cannot exist: de: a budget"),
    (lambda r: {"budget": 1e-300, "epochs_used": 0}, "a run that cannot exist: sgd: a budget of 1e-300"),
    # a setting edited in the configuration or in the resolved settings
    (lambda r: {"config": {**r["config"], "lr": r["config"]["lr"] * 2}},
     "records resolved settings its configuration does not resolve to at budget 2 (lr: "),
    (lambda r: {"resolved": {**r["resolved"], "lr": r["resolved"]["lr"] * 2}}, "does not resolve to at budget 2 (lr: "),
])
def test_every_claim_a_record_makes_is_recomputed_by_verify_and_submit_alike(tmp_path, run_cli, edit, fragment):
    """An edited metric, another reference's sha256 or another fingerprint: the same line from both, before any
    re-execution (verify once said "verified (bitwise)" of a record whose w1 had been edited)."""
    folder = genuine_record(tmp_path / "runs")
    record = json.loads((folder / records.RESULT).read_text())
    edited(folder, {**record, **edit(record)})
    lines = []
    for command in (("verify", folder), ("submit", folder, "--db", tmp_path / "board.sqlite", "--name", "m")):
        code, _, err = run_cli(*command)
        assert_one_line(code, err, EXIT_BAD_INPUT, str(folder / records.RESULT), fragment)
        lines.append(err)
    assert lines[0] == lines[1]


def test_mc_dropout_s_recorded_network_change_must_be_the_one_its_settings_make(tmp_path, run_cli):
    """A method that changes the network: the record must say how its settings change it, not another rate."""
    config = records.as_recorded(dataclasses.asdict(resolve_config(METHODS["mc-dropout"], "toy-gap")))
    change = METHODS["mc-dropout"].architecture_change(recorded_config(METHODS["mc-dropout"], config))
    folder = write_run(tmp_path / "runs", "toy-gap", method="mc-dropout", budget=20.0, config=config,
                       architecture_change=change)
    assert records.checked_result(folder)["architecture_change"] == change
    edited(folder, {**json.loads((folder / records.RESULT).read_text()),
                    "architecture_change": change.replace(f"rate {config['rate']:g}", "rate 0.9")})
    code, _, err = run_cli("verify", folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, f"mc-dropout with these settings changes the task's network ({change})")


def test_one_refused_folder_is_its_own_line_and_verify_goes_on_to_the_others(tmp_path, run_cli):
    """A record refused, or one whose re-execution fails (sgd diverging at the recorded step size), is its folder's
    line on stderr; the folders after it are still verified, and the exit code says a folder was refused."""
    out = tmp_path / "runs"
    for seed in (0, 1, 2):
        code, _, err = run_cli("--method", "sgd", "--budget", 1, "--task", "toy-gap", "--out", out, "--seed", seed,
                               "--quiet")
        assert code == 0, err
    folders = [out / "toy-gap" / "sgd" / "budget-1" / f"seed-{seed}" for seed in (0, 1, 2)]
    refused = json.loads((folders[0] / records.RESULT).read_text())
    edited(folders[0], {**refused, "finished_at": "yesterday"})
    diverging = json.loads((folders[1] / records.RESULT).read_text())
    edited(folders[1], {**diverging, "config": {**diverging["config"], "lr": 3e38},
                        "resolved": {**diverging["resolved"], "lr": 3e38}})
    code, text, err = run_cli("verify", *folders)
    assert code == EXIT_BAD_INPUT
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {folders[0] / records.RESULT}: finished_at"), (text, err)
    assert lines[1].startswith(f"error: {folders[1]}: ") and "diverged" in lines[1], lines
    assert f"{folders[2]}: verified (bitwise" in text and "1 of 3 runs verified; 2 refused or failed" in text


def test_an_edited_metric_of_one_block_is_refused_in_one_line(tmp_path, run_cli):
    config = records.as_recorded(dataclasses.asdict(resolve_config(METHODS["sgd"], "digits")))
    folder = write_run(tmp_path / "runs", "digits", method="sgd", budget=2.0, config=config, resolved=config)
    record = json.loads((folder / records.RESULT).read_text())
    blocks = record["metrics_by_block"]
    edited(folder, {**record, "metrics_by_block": {**blocks, "blur": {**blocks["blur"], "total_variation": 0.0}}})
    code, _, err = run_cli("verify", folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, "metrics_by_block['blur']: claims total_variation = 0")


def test_a_record_kept_alone_has_its_metrics_recomputed_from_the_re_execution(tmp_path, run_cli):
    """A record without its predictions (as the shipped ones) names them by sha256; where the re-execution reproduces
    them bit for bit, verify recomputes the record's metrics from them: an edited metric is NOT VERIFIED."""
    out = tmp_path / "runs"
    code, _, err = run_cli("--method", "sgd", "--budget", 1, "--task", "toy-gap", "--out", out, "--quiet",
                           "--no-predictions")
    assert code == 0, err
    folder = out / "toy-gap" / "sgd" / "budget-1" / "seed-0"
    code, text, _ = run_cli("verify", folder)
    assert code == 0 and "every metric recomputed as recorded" in text
    record = json.loads((folder / records.RESULT).read_text())
    edited(folder, {**record, "metrics": {**record["metrics"], "w2": record["metrics"]["w2"] * 2}})  # W2 >= W1 still
    code, text, _ = run_cli("verify", folder)
    assert code == 1 and "NOT VERIFIED" in text and "claims w2 =" in text


def _alone(tmp_path, run_cli, task: str):
    out = tmp_path / "runs"
    code, _, err = run_cli("--method", "sgd", "--budget", 1, "--task", task, "--out", out, "--quiet", "--no-predictions")
    assert code == 0, err
    return out / task / "sgd" / "budget-1" / "seed-0"


def _scaled(record: dict, block: str, metric: str, by) -> dict:
    """``record`` with ``metric`` on ``block`` times ``by`` (``"to 1"``: set to 1)."""
    if by == "to 1":
        value = (record["metrics"] if block == "all" else record["metrics_by_block"][block])[metric]
        by = 1 / value
    if block == "all":
        return {**record, "metrics": {**record["metrics"], metric: record["metrics"][metric] * by}}
    blocks = record["metrics_by_block"]
    return {**record, "metrics_by_block": {**blocks, block: {**blocks[block], metric: blocks[block][metric] * by}}}


@pytest.mark.parametrize("task, block, metric, by, message", [
    ("toy-gap", "all", "w2", 0.5, "W2 0."),  # below W1 (W2 >= W1 at every point)
    ("toy-gap", "all", "w1", 3.0, "W2 0."),  # W1 raised above W2: the same identity from its other side
    ("toy-gap", "all", "competition_w", 1.000001, "is not -W1"),
    ("digits", "blur", "accuracy", 0.5, "than its disagreement"),  # further from the reference's than 1 - agreement
    ("digits", "brightness", "agreement", "to 1", "than its disagreement"),  # full agreement: the reference's accuracy
    ("digits", "all", "total_variation", 1.001, "on the whole test set, but its blocks"),  # 0.1%: the edit
    ("digits", "blur", "nll", 1.001, "on the whole test set, but its blocks"),  # a block's, not the first's
    ("digits", "all", "ece", 10.0, "above the"),  # ECE on the whole test set is at most its blocks' weighted mean
])
def test_a_record_alone_whose_metrics_contradict_each_other_is_refused_on_any_cpu(tmp_path, run_cli, task, block,
                                                                                 metric, by, message):
    """A record alone claims metrics no predictions recompute; each identity every predictive satisfies is checked,
    before any re-execution, wherever the record was made (the environment edited as if from another CPU kind too)."""
    folder = _alone(tmp_path, run_cli, task)
    record = json.loads((folder / records.RESULT).read_text())
    for environment in (record["environment"], {**record["environment"], "cpu": "another", "cpu_capability": "X"}):
        edited(folder, _scaled({**record, "environment": environment}, block, metric, by))
        code, _, err = run_cli("verify", folder)
        assert_one_line(code, err, EXIT_BAD_INPUT, "contradict each other", message)
        code, _, err = run_cli("submit", folder.parent.parent.parent.parent, "--db", tmp_path / "db.sqlite")
        assert code == 2, err  # a record alone is refused by submit anyway; the identities come first
    edited(folder, record)
    assert run_cli("verify", folder)[0] == 0, "the unedited record verifies"


RANGES = [  # (field, a value just inside its range, one just outside), each end of each range a record's fields have
    ("seed", 0, -1), ("seed", 2**63 - 1, 2**63),
    ("task_version", 0, -1), ("task_version", 2**31 - 1, 2**31),
    ("budget", MAX_BUDGET_EPOCHS, MAX_BUDGET_EPOCHS * (1 + 1e-12)), ("budget", 2.0, 0.0),
    ("epochs_used", 2.0, 2.0 * (1 + 1e-12)), ("epochs_used", 0.0, -1e-300),
    ("test_passes", 0.0, -1e-300), ("wall_seconds", 0.0, -1e-300),
]


@pytest.mark.parametrize("field, inside, outside", RANGES)
def test_each_end_of_each_range_of_a_records_fields_is_bracketed(folder, record, field, inside, outside):
    """Each end of each numeric range the validator holds a record's fields to, a value just inside it accepted and
    one just outside refused in one line (epochs used: within [0, the budget of 2]). The genuine record as it was
    written (``record``): the other tests of this module leave their edits in the folder's file."""
    base = {**record, "epochs_used": 0.0} if field == "budget" else record
    records.check_record({**base, field: inside}, folder / records.RESULT)
    with pytest.raises(BenchError, match=field.replace("_", ".") if field != "budget" else "the budget must be"):
        records.check_record({**base, field: outside}, folder / records.RESULT)
