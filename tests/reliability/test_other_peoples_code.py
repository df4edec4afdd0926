"""A user's method is someone else's code: whatever it raises, or a ``sys.exit`` it calls, at import or in its
settings, footprint, fit, predictive, report or network change, is one line naming the method and what it raised,
exit 4, never "a bug in bdl-bench"; ``--debug`` shows its traceback; a sweep records the run as failed and goes on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import records
from bench.errors import EXIT_ENVIRONMENT, EXIT_METHOD, MethodFailed
from tests.reliability.test_error_boundary import assert_one_line

pytestmark = pytest.mark.usefixtures("plugins_in_process")  # the isolation itself: test_isolation.py

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

    class OwnBaseException(BaseException):
        pass

    class RaisesGeneratorExit(Faulty):
        name = "raises-generator-exit"
        def fit(self, problem, data, generator):
            raise GeneratorExit("closed")

    class RaisesOwnBaseException(Faulty):
        name = "raises-own-base-exception"
        def predictive(self):
            raise OwnBaseException("its own")

    class UnprintableError(Exception):
        def __str__(self):
            raise ValueError("cannot say")

    class RaisesUnprintable(Faulty):
        name = "raises-unprintable"
        def fit(self, problem, data, generator):
            raise UnprintableError()

    class LooksBuiltIn(Faulty):
        name = "looks-built-in"
        def fit(self, problem, data, generator):
            raise ValueError("a plugin's bug")
    LooksBuiltIn.__module__ = "approximators.map"

    class MissingFile(Faulty):
        name = "missing-file"
        def fit(self, problem, data, generator):
            open("/nonexistent/bdl-bench-test")

    class Overspends(Faulty):
        name = "overspends"
        def fit(self, problem, data, generator):
            import torch
            while True:
                data.batch(torch.arange(problem.n_train))

    class DiskFull(Faulty):
        name = "disk-full"
        def fit(self, problem, data, generator):
            import errno
            raise OSError(errno.ENOSPC, "No space left on device", "/its/own/file")

    class OutOfMemory(Faulty):
        name = "out-of-memory"
        def fit(self, problem, data, generator):
            raise MemoryError

    class MetaTensor(Faulty):
        name = "meta-tensor"
        def predictive(self):
            import torch
            return torch.empty(super().predictive().shape, dtype=torch.float64, device="meta")

    class Generator(Faulty):
        name = "generator"
        def predictive(self):
            return (row for row in super().predictive())

    class NumpyReport(Faulty):
        name = "numpy-report"
        def fit(self, problem, data, generator):
            import numpy as np
            super().fit(problem, data, generator)
            self.report = {"scale": np.float32(1.5), "trace": np.arange(3)}

    class ObjectReport(Faulty):
        name = "object-report"
        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)
            self.report = {"state": object()}

    class CyclicReport(Faulty):
        name = "cyclic-report"
        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)
            self.report = {}
            self.report["self"] = self.report

    class DeepReport(Faulty):
        name = "deep-report"
        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)
            report = inner = {}
            for _ in range(100_000):
                inner["a"] = {}
                inner = inner["a"]
            self.report = report

    class StringTaskDefault(Faulty):
        name = "string-task-default"
        TASK_DEFAULTS = {"toy-gap": {"lr": "fast"}}

    class UnknownTaskDefault(Faulty):
        name = "unknown-task-default"
        TASK_DEFAULTS = {"toy-gap": {"no_such_setting": 1}}

    class ListTaskDefaults(Faulty):
        name = "list-task-defaults"
        TASK_DEFAULTS = [("toy-gap", {"lr": 0.1})]

    class DefaultOutOfBounds(Faulty):
        name = "default-out-of-bounds"
        TASK_DEFAULTS = {"toy-gap": {"lr": -1.0}}

    class EscapingChange(Faulty):
        name = "escaping-change"
        @classmethod
        def architecture_change(cls, config):
            return "dropout\\x1b[31m\\u202e\\nsecond line"

    class ChangesDirectory(Faulty):
        name = "changes-directory"
        def fit(self, problem, data, generator):
            import os
            os.chdir("/")
            super().fit(problem, data, generator)
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


def _printable_line(err: str) -> bool:
    """One line of printable characters only: no terminal escape, bidirectional override or line break inside."""
    return err.endswith("\n") and err[:-1].isprintable()


@pytest.mark.parametrize("cls, code, fragment", [
    ("RaisesGeneratorExit", EXIT_METHOD, "'raises-generator-exit' failed in its fit: GeneratorExit: closed"),
    ("RaisesOwnBaseException", EXIT_METHOD, "'raises-own-base-exception' failed in its predictive: OwnBaseException"),
    ("RaisesUnprintable", EXIT_METHOD, "UnprintableError: <a UnprintableError whose str() raised ValueError>"),
    ("LooksBuiltIn", EXIT_METHOD, "'looks-built-in' failed in its fit: ValueError: a plugin's bug"),
    ("MissingFile", EXIT_METHOD, "'missing-file' failed in its fit: FileNotFoundError"),
    ("DiskFull", EXIT_ENVIRONMENT, "'disk-full' failed in its fit: OSError: [Errno 28]"),
    ("Overspends", EXIT_METHOD, "'overspends' failed in its fit: OverBudget: over budget: 2.000 of 2 epochs"),
    ("OutOfMemory", EXIT_ENVIRONMENT, "'out-of-memory' ran out of memory in its fit"),
    ("MetaTensor", EXIT_METHOD, "'meta-tensor' failed in its predictive: "),
    ("Generator", EXIT_METHOD, "'generator'"),
    ("NumpyReport", EXIT_METHOD, "'numpy-report': its report['scale'] is a numpy.float32; a report holds plain JSON"),
    ("ObjectReport", EXIT_METHOD, "'object-report': its report['state'] is a builtins.object"),
    ("CyclicReport", EXIT_METHOD, "'cyclic-report': its report['self']"),
    ("DeepReport", EXIT_METHOD, "nests more than 8 levels"),
    ("StringTaskDefault", EXIT_METHOD, "'string-task-default': TASK_DEFAULTS['toy-gap']['lr'] is 'fast', not a float"),
    ("UnknownTaskDefault", EXIT_METHOD, "TASK_DEFAULTS['toy-gap']['no_such_setting'] is not one of its settings"),
    ("ListTaskDefaults", EXIT_METHOD, "TASK_DEFAULTS must be a dict from task names to dicts of settings, not a list"),
    ("DefaultOutOfBounds", EXIT_METHOD, "lr must lie in (0, inf), got -1.0 (the method's own default on toy-gap"),
    ("EscapingChange", EXIT_METHOD, "architecture_change must be None or 1 to 1000 printable characters"),
])
def test_whatever_a_method_does_wrong_is_its_own_one_line_and_writes_nothing(tmp_path, run_cli, plugins, cls, code,
                                                                             fragment):
    """Kind 1 of issue 28: any exception (GeneratorExit, one of its own BaseExceptions, one whose str() raises), a
    class claiming to be ours by its __module__, a predictive or report of the wrong type, TASK_DEFAULTS of the wrong
    type: never "a bug in bdl-bench", and nothing written (no run folder: refused before it is claimed, or never
    finished)."""
    exit_code, _, err = run_cli("--method", f"faulty_methods:{cls}", "--budget", "2", "--task", "toy-gap", "--out",
                                tmp_path / "runs", "--quiet")
    assert_one_line(exit_code, err, code, fragment)
    assert _printable_line(err) and "bug in bdl-bench" not in err
    assert not list((tmp_path / "runs").rglob("result.json"))


@pytest.mark.parametrize("cls", ["StringTaskDefault", "DefaultOutOfBounds", "EscapingChange"])
def test_what_a_method_declares_is_refused_before_any_folder_is_made(tmp_path, run_cli, plugins, cls):
    """Its own defaults (type, bounds) and the text its record would keep (a network change with escapes, which
    submit refuses) are checked before anything trains or is written."""
    code, _, _ = run_cli("--method", f"faulty_methods:{cls}", "--budget", "2", "--task", "toy-gap", "--out",
                         tmp_path / "runs", "--quiet")
    assert code == EXIT_METHOD and not (tmp_path / "runs").exists()


def test_a_working_directory_the_method_changes_moves_nothing(tmp_path, run_cli, plugins, monkeypatch):
    """Kind 4, case 14: `--out` relative to where the command started is where the result goes, and the command's
    working directory is its own again after the method's call."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("--method", "faulty_methods:ChangesDirectory", "--budget", "2", "--task", "toy-gap",
                           "--out", "relative-runs", "--quiet")
    assert code == 0, err
    assert (records.run_folder(tmp_path / "relative-runs", "toy-gap", "changes-directory", 2, 0) / "result.json").exists()
    assert Path.cwd() == tmp_path


