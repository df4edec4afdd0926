"""The command line end to end: a run writes a complete folder; bad input is one line and exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reference import store

ROOT = Path(__file__).resolve().parents[2]


def test_run_writes_a_complete_result_folder(tmp_path, run_cli):
    code, out, err = run_cli("--method", "de", "--budget", "10", "--task", "toy-gap",
                             "--out", str(tmp_path), "--quiet", "--set", "members=2")
    assert code == 0, err
    assert "toy-gap" in out and "floor W1" in out
    folder = tmp_path / "toy-gap" / "de" / "budget-10" / "seed-0"
    result = json.loads((folder / "result.json").read_text())
    for key in ("task", "method", "budget", "epochs_used", "seed", "metrics", "wall_seconds", "device",
                "config", "versions", "reference", "noise_floor", "metrics_by_block"):
        assert key in result
    assert result["epochs_used"] == 10 and result["config"]["members"] == 2
    assert set(result["metrics"]) >= {"w1", "w2", "competition_w", "rmse", "log_likelihood"}
    assert result["reference"]["sha256"] == store.read_registry()["toy-gap"]["npz_sha256"]
    assert result["versions"]["torch"]
    with np.load(folder / "predictions.npz") as npz:
        assert npz["samples"].shape == (121, 1000)
    assert not list(folder.glob("*.tmp")), "no temporary files are left behind"


def test_classification_run_reports_blocks(tmp_path, run_cli):
    code, out, err = run_cli("run", "--method", "sgd", "--budget", "1", "--task", "digits",
                             "--out", str(tmp_path), "--quiet")
    assert code == 0, err
    result = json.loads((tmp_path / "digits/sgd/budget-1/seed-0/result.json").read_text())
    assert set(result["metrics"]) >= {"agreement", "total_variation", "accuracy", "nll", "ece"}
    assert set(result["metrics_by_block"]) == {"clean", "gaussian-noise", "brightness", "blur"}


def test_finished_run_is_not_overwritten_without_force(tmp_path, run_cli):
    args = ["--method", "sgd", "--budget", "2", "--task", "toy-gap", "--out", str(tmp_path), "--quiet"]
    assert run_cli(*args)[0] == 0
    result = tmp_path / "toy-gap/sgd/budget-2/seed-0/result.json"
    before = result.read_bytes()
    code, out, err = run_cli(*args)
    assert code == 0 and "finished earlier" in out, err
    assert result.read_bytes() == before
    assert run_cli(*args, "--force")[0] == 0
    assert result.read_bytes() != before, "--force trains it again"


@pytest.mark.parametrize("args, message", [
    (["--method", "nope", "--budget", "10"], "unknown method 'nope'"),
    (["--method", "de", "--budget", "10", "--task", "nope"], "unknown task 'nope'"),
    (["--method", "de", "--budget", "-3"], "must be a positive number"),
    (["--method", "de", "--budget", "abc"], "not a number"),
    (["--method", "de", "--budget", "2", "--task", "toy-gap"], "too small for 5 members"),
    (["--method", "de", "--budget", "10", "--task", "toy-gap", "--set", "lr"], "expected key=value"),
    (["--method", "de", "--budget", "10", "--task", "toy-gap", "--set", "bogus=1"], "no setting 'bogus'"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, message, tmp_path, run_cli):
    code, _, err = run_cli(*args, "--out", str(tmp_path), "--quiet")
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.rglob("result.json"))


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_unknown_method_is_refused_before_any_process_starts_or_task_data_loads(command, tmp_path, run_cli,
                                                                                   monkeypatch):
    import bench.tasks
    from bench import executors, runner, sweep

    def forbidden(*args, **kwargs):
        raise AssertionError("an unknown name needs neither a process of its own nor a task's data")

    monkeypatch.setattr(executors, "Isolated", forbidden)
    # each module that took get_task by name, imported before patching: one imported first while it is patched
    # would keep the forbidden function after the test
    for module in (bench.tasks, runner, sweep):
        monkeypatch.setattr(module, "get_task", forbidden)
    code, _, err = run_cli(command, "--method", "nope", "--budget", "10", "--out", str(tmp_path), "--quiet")
    assert code == 2 and "unknown method 'nope'" in err and err.count("\n") == 1, err
    assert executors.isolates("pkg.module:Class") and not executors.isolates("sgd")


def test_unwritable_output_folder(tmp_path, run_cli):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap",
                           "--out", str(blocker), "--quiet")
    assert code == 2 and "cannot write to output folder" in err and err.count("\n") == 1


@pytest.mark.parametrize("errno_name", ["EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "ENAMETOOLONG"])
def test_an_output_folder_or_baseline_the_machine_refuses_is_exit_code_3(errno_name, tmp_path, monkeypatch, run_cli):
    """docs/running.md: a read-only or unwritable folder, a full disk, a path too long is the machine refusing (3);
    a file where the folder should be (above) is the path's fault (2). Root writes read-only folders, so the refusal
    is the file system's answer, given where bdl-bench first writes."""
    import errno
    import tempfile

    from bench import records

    def refused(*args, **kwargs):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    with monkeypatch.context() as patched:
        patched.setattr(records.Path, "mkdir", refused)
        code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", str(tmp_path / "runs"),
                               "--quiet")
    assert code == 3 and err.startswith("error: cannot write to output folder") and err.count("\n") == 1, err
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refused)
    code, _, err = run_cli("check", "--update", "--baseline", str(tmp_path / "baseline.json"), "--method", "sgd",
                           "--task", "toy-gap", "--seeds", "1")
    assert code == 3 and err.startswith("error: cannot write the baseline") and err.count("\n") == 1, err


