"""Methods from outside the repository: ``--method package.module:ClassName`` and the ``bdl_bench.methods``
entry point group of an installed package (here a distribution written on sys.path, as pip would leave it)."""

from __future__ import annotations

import json
import textwrap

import pytest

from approximators import ENTRY_POINT_GROUP, METHODS, get_method
from bench import records
from bench.errors import EXIT_BAD_INPUT, EXIT_METHOD, ConfigError
from tests.reliability.test_error_boundary import assert_one_line

pytestmark = pytest.mark.usefixtures("plugins_in_process")  # the isolation itself: test_isolation.py

MODULE = textwrap.dedent('''
    from approximators.map import DeepEnsemble

    class Twins(DeepEnsemble):
        """Two MAP networks: a method that is not one of bdl-bench's, to load from outside."""
        name = "twins"
        summary = "two MAP networks"

        def n_members(self):
            return 2

    class Impostor(DeepEnsemble):
        name = "de"
        summary = "claims a built-in name"

    def not_a_class():
        pass
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """An installed package ``twins_plugin`` registering ``twins`` (and any ``extra`` entry points)."""
    def install(extra: str = "") -> None:
        site = tmp_path / "site"
        (site / "twins_plugin").mkdir(parents=True)
        (site / "twins_plugin" / "__init__.py").write_text(MODULE)
        (site / "broken_plugin.py").write_text("raise RuntimeError('broken at import')\n")
        info = site / "twins_plugin-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: twins-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntwins = twins_plugin:Twins\n{extra}")
        monkeypatch.syspath_prepend(str(site))
    return install


def test_a_class_named_by_module_runs_and_its_record_says_where_it_came_from(tmp_path, run_cli, plugin):
    plugin()
    code, _, err = run_cli("--method", "twins_plugin:Twins", "--budget", "2", "--task", "toy-gap", "--out",
                           tmp_path / "runs", "--quiet")
    assert code == 0, err
    result = records.read_result(records.run_folder(tmp_path / "runs", "toy-gap", "twins", 2, 0))
    assert (result["method"], result["method_source"]) == ("twins", "twins_plugin:Twins")
    assert result["epochs_used"] == 2


def test_an_installed_entry_point_runs_by_name_and_is_listed(tmp_path, run_cli, plugin):
    plugin()
    code, _, err = run_cli("--method", "twins", "--budget", "2", "--task", "toy-gap", "--out", tmp_path / "runs",
                           "--quiet")
    assert code == 0, err
    code, out, _ = run_cli("methods")
    assert code == 0 and "twins" in out and "plugin twins_plugin:Twins" in out


def test_a_built_in_run_records_no_source(tmp_path, run_cli):
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")[0] == 0
    result = json.loads((records.run_folder(tmp_path, "toy-gap", "sgd", 1, 0) / records.RESULT).read_text())
    assert result["method_source"] is None


@pytest.mark.parametrize("spec, message", [
    ("no_such_package.module:Method", "cannot import no_such_package.module"),
    ("twins_plugin:Missing", "twins_plugin has no Missing"),
    ("twins_plugin:not_a_class", "is not a subclass of approximators.Approximator"),
    ("twins_plugin:Impostor", "its name 'de' is a built-in method's"),
    ("twins_plugin:", "package.module:ClassName"),
    ("nosuch", "unknown method 'nosuch'"),
])
def test_a_method_that_cannot_be_loaded_is_one_line(tmp_path, run_cli, plugin, spec, message):
    plugin()
    code, _, err = run_cli("--method", spec, "--budget", "2", "--task", "toy-gap", "--out", tmp_path / "runs")
    assert_one_line(code, err, EXIT_BAD_INPUT, message)
    assert not (tmp_path / "runs").exists()


def test_a_module_broken_at_import_is_the_module_s_failure(tmp_path, run_cli, plugin):
    plugin()
    code, _, err = run_cli("--method", "broken_plugin:Anything", "--budget", "2", "--task", "toy-gap", "--out",
                           tmp_path / "runs")
    assert_one_line(code, err, EXIT_METHOD, "importing broken_plugin failed (RuntimeError: broken at import)")
    assert not (tmp_path / "runs").exists()


def test_an_entry_point_must_load_the_method_it_names(plugin):
    plugin("other = twins_plugin:Twins\nde = twins_plugin:Impostor\n")
    with pytest.raises(ConfigError, match="entry point 'other' loads twins_plugin:Twins, whose name is 'twins'"):
        get_method("other")
    assert get_method("de") is METHODS["de"]  # a built-in name is never taken over by a plugin


def test_a_broken_plugin_is_listed_without_hiding_the_others(run_cli, plugin):
    plugin("broken = broken_plugin:Method\n")
    code, out, _ = run_cli("methods")
    assert code == 0 and "cannot be loaded" in out and "two MAP networks" in out


def test_verify_re_executes_a_module_method_only_when_named(tmp_path, run_cli, monkeypatch):
    """A module that no installed package registers: the record names it, but only the caller may import it."""
    (tmp_path / "loose_methods.py").write_text(MODULE + "\nclass Triplets(Twins):\n    name = 'triplets'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs"
    assert run_cli("--method", "loose_methods:Twins", "--budget", "2", "--task", "toy-gap", "--out", out,
                   "--quiet")[0] == 0
    folder = records.run_folder(out, "toy-gap", "twins", 2, 0)
    code, _, err = run_cli("verify", folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, "pass --method loose_methods:Twins")
    code, _, err = run_cli("verify", folder, "--method", "loose_methods:Triplets")
    assert code != 0 and "a run of 'twins'" in err  # only the named method, never another one
    code, out_text, err = run_cli("verify", folder, "--method", "loose_methods:Twins")
    assert code == 0, err
    assert "verified (bitwise, 1 torch thread)" in out_text


def test_methods_lists_one_module_method_with_its_task_settings(run_cli, plugin):
    plugin()
    code, out, err = run_cli("methods", "--method", "twins_plugin:Twins", "--task", "digits")
    assert code == 0, err
    assert "twins_plugin:Twins" in out and "batch_size=64*" in out and "sgd " not in out


def test_submit_verifies_a_module_method_only_with_the_method_named(tmp_path, run_cli, monkeypatch):
    (tmp_path / "loose_methods.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    out, db = tmp_path / "runs", tmp_path / "board.sqlite"
    assert run_cli("--method", "loose_methods:Twins", "--budget", "2", "--task", "toy-gap", "--out", out,
                   "--quiet")[0] == 0
    code, _, err = run_cli("submit", out, "--db", db, "--verify")
    assert_one_line(code, err, EXIT_BAD_INPUT, "pass --method loose_methods:Twins")
    assert not db.exists()
    code, _, err = run_cli("submit", out, "--db", db, "--method", "loose_methods:Twins")
    assert_one_line(code, err, EXIT_BAD_INPUT, "a run folder records its own method")
    code, text, err = run_cli("submit", out, "--db", db, "--verify", "--method", "loose_methods:Twins")
    assert code == 0, err
    assert "1 added" in text


def test_a_setting_of_a_type_set_cannot_parse_is_refused_when_the_method_loads(tmp_path, run_cli):
    from dataclasses import dataclass

    from approximators import resolve_method
    from approximators.map import MAP

    @dataclass(frozen=True)
    class Optional:
        depth: int | None = None

    class WithOptional(MAP):
        name, summary, Config = "with-optional", "a setting typed int | None", Optional

    with pytest.raises(ConfigError, match="setting 'depth' has type int | None, which --set cannot parse"):
        resolve_method(WithOptional)


@pytest.mark.parametrize("setting, message", [("batch_size=" + "9" * 400, "more than a 64-bit count"),
                                              ("batch_size=" + "9" * 5000, "expected a value of type int")])
def test_a_count_beyond_64_bits_is_one_line(tmp_path, run_cli, setting, message):
    code, _, err = run_cli("--method", "sgd", "--budget", "2", "--task", "toy-gap", "--set", setting, "--out", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, message)
    assert len(err) < 300


COST_AND_SETTINGS_CLAIMS = {
    "epochs_used": (lambda record: {"epochs_used": record["epochs_used"] - 1},
                    lambda record: f"epochs_used {record['epochs_used'] - 1:g} recorded, {record['epochs_used']:g} "
                                   "re-executed"),
    "test_passes": (lambda record: {"test_passes": record["test_passes"] + 1},
                    lambda record: f"test_passes {record['test_passes'] + 1:g} recorded, {record['test_passes']:g} "
                                   "re-executed"),
    "architecture_change": (lambda record: {"architecture_change": "relu->tanh"},
                            lambda record: "architecture_change 'relu->tanh' recorded, None re-executed"),
    "resolved": (lambda record: {"resolved": {**record["resolved"], "batch_size": record["resolved"]["batch_size"] + 1}},
                 lambda record: "resolved settings batch_size: "),
}
"""What a record of a method that is not bdl-bench's claims of its run that only its re-execution can check (the
validator cannot plan such a method's cost or settings), each edited alone, and what verify's line says of it."""


def test_verify_compares_every_cost_and_setting_a_module_method_claims_with_its_re_execution(tmp_path, run_cli,
                                                                                           monkeypatch):
    """Each claim alone (verify once ignored test_passes: the tests edited epochs_used only) is NOT VERIFIED, with a
    line naming it; the unedited record verifies."""
    (tmp_path / "claiming_methods.py").write_text(MODULE)  # a module name no other test imports
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs"
    assert run_cli("--method", "claiming_methods:Twins", "--budget", "2", "--task", "toy-gap", "--out", out,
                   "--quiet")[0] == 0
    folder = records.run_folder(out, "toy-gap", "twins", 2, 0)
    record = json.loads((folder / records.RESULT).read_text())
    for claim, (edit, said) in COST_AND_SETTINGS_CLAIMS.items():
        (folder / records.RESULT).write_text(json.dumps({**record, **edit(record)}))
        code, out_text, err = run_cli("verify", folder, "--method", "claiming_methods:Twins")
        assert code == 1 and "NOT VERIFIED" in out_text and said(record) in out_text, (claim, out_text, err)
    (folder / records.RESULT).write_text(json.dumps(record))
    assert run_cli("verify", folder, "--method", "claiming_methods:Twins")[0] == 0