def test_a_built_in_subclass_loaded_by_module_is_someone_else_s(tmp_path, run_cli, plugins):
    """Registration decides, not the class's module: a subclass of a built-in method, even one naming the package
    as its module, is a plugin (exit 4); the registered class itself stays bdl-bench's (exit 70, see above)."""
    from approximators import METHODS
    from approximators.boundary import is_built_in
    from faulty_methods import LooksBuiltIn

    assert not is_built_in(LooksBuiltIn) and all(is_built_in(method) for method in METHODS.values())


# Every BaseException but the interrupt, with any message (escapes, bidirectional overrides, a megabyte), in any
# part of a method: one printable line of bounded length naming the method and the part, exit 4 (3 for memory).
_PARTS = ["settings", "footprint", "fit", "predictive", "report", "architecture_change"]
_ERRORS = st.sampled_from([ValueError, RuntimeError, GeneratorExit, SystemExit, AssertionError, RecursionError,
                           type("ItsOwn", (BaseException,), {}), type("ItsOwnError", (Exception,), {})])
_MESSAGES = st.one_of(st.text(max_size=200), st.text(alphabet="\x1b\x07\u202e\u2028\n\r\t[]0;m", max_size=50),
                      st.integers(1_000, 300_000).map(lambda n: "y" * n))