def test_corrupted_reference_is_refused(tmp_path, monkeypatch, run_cli):
    for suffix in (".npz", ".json"):
        (tmp_path / f"toy-gap{suffix}").write_bytes((store.PACKAGE_DATA / f"toy-gap{suffix}").read_bytes())
    (tmp_path / "registry.json").write_bytes(store.REGISTRY.read_bytes())
    with open(tmp_path / "toy-gap.npz", "ab") as f:
        f.write(b"\0")
    monkeypatch.setattr(store, "PACKAGE_DATA", tmp_path)
    monkeypatch.setattr(store, "REGISTRY", tmp_path / "registry.json")
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap",
                           "--out", str(tmp_path / "runs"), "--quiet")
    assert code == 2 and "reference corrupted" in err and err.count("\n") == 1
    assert not list(tmp_path.rglob("result.json"))


def test_listing_commands(run_cli):
    code, out, _ = run_cli("tasks")
    assert code == 0 and "diabetes-gap" in out and "MLP 64-50-10" in out and " ok" in out
    code, out, _ = run_cli("methods")
    assert code == 0 and "de" in out and "members=5" in out


def test_module_entry_point_exits_non_zero_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "bench", "--method", "nope", "--budget", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    from approximators import METHODS, installed_methods
    known = [*METHODS, *sorted(installed_methods())]  # an installed plugin (the example package) is known too
    assert proc.stderr.strip() == (f"error: unknown method 'nope'; known methods: {', '.join(known)} "
                                   "(or package.module:ClassName)")


def test_piped_stderr_holds_only_the_error_line():
    """Without --quiet, progress bars appear only on a terminal: a piped stderr is the error alone."""
    proc = subprocess.run([sys.executable, "-m", "bench", "--method", "sae", "--budget", "10", "--task", "digits"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("error: sae: a budget of 10 epochs is too small for 1 chain(s) whose first member "
                           "trains 100 epochs; the smallest budget that runs with these settings is 100; a lower --set "
                           "first_epochs=... needs less\n")


@pytest.mark.parametrize("args, message", [
    (("--budget", "1", "--budget", "2"), "--budget given more than once"),
    (("--budget", "1", "--method", "de"), "--method given more than once"),
    (("--budget", "1", "--out", "a", "--out", "b"), "--out given more than once"),
    (("--budget", "1", "--set", "lr=0.1", "--set", "lr=0.2"), "--set lr given more than once"),
])
def test_a_single_valued_option_given_twice_is_refused(tmp_path, run_cli, args, message):
    code, _, err = run_cli("--method", "sgd", "--task", "toy-gap", "--quiet", "--out", tmp_path / "runs", *args)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_repeated_seeds_run_once_each(tmp_path, run_cli):
    code, out, err = run_cli("--method", "sgd", "--task", "toy-gap", "--budget", "1", "--quiet", "--out", tmp_path,
                             "--seed", "3", "--seed", "1", "--seed", "3")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "toy-gap" / "sgd" / "budget-1").iterdir()) == ["seed-1", "seed-3"]


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from bench.cli import build_parser

    def silent(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from silent(sub, [*path, name])
            elif not action.help and not isinstance(action, argparse._HelpAction):
                yield " ".join([*path, *(action.option_strings or [action.dest])])

    assert list(silent(build_parser(), [])) == []


def test_a_record_says_how_the_run_was_asked_for_and_from_which_commit(tmp_path, run_cli):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet",
                           "--label", "plain MAP, 1 epoch")
    assert code == 0, err
    result = json.loads((tmp_path / "toy-gap" / "sgd" / "budget-1" / "seed-0" / "result.json").read_text())
    assert result["label"] == "plain MAP, 1 epoch"
    assert result["command"] == ("python -m bench --method sgd --budget 1 --task toy-gap --out "
                                 f"{tmp_path} --quiet --label 'plain MAP, 1 epoch'")
    checkout = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60)
    if not (checkout / ".git").exists() or head.returncode != 0:
        pytest.skip("not run from a git checkout with a commit")
    assert result["git"]["commit"] == head.stdout.strip() and isinstance(result["git"]["dirty"], bool)


