"""A user's method is someone else's code: whatever it raises, or a ``sys.exit`` it calls, at import or in its
settings, footprint, fit, predictive, report or network change, is one line naming the method and what it raised,
exit 4, never "a bug in bdl-bench"; ``--debug`` shows its traceback; a sweep records the run as failed and goes on."""

from __future__ import annotations

import textwrap

import pytest

from bench import records
from bench.errors import EXIT_METHOD
from tests.reliability.test_error_boundary import assert_one_line

MODULE = textwrap.dedent('''
    import sys
    from dataclasses import dataclass
    from typing import ClassVar

    from approximators.map import MAP, MAPConfig

    class Faulty(MAP):
        summary = "fails where its name says"

    class FailsInFit(Faulty):
        name = "fails-in-fit"
        def fit(self, problem, data, generator):
            raise ValueError("the plugin's own bug")

    class ExitsInFit(Faulty):
        name = "exits-in-fit"
        def fit(self, problem, data, generator):
            sys.exit(0)

    class FailsInPredictive(Faulty):
        name = "fails-in-predictive"
        def predictive(self):
            raise KeyError("probs")

    class FailsInFootprint(Faulty):
        name = "fails-in-footprint"
        def footprint(self, budget, n_train):
            return 1 / 0

    class FailsInReport(Faulty):
        name = "fails-in-report"
        @property
        def report(self):
            raise RuntimeError("no report")
        @report.setter
        def report(self, value):
            pass

    class FailsInArchitectureChange(Faulty):
        name = "fails-in-architecture-change"
        @classmethod
        def architecture_change(cls, config):
            raise TypeError("bad change")

    class TenSamples(Faulty):
        name = "ten-samples"
        def predictive(self):
            return super().predictive()[:, :10]

    class ComplexPredictive(Faulty):
        name = "complex-predictive"
        def predictive(self):
            return super().predictive() + 1j

    class NotProbabilities(Faulty):
        name = "not-probabilities"
        def predictive(self):
            return super().predictive() * 2

    class HugeReport(Faulty):
        name = "huge-report"
        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)
            self.report = {"state": [0.123456789] * 200_000}

    class Parent(Faulty):
        name = ".."

    class Hidden(Faulty):
        name = ".hidden"

    @dataclass(frozen=True)
    class RefusingConfig(MAPConfig):
        def __post_init__(self):
            raise AssertionError("config refused")

    class FailsInSettings(Faulty):
        name = "fails-in-settings"
        Config = RefusingConfig

    @dataclass(frozen=True)
    class BadBoundsConfig(MAPConfig):
        BOUNDS: ClassVar[dict] = {"lr": "between 0 and 1"}

    class BadBounds(Faulty):
        name = "bad-bounds"
        Config = BadBoundsConfig
''')


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "faulty_methods.py").write_text(MODULE)
    (site / "exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
    (site / "needs_a_missing_package.py").write_text("import no_such_dependency_anywhere\n")
    monkeypatch.syspath_prepend(str(site))


@pytest.mark.parametrize("cls, fragment", [
    ("FailsInFit", "'fails-in-fit' failed in its fit: ValueError: the plugin's own bug"),
    ("ExitsInFit", "'exits-in-fit' exited in its fit (sys.exit(0))"),
    ("FailsInPredictive", "'fails-in-predictive' failed in its predictive: KeyError"),
    ("FailsInFootprint", "'fails-in-footprint' failed in its footprint: ZeroDivisionError"),
    ("FailsInReport", "'fails-in-report' failed in its report: RuntimeError: no report"),
    ("FailsInArchitectureChange", "'fails-in-architecture-change' failed in its architecture_change: TypeError"),
    ("FailsInSettings", "'fails-in-settings' failed in its settings: AssertionError: config refused"),
    ("BadBounds", "'bad-bounds' failed in its settings: ValueError: not an interval"),
])
def test_a_failure_in_the_method_s_own_code_is_its_own_one_line(tmp_path, run_cli, plugins, cls, fragment):
    code, _, err = run_cli("--method", f"faulty_methods:{cls}", "--budget", "2", "--task", "toy-gap", "--out",
                           tmp_path / "runs", "--quiet")
    assert_one_line(code, err, EXIT_METHOD, fragment)
    assert "bug in bdl-bench" not in err
    assert not list((tmp_path / "runs").rglob("result.json"))


@pytest.mark.parametrize("spec, fragment", [
    ("exits_at_import:Anything", "importing exits_at_import exited (sys.exit(3))"),
    ("needs_a_missing_package:Anything", "importing needs_a_missing_package failed (ModuleNotFoundError"),
])
def test_a_module_failing_at_import_is_its_own_one_line(tmp_path, run_cli, plugins, spec, fragment):
    code, _, err = run_cli("--method", spec, "--budget", "2", "--task", "toy-gap", "--out", tmp_path / "runs")
    assert_one_line(code, err, EXIT_METHOD, fragment)


def test_debug_shows_the_method_s_own_traceback(tmp_path, run_cli, plugins):
    with pytest.raises(Exception) as raised:
        run_cli("--method", "faulty_methods:FailsInFit", "--budget", "2", "--task", "toy-gap", "--out", tmp_path,
                "--debug")
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_sweep_records_a_failing_method_s_runs_and_finishes_the_others(tmp_path, run_cli, plugins):
    code, out, err = run_cli("sweep", "--method", "faulty_methods:ExitsInFit", "--method", "sgd", "--task", "toy-gap",
                             "--budget", "2", "--seed", "0", "1", "--out", tmp_path / "runs", "--quiet")
    assert code == EXIT_METHOD, (out, err)
    assert "exited in its fit" in out + err and "2 of 4 runs failed" in out + err
    for seed in (0, 1):
        assert records.read_result(records.run_folder(tmp_path / "runs", "toy-gap", "sgd", 2, seed))["epochs_used"] == 2
        assert not (records.run_folder(tmp_path / "runs", "toy-gap", "exits-in-fit", 2, seed) / "result.json").exists()


def test_a_built_in_method_s_failure_stays_a_bdl_bench_bug(tmp_path, run_cli, monkeypatch):
    from approximators.map import MAP

    monkeypatch.setattr(MAP, "fit", lambda self, problem, data, generator: 1 / 0)
    code, _, err = run_cli("--method", "sgd", "--budget", "2", "--task", "toy-gap", "--out", tmp_path, "--quiet")
    assert code == 70 and "bug in bdl-bench" in err


@pytest.mark.parametrize("cls, task, fragment", [
    ("TenSamples", "toy-gap", "toy-gap needs samples of shape (121, 1000)"),
    ("ComplexPredictive", "toy-gap", "expected real numbers, got dtype complex128"),
    ("NotProbabilities", "digits", "rows must sum to 1"),
    ("HugeReport", "toy-gap", "more than the 1,048,576 a result record keeps"),
])
def test_a_predictive_or_report_submit_would_refuse_is_never_written(tmp_path, run_cli, plugins, cls, task, fragment):
    code, _, err = run_cli("--method", f"faulty_methods:{cls}", "--budget", "2", "--task", task, "--out",
                           tmp_path / "runs", "--quiet")
    assert_one_line(code, err, EXIT_METHOD, fragment)
    assert not list((tmp_path / "runs").rglob("result.json")) and not list((tmp_path / "runs").rglob("*.npz"))


@pytest.mark.parametrize("cls", ["Parent", "Hidden"])
def test_a_method_name_that_is_not_a_folder_name_is_refused(tmp_path, run_cli, plugins, cls):
    code, _, err = run_cli("--method", f"faulty_methods:{cls}", "--budget", "2", "--task", "toy-gap", "--out",
                           tmp_path / "runs", "--quiet")
    assert_one_line(code, err, 2, "the method's name must be 1 to 100 letters, digits")
    assert not (tmp_path / "runs").exists()