@settings(max_examples=60, deadline=None)
@given(part=st.sampled_from(_PARTS), error=_ERRORS, message=_MESSAGES)
def test_any_failure_in_any_part_is_one_bounded_printable_line(part, error, message):
    from approximators.boundary import users_code
    from approximators.map import MAP
    from bench.errors import SHOWN_TEXT_CHARS, describe_failure

    plugin = type("Plugin", (MAP,), {"name": "a-plugin", "summary": "raises"})
    with pytest.raises(MethodFailed) as raised:
        with users_code(plugin, part):
            raise error(message)
    code, line = describe_failure(raised.value)
    assert code == EXIT_METHOD
    assert line.isprintable() and len(line) <= SHOWN_TEXT_CHARS
    assert line.startswith(f"method 'a-plugin' {'exited' if error is SystemExit else 'failed'} in its {part}")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C stays the interrupt
        with users_code(plugin, part):
            raise KeyboardInterrupt


_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=20),
                         st.floats(allow_nan=False, allow_infinity=False))
_REPORTS = st.dictionaries(st.text(max_size=10), st.recursive(
    _JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10), max_size=5)
_WRONG = st.sampled_from([float("nan"), float("inf"), 2**64, object(), b"bytes", {1: "int key"}, np.float32(1.0),
                          np.arange(2), {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {}}}}}}}}}])


@settings(max_examples=60, deadline=None)
@given(report=_REPORTS, wrong=_WRONG, key=st.text(max_size=10))
def test_a_report_is_kept_only_as_plain_json_values(report, wrong, key):
    """Kind 1/4: a report of plain JSON values is kept as it is; one wrong value anywhere in it (numpy, objects,
    NaN, integers beyond 64 bits, keys that are not strings, nesting past the limit) is the method's failure."""
    from approximators.map import MAP
    from bench.runner import check_report

    plugin = type("Plugin", (MAP,), {"name": "a-plugin", "summary": "reports"})
    assert check_report(plugin, report) == report
    with pytest.raises(MethodFailed, match="method 'a-plugin': its report"):
        check_report(plugin, {**report, key: [wrong]})
    with pytest.raises(RuntimeError):  # a built-in method reporting so: bdl-bench's bug (exit 70)
        check_report(MAP, {**report, key: [wrong]})