@pytest.mark.parametrize("label", ["", "   ", "two\nlines", "x" * 101])
def test_a_label_that_cannot_be_shown_is_refused_before_training(tmp_path, run_cli, label):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--label", label)
    assert code == 2 and err.count("\n") == 1 and "a label must be" in err
    assert not any(tmp_path.iterdir())


def test_methods_for_a_task_shows_the_values_a_run_there_uses(run_cli):
    from dataclasses import asdict

    from approximators import get_method, resolve_config

    code, out, _ = run_cli("methods", "--task", "digits", "--method", "sgd")
    assert code == 0
    digits = asdict(resolve_config(get_method("sgd"), "digits"))
    line = [line for line in out.splitlines() if line.startswith("sgd ")][-1]  # the settings table's row
    for key, value in digits.items():
        marked = "*" if value != getattr(get_method("sgd").Config(), key) else ""
        assert f"{key}={value}{marked}" in line  # 4 significant digits show every tuned default exactly
    assert "batch_size=64*" in line  # digits' own default, not the class's 32
    code, out, _ = run_cli("methods", "--method", "sgd")
    assert "batch_size=32," in out and "~" not in out, "nothing rounded, no note about rounding"
    code, out, _ = run_cli("methods", "--method", "swag")
    assert "swa_start=~0.5367," in out and "lr=0.05," in out  # 161/300 rounded and marked, as readable as the rest
    assert "~ rounded to 4 significant digits (runs use and record the exact value)" in out


def test_every_shown_setting_follows_one_rule(run_cli):
    """4 significant digits for every number shown as a setting, a rounded one marked: the tuned defaults of every
    method on every embedded task show exactly; only computed fractions (SWAG's 161/300) are marked."""
    import dataclasses

    from approximators import METHODS, resolve_config
    from bench.commands.common import shown_setting
    from bench.tasks import task_names

    assert (shown_setting(161 / 300), shown_setting(2.111e-06), shown_setting(0.9997), shown_setting(1 / 30),
            shown_setting(1000.0), shown_setting(64), shown_setting(True)) == \
        ("~0.5367", "2.111e-06", "0.9997", "~0.03333", "1000", "64", "True")
    configs = [(method, resolve_config(cls, task)) for method, cls in METHODS.items() for task in task_names()]
    rounded = {(method, field.name) for method, config in configs for field in dataclasses.fields(config)
               if shown_setting(getattr(config, field.name)).startswith("~")}
    assert rounded == {("swag", "swa_start"), ("swag-diag", "swa_start"), ("multiswag", "swa_start")}
    code, out, _ = run_cli("tasks")
    assert code == 0 and "~0.03333" in out  # diabetes-gap's prior variance 1/30, shown by the same rule


def test_tasks_prints_tables_not_python_values(run_cli):
    code, out, _ = run_cli("tasks")
    assert code == 0
    assert "{'" not in out and "('" not in out
    assert "shifts.blur.gaussian_sigma=0.8" in out and "clean (rows 0-360)" in out


def test_a_run_uses_one_thread_unless_told_whatever_the_caller_s_torch_says(tmp_path, run_cli):
    import torch

    from bench import records

    torch.set_num_threads(2)
    try:
        assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")[0] == 0
        result = records.read_result(records.run_folder(tmp_path, "toy-gap", "sgd", 1, 0))
        assert result["environment"]["torch_threads"] == 1
    finally:
        torch.set_num_threads(1)
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path / "b",
                           "--threads", "1000")
    assert code == 2 and "--threads 1000 is more than" in err and not (tmp_path / "b").exists()


def test_the_python_api_restores_the_caller_s_threads():
    import torch

    from bench import api

    torch.set_num_threads(2)
    try:
        fitted = api.fit("toy-gap", "sgd", 1)
        assert torch.get_num_threads() == 2 and fitted.epochs_used == 1
        with pytest.raises(api.ConfigError, match="threads must be a whole number"):
            api.fit("toy-gap", "sgd", 1, threads=0)
    finally:
        torch.set_num_threads(1)


def test_seeds_and_tasks_take_several_values_as_sweep_does(tmp_path, run_cli):
    code, out, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "diabetes-gap", "--seed", "0",
                             "1", "--out", tmp_path, "--quiet")
    assert code == 0, err
    assert len(list(tmp_path.rglob("result.json"))) == 4


def test_the_quick_start_run_again_shows_the_finished_run_instead_of_failing(tmp_path, run_cli):
    args = ("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")
    assert run_cli(*args)[0] == 0
    (record,) = tmp_path.rglob("result.json")
    before = record.read_bytes()
    code, out, err = run_cli(*args)
    assert code == 0 and "finished earlier with the same settings" in out and "toy-gap" in out, err
    assert record.read_bytes() == before, "not trained again"
    code, _, err = run_cli(*args, "--set", "lr=0.02")
    assert code == 2 and "another configuration" in err and "pass --force to replace it" in err, err
    assert "force=True" not in err, "the command line's words, not the API's"


def test_an_unknown_option_points_to_its_subcommand_s_help(run_cli):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--bogus")
    assert code == 2 and "see `python -m bench run --help`" in err
    code, _, err = run_cli("leaderboard", "--bogus")
    assert code == 2 and "see `python -m bench leaderboard --help`" in err


def _parsers(parser, path=()):
    """(subcommand path, parser) for every (sub)subcommand of the command line, ``reference generate`` included."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))
    if path:
        yield path, parser


def test_every_list_valued_option_takes_several_values_after_one_flag_and_accumulates_repeats():
    """One grammar: an option that takes several values (``nargs='+'``) extends its list on a repeat instead of
    replacing it (``check --methods sgd --methods de`` kept only de) or refusing a second value (``append``)."""
    import argparse

    from bench.cli import build_parser

    options = [(" ".join(path), action) for path, parser in _parsers(build_parser()) for action in parser._actions
               if action.option_strings and (action.nargs == "+" or isinstance(action, argparse._AppendAction))]
    assert len(options) >= 15  # run x3, sweep x5, fetch --task, methods --method, leaderboard x2, check x4
    assert [(command, action.option_strings) for command, action in options
            if not (isinstance(action, argparse._ExtendAction) and action.nargs == "+")] == []


def test_every_threads_help_that_promises_exact_reproduction_names_the_cpu_kind_too():
    """Equal threads alone do not reproduce a seeded run: the CPU kind, the library versions and the device decide
    its round-off as well (``bench.runner.NUMERICS``), so a ``--threads`` help that promises an exact or bitwise
    result says so."""
    from bench.cli import build_parser

    helps = {" ".join(path): action.help for path, parser in _parsers(build_parser()) for action in parser._actions
             if "--threads" in action.option_strings}
    promising = {command: help for command, help in helps.items()
                 if any(word in help for word in ("exact", "bitwise", "reproduc"))}
    assert {"run", "sweep", "submit", "verify", "check"} <= promising.keys(), helps
    assert {command: help for command, help in promising.items()
            if not all(part in help for part in ("CPU kind", "versions", "device"))} == {}


@pytest.mark.parametrize("argv, dest, expected", [
    (["run", "--method", "sgd", "--budget", "1", "--task", "toy-gap", "digits", "--task", "toy-gap"], "task",
     ["toy-gap", "digits", "toy-gap"]),
    (["run", "--method", "sgd", "--budget", "1", "--set", "lr=0.01", "min_lr=0.001", "--set", "beta1=0.8"],
     "overrides", [("lr", "0.01"), ("min_lr", "0.001"), ("beta1", "0.8")]),
    (["sweep", "--method", "sgd", "de", "--method", "ae", "--budget", "1", "--set", "lr=0.01", "lr=0.02"],
     "methods", ["sgd", "de", "ae"]),
    (["sweep", "--method", "sgd", "--budget", "1", "--set", "lr=0.01", "lr=0.02", "--set", "batch_size=8"],
     "overrides", [("lr", "0.01"), ("lr", "0.02"), ("batch_size", "8")]),
    (["fetch", "--task", "dermamnist", "cifar10", "--task", "imdb"], "task", ["dermamnist", "cifar10", "imdb"]),
    (["methods", "--method", "sgd", "de", "--method", "ae"], "methods", ["sgd", "de", "ae"]),
    (["check", "--baseline", "b.json", "--methods", "sgd", "--methods", "de"], "methods", ["sgd", "de"]),
    (["check", "--baseline", "b.json", "--method", "sgd", "de", "--methods", "ae"], "methods", ["sgd", "de", "ae"]),
    (["check", "--baseline", "b.json", "--update", "--budget", "sgd=10", "de=20", "--budget", "ae=30"], "budget",
     ["sgd=10", "de=20", "ae=30"]),
    (["check", "--baseline", "b.json", "--update", "--set", "lr=0.01", "de.members=3", "--set", "sgd.lr=0.1"],
     "settings", ["lr=0.01", "de.members=3", "sgd.lr=0.1"]),
])
def test_list_options_take_values_after_one_flag_and_from_repeats(argv, dest, expected):
    from bench.cli import build_parser

    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_several_settings_after_one_set_reach_the_run_and_a_setting_given_twice_is_refused(tmp_path, run_cli):
    from bench import records

    args = ("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--quiet", "--out", tmp_path)
    code, _, err = run_cli(*args, "--set", "lr=0.02", "min_lr=0.001", "--set", "beta1=0.8")
    assert code == 0, err
    config = records.read_result(records.run_folder(tmp_path, "toy-gap", "sgd", 1, 0))["config"]
    assert (config["lr"], config["min_lr"], config["beta1"]) == (0.02, 0.001, 0.8)
    for twice in (("--set", "lr=0.1", "lr=0.2"), ("--set", "lr=0.1", "--set", "lr=0.2")):
        code, _, err = run_cli(*args[:-1], tmp_path / "twice", *twice)
        assert code == 2 and "--set lr given more than once" in err and err.count("\n") == 1, err
    assert not (tmp_path / "twice").exists()


def test_methods_and_fetch_take_several_names_after_one_flag(run_cli):
    code, out, err = run_cli("methods", "--method", "sgd", "de")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines() if line.startswith(("sgd ", "de "))] == ["sgd", "de"] * 2
    code, _, err = run_cli("fetch", "--task", "nope", "cifar10", "--task", "other")  # refused before downloading
    assert code == 2 and "not a competition task: nope, other;" in err and err.count("\n") == 1


def test_a_sweep_takes_a_setting_s_values_after_one_set(tmp_path, run_cli):
    code, out, err = run_cli("sweep", "--method", "sgd", "--task", "toy-gap", "--budget", "1", "--quiet", "--out",
                             tmp_path, "--set", "lr=0.01", "lr=0.02")
    assert code == 0, err
    assert sorted(p.parts[len(tmp_path.parts)] for p in tmp_path.rglob("result.json")) == ["lr=0.01", "lr=0.02"]


def test_every_subcommand_s_errors_point_to_its_own_help(run_cli):
    """Nested ones too: `reference generate` pointed to the top-level help for a missing option and to
    `reference --help` for an unknown one."""
    from bench.cli import build_parser

    paths = [path for path, _ in _parsers(build_parser())]
    assert ("reference", "generate") in paths
    for path in paths:
        code, _, err = run_cli(*path, "--bogus")
        assert code == 2 and err.count("\n") == 1, (path, err)
        assert f"(see `python -m bench {' '.join(path)} --help`)" in err, (path, err)
    code, _, err = run_cli("reference", "generate")
    assert code == 2 and err == ("error: the following arguments are required: --task "
                                 "(see `python -m bench reference generate --help`)\n")
    code, _, err = run_cli("reference", "generate", "--task", "toy-gap", "--bogus")  # found after parsing
    assert code == 2 and err == "error: unrecognized arguments: --bogus (see `python -m bench reference generate --help`)\n"
    code, _, err = run_cli("reference")
    assert code == 2 and "required: {generate,diagnose} (see `python -m bench reference --help`)" in err



def test_verify_and_submit_verify_take_threads_within_the_usable_cores(tmp_path, run_cli):
    from bench.executors import usable_cores

    too_many = str(usable_cores() + 1)
    for command in (("verify", tmp_path), ("submit", tmp_path, "--verify", "--db", tmp_path / "db.sqlite")):
        code, _, err = run_cli(*command, "--threads", too_many)
        assert code == 2 and f"--threads {too_many} is more than" in err and err.count("\n") == 1, err
    code, _, err = run_cli("submit", tmp_path, "--threads", "1", "--db", tmp_path / "db.sqlite")
    assert code == 2 and "add --verify" in err and err.count("\n") == 1
    assert not (tmp_path / "db.sqlite").exists()


def test_the_command_line_starts_without_importing_scikit_learn_or_scipy_stats():
    """Every command, a one-line error included, would pay their import (seconds: the CLI took 6.5 s to list one
    method's settings instead of 3.4 s); they are imported where a task's data or a regression score needs them."""
    heavy = ("sklearn", "scipy.stats", "scipy.ndimage")
    code = ("import sys, bench.cli, bench.metrics, bench.tasks, approximators, bench.runner; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _every_parser(parser):
    """Every parser of the command line: the top one and each (sub)subcommand's."""
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _every_parser(sub)


def test_no_option_of_any_command_is_taken_by_an_abbreviation(run_cli, tmp_path):
    """An abbreviation could mean another option than the one typed: `check --seed 1` was `--seeds 1` (a count, not a
    seed) and `--quie` was `--quiet`. Every parser of the command line refuses abbreviations."""
    from bench.cli import build_parser

    parsers = list(_every_parser(build_parser()))
    assert len(parsers) > 10 and all(parser.allow_abbrev is False for parser in parsers)
    for command in (("sweep", "--method", "sgd", "--budget", "1", "--work", "2", "--out", tmp_path),
                    ("leaderboard", "--form", "csv"), ("reference", "diagnose", "--tas", "toy-gap")):
        code, _, err = run_cli(*command)
        assert code == 2 and "unrecognized arguments" in err, command


def test_an_unknown_option_names_its_sibling(run_cli):
    code, _, err = run_cli("check", "--seed", "1", "--baseline", "b.json")
    assert code == 2 and err.count("\n") == 1 and "did you mean --seeds?" in err
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--quie")
    assert code == 2 and "did you mean --quiet?" in err


def test_version_prints_the_version_every_record_names(run_cli):
    import bench

    code, out, _ = run_cli("--version")
    assert code == 0 and out.strip() == f"bdl-bench {bench.__version__}"


@pytest.mark.parametrize("args, message", [
    (["--method", "sgd", "--budget", "1_0"], "not a number written in digits: '1_0'"),
    (["--method", "sgd", "--budget", " 10"], "not a number written in digits"),
    (["--method", "sgd", "--budget", "10", "--seed", "\u0663"], "not a whole number written in digits"),
    (["--method", "sgd", "--budget", "10", "--seed", "1_0"], "not a whole number written in digits"),
    (["sweep", "--method", "sgd", "--budget", "1", "--workers", " 2"], "not a whole number written in digits"),
    (["check", "--baseline", "b.json", "--tolerance", "nan"], "not a number written in digits"),
    (["check", "--update", "--baseline", "b.json", "--budget", "sgd=1_0"], "the epochs in digits"),
    (["--method", "sgd", "--budget", "1", "--set", "lr=1_0"], "expected a value of type float"),
    (["--method", "sgd", "--budget", "1", "--set", "batch_size= 8"], "expected a value of type int"),
])
def test_numbers_are_typed_in_digits(args, message, tmp_path, run_cli):
    """Python's int and float take spaces, underscores and other scripts' digits: `--seed ' 1'` and `1_0` were
    accepted as seeds and budgets."""
    code, _, err = run_cli(*args, *(["--out", tmp_path] if args[0] != "check" else []))
    assert code == 2 and message in err and err.count("\n") == 1, err
