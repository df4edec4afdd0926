"""Mid-run checkpoints (bench.checkpoint): every built-in method stopped part-way and run again gives the predictions
of an uninterrupted run bit for bit, with the meter carried over; damaged or foreign checkpoints are refused in one
line; a real SIGTERM through the command line keeps the run's progress."""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from approximators import get_method
from bench import checkpoint, interrupts, records
from bench.budget import BudgetMeter
from bench.errors import DamagedFile, MeterMisuse
from bench.runner import RunSpec, resumable, run

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    # method: (budget, settings) small enough for a second's run on the embedded tasks
    "sgd": (3, ()), "de": (5, ()), "ae": (3, (("epochs", "1"),)),
    "sae": (4, (("first_epochs", "2"), ("sequential_epochs", "1"))),
    "swag": (6, ()), "swag-diag": (6, ()), "multiswag": (18, ()),
    "csgmcmc": (8, (("samples_per_cycle", "1"),)), "sgld": (4, ()), "vogn": (2, ()), "mfvi": (3, ()),
    "mc-dropout": (3, ()), "laplace": (3, ()), "hmc": (150, ()),
}


def _spec(out: Path, task: str, method: str, every: float | None) -> RunSpec:
    budget, settings = SMALL[method]
    return RunSpec(task=task, method=method, budget=budget, out=out, overrides=settings, checkpoint_every=every)


def _steps_of(out: Path, task: str, method: str, monkeypatch) -> tuple[dict, int]:
    """An uninterrupted run's record without checkpoints, and the training steps it took (every engine call and HMC
    iteration), counted in a second run with checkpoints, which must not change a bit of it."""
    whole = run(_spec(out / "whole", task, method, every=None))
    steps = []
    original = checkpoint.Tape.after_step
    monkeypatch.setattr(checkpoint.Tape, "after_step", lambda self, state: (steps.append(1), original(self, state)))
    counted = run(_spec(out / "counted", task, method, every=3600.0))
    monkeypatch.setattr(checkpoint.Tape, "after_step", original)
    assert counted["predictions_sha256"] == whole["predictions_sha256"]
    return whole, len(steps)


def _stopped_then_resumed(spec: RunSpec, stop: int, monkeypatch) -> dict:
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", stop)
    with pytest.raises(checkpoint.Stopped) as stopped:
        run(spec)
    assert stopped.value.path == records.run_folder(spec.out, spec.task, spec.method, spec.budget, 0) / \
        checkpoint.CHECKPOINT and stopped.value.path.exists()
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", None)
    return run(spec)


def test_every_built_in_method_is_resumable():
    from approximators.registry import METHODS

    assert set(SMALL) == set(METHODS)
    assert all(resumable(get_method(name)) for name in SMALL)


@pytest.mark.parametrize("task", ["toy-gap", "digits"])
@pytest.mark.parametrize("method", sorted(SMALL))
def test_a_stopped_run_resumes_bit_for_bit(method, task, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    whole, total = _steps_of(tmp_path, task, method, monkeypatch)
    assert total >= 3
    # early, late, and the last step before the end on the classification task; late alone on the regression one,
    # which holds the suite's time (its samples drawn from each member's predictive are restored the same way)
    stops = {total // 3, 2 * total // 3, total - 1} if task == "digits" else {2 * total // 3}
    for stop in sorted(stops):
        spec = _spec(tmp_path / f"stopped-{stop}", task, method, every=3600.0)
        resumed = _stopped_then_resumed(spec, stop, monkeypatch)
        assert resumed["predictions_sha256"] == whole["predictions_sha256"], (method, task, stop)
        assert resumed["epochs_used"] == whole["epochs_used"] and resumed["test_passes"] == whole["test_passes"]
        assert resumed["method_report"] == whole["method_report"]
        (entry,) = resumed["resumed"]
        assert 0 < entry["from_epochs"] <= whole["epochs_used"] and entry["same_numerics"] is True
        assert not (records.run_folder(spec.out, task, method, spec.budget, 0) / checkpoint.CHECKPOINT).exists()
    assert "resumed" not in whole


def test_a_run_stopped_twice_lists_both_resumes(tmp_path, monkeypatch):
    whole, total = _steps_of(tmp_path, "digits", "sae", monkeypatch)
    spec = _spec(tmp_path / "twice", "digits", "sae", every=3600.0)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", total // 4)
    with pytest.raises(checkpoint.Stopped):
        run(spec)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", total // 2)  # counted from the resume
    with pytest.raises(checkpoint.Stopped):
        run(spec)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", None)
    resumed = run(spec)
    assert resumed["predictions_sha256"] == whole["predictions_sha256"]
    first, second = resumed["resumed"]
    assert 0 < first["from_epochs"] < second["from_epochs"] < whole["epochs_used"]


def test_a_stop_outside_training_keeps_the_last_call_end(tmp_path, monkeypatch):
    """Laplace's curvature pass is no engine call: a stop there writes the end of its MAP training (kept in memory)
    and the resumed run computes the curvature again."""
    from approximators import laplace

    whole = run(_spec(tmp_path / "whole", "digits", "laplace", every=None))
    original, calls = laplace._curvature_epoch, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(laplace, "_curvature_epoch", interrupted)
    spec = _spec(tmp_path / "stopped", "digits", "laplace", every=1.0)
    monkeypatch.setattr(checkpoint, "KEEP_IN_MEMORY_SECONDS", 0.0)
    with pytest.raises(checkpoint.Stopped) as stopped:
        run(spec)
    assert stopped.value.path is not None and checkpoint.kept_on_stop() == stopped.value.path
    resumed = run(spec)
    assert resumed["predictions_sha256"] == whole["predictions_sha256"]
    assert resumed["resumed"][0]["from_epochs"] == pytest.approx(resumed["epochs_used"] - 1.0)  # all but the pass


def test_without_checkpoints_a_stopped_run_keeps_nothing(tmp_path, monkeypatch):
    spec = _spec(tmp_path, "digits", "sgd", every=None)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", 2)
    assert run(spec)["epochs_used"] == 3  # --checkpoint-every off: no tape, so nothing stops and nothing is kept
    assert not list(tmp_path.rglob(checkpoint.CHECKPOINT))


def test_a_damaged_or_foreign_checkpoint_is_refused_and_force_discards_it(tmp_path, monkeypatch):
    spec = _spec(tmp_path, "digits", "sgd", every=3600.0)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", 5)
    with pytest.raises(checkpoint.Stopped) as stopped:
        run(spec)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", None)
    path = stopped.value.path
    kept = path.read_bytes()
    for damaged, says in ((kept[: len(kept) // 2], "cannot be read"), (b"not a checkpoint", "cannot be read")):
        path.write_bytes(damaged)
        with pytest.raises(DamagedFile, match=says):
            run(spec)
    path.write_bytes(kept)
    other = RunSpec(task="digits", method="sgd", budget=3, out=tmp_path, overrides=(("lr", "0.002"),),
                    checkpoint_every=3600.0)
    with pytest.raises(DamagedFile, match="another run .*config"):
        run(other)
    assert run(RunSpec(**{**other.__dict__, "force": True}))["config"]["lr"] == 0.002  # --force starts again
    assert "resumed" not in records.read_result(path.parent)


def test_a_method_that_rewrites_fit_must_say_it_resumes():
    from approximators.map import DeepEnsemble

    class Rewritten(DeepEnsemble):
        name = "rewritten"

        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)

    class Declared(Rewritten):
        resumable = True

        def fit(self, problem, data, generator):
            super().fit(problem, data, generator)

    assert resumable(DeepEnsemble) and not resumable(Rewritten) and resumable(Declared)


def test_the_meter_restores_its_counts_and_never_beyond_the_budget():
    seen = []
    meter = BudgetMeter(2, 10, on_progress=seen.append)
    meter.charge(7)
    meter.record_test_pass(5, 5)
    fresh = BudgetMeter(2, 10, on_progress=seen.append)
    fresh.restore_counts(**meter.counts())
    assert fresh.counts() == meter.counts() and fresh.epochs_used == 0.7 and seen[-1] == 0.7
    with pytest.raises(MeterMisuse):
        fresh.restore_counts(examples=21, test_examples=0, n_test=0)
    fresh.charge(13)
    with pytest.raises(Exception, match="over budget"):
        fresh.charge(1)


def test_a_first_stop_waits_inside_a_step_and_a_second_one_does_not():
    inside = [True]
    with interrupts.deferred(lambda: inside[0]):
        interrupts.on_interrupt(signal.SIGINT, None)  # waits: pending
        assert interrupts.stop_requested()
        with pytest.raises(KeyboardInterrupt):
            interrupts.on_interrupt(signal.SIGINT, None)
    assert not interrupts.stop_requested()
    inside[0] = False
    with interrupts.deferred(lambda: inside[0]), pytest.raises(KeyboardInterrupt):
        interrupts.on_interrupt(signal.SIGINT, None)  # outside a step: at once


@pytest.mark.parametrize("entry", [{"from_epochs": -1, "same_numerics": True}, {"from_epochs": 99, "same_numerics": True},
                                   {"from_epochs": 1, "same_numerics": "yes"}, {"from_epochs": 1},
                                   {"from_epochs": 1, "same_numerics": True, "more": 1}])
def test_the_record_validator_checks_every_resume(entry, tmp_path):
    result = run(_spec(tmp_path, "digits", "sgd", every=None))
    records.check_record({**result, "resumed": [{"from_epochs": 1.0, "same_numerics": True}]}, tmp_path)
    with pytest.raises(DamagedFile, match="resumed"):
        records.check_record({**result, "resumed": [entry]}, tmp_path)
    with pytest.raises(DamagedFile, match="resumed"):  # out of order
        records.check_record({**result, "resumed": [{"from_epochs": 2.0, "same_numerics": True},
                                                   {"from_epochs": 1.0, "same_numerics": True}]}, tmp_path)


def _stopped_through_the_command_line(command: list[str], folders: list[Path], env: dict) -> tuple[int, str]:
    """Runs ``command``, sends it SIGTERM 3 s after every run folder of ``folders`` is locked (its run trains), and
    returns its exit code and standard error; every wait is bounded, and the process is killed if it outlives them."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not all((f / records.LOCK).exists() for f in folders) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=60)
    return process.returncode, err


def test_sigterm_through_the_command_line_keeps_the_run_and_the_same_command_continues(tmp_path, run_cli):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    arguments = ["--method", "swag", "--budget", "400", "--task", "digits", "--out", str(tmp_path), "--quiet"]
    command = [sys.executable, "-m", "bench", *arguments]
    folder = records.run_folder(tmp_path, "digits", "swag", 400, 0)
    code, err = _stopped_through_the_command_line(command, [folder], env)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == (f"error: terminated (SIGTERM); finished runs are complete; the "
                                            f"interrupted one's progress is kept in {folder / checkpoint.CHECKPOINT}: "
                                            "run the same command again to continue it")
    # the same command again, in this process (the stop needs a process of its own, the continuation does not: where
    # a run executes does not change what it reads from its folder), which spares a second start of PyTorch
    code, _, err = run_cli(*arguments)
    assert code == 0, err
    assert "resuming from its checkpoint" in err
    result = records.read_result(folder)
    assert result["resumed"][0]["from_epochs"] > 0 and result["epochs_used"] == 400
    assert not (folder / checkpoint.CHECKPOINT).exists()


def _through_a_file(value):
    """``value``'s captured state written and read back as a checkpoint file is (weights_only)."""
    buffer = io.BytesIO()
    torch.save(checkpoint.capture(value), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_every_kind_of_kept_state_round_trips_through_a_checkpoint_file():
    """What the built-in methods track, changed, captured, written, and restored into a fresh object of its kind."""
    from approximators.base import PredictiveAccumulator, Problem
    from approximators.engine import KeepBest
    from approximators.hmc import EvenlyKept
    from approximators.swag import Moments
    from approximators.updates import NoiseStream
    from bench.runner import metered
    from bench.tasks import get_task

    task = get_task("toy-gap")
    problem, data = metered(task, 2)
    generator = torch.Generator().manual_seed(3)
    torch.randn(5, generator=generator)
    fresh = torch.Generator().manual_seed(0)
    checkpoint.restore(fresh, _through_a_file(generator))
    assert torch.equal(torch.randn(4, generator=fresh), torch.randn(4, generator=generator))

    accumulator = PredictiveAccumulator(problem, 4, torch.Generator().manual_seed(1))
    accumulator.add_outputs(torch.randn(2, problem.x_test.shape[0], 2, dtype=torch.float64))
    other = PredictiveAccumulator(problem, 4, torch.Generator().manual_seed(1))
    checkpoint.restore(other, _through_a_file(accumulator))
    assert other.added == 2 and torch.equal(other._samples[:, :500], accumulator._samples[:, :500])

    keep = KeepBest(None, data, torch.arange(3))
    keep.params, keep.loss = torch.randn(2, 7), torch.randn(2)
    kept = KeepBest(None, data, torch.arange(3))
    checkpoint.restore(kept, _through_a_file(keep))
    assert torch.equal(kept.params, keep.params) and torch.equal(kept.loss, keep.loss)

    moments = Moments.zeros(2, 5, 3, torch.device("cpu"))
    moments.collect(torch.randn(2, 5))
    moments.collect(torch.randn(2, 5))
    restored = Moments.zeros(2, 5, 3, torch.device("cpu"))
    checkpoint.restore(restored, _through_a_file(moments))
    assert restored.count == 2 and all(torch.equal(getattr(restored, n), getattr(moments, n))
                                       for n in ("mean", "sq_mean", "deviations"))

    like = torch.zeros(2, 3)
    noise = NoiseStream([torch.Generator().manual_seed(k) for k in range(2)], like)
    noise.next()
    again = NoiseStream([torch.Generator().manual_seed(9) for k in range(2)], like)
    checkpoint.restore(again, _through_a_file(noise))
    assert all(torch.equal(again.next(), noise.next()) for _ in range(100))  # across the block's refill too

    evenly = EvenlyKept(2)
    for _ in range(5):
        evenly.offer(torch.randn(1, 3) if evenly.wants_next() else None)
    copy = EvenlyKept(2)
    buffer = io.BytesIO()
    torch.save(evenly.state_dict(), buffer)  # hmc keeps it in its sampling call's state, as it is
    buffer.seek(0)
    copy.load_state_dict(torch.load(buffer, weights_only=True))
    assert (copy.stride, copy.offered) == (evenly.stride, evenly.offered)
    assert all(torch.equal(a, b) for a, b in zip(copy.outputs, evenly.outputs, strict=True))


def test_a_sweep_stopped_by_sigterm_keeps_its_workers_runs_and_continues_them(tmp_path):
    """Each worker is stopped by SIGTERM (not killed), so its run writes its checkpoint; the sweep's line counts them."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "bench", "sweep", "--method", "swag", "sgd", "--budget", "2000", "--task",
               "digits", "--workers", "2", "--out", str(tmp_path), "--quiet", "--checkpoint-every", "1h"]
    folders = [records.run_folder(tmp_path, "digits", method, 2000, 0) for method in ("swag", "sgd")]
    code, err = _stopped_through_the_command_line(command, folders, env)
    assert code == 143, err
    assert "2 unfinished run(s) kept their progress" in err.strip().splitlines()[-1]
    assert all((f / checkpoint.CHECKPOINT).exists() for f in folders)



PLUGIN = '''
from approximators.map import DeepEnsemble


class Rewritten(DeepEnsemble):
    name = "rewritten"

    def fit(self, problem, data, generator):
        super().fit(problem, data, generator)


class Declared(Rewritten):
    name = "declared"
    resumable = True

    def fit(self, problem, data, generator):
        super().fit(problem, data, generator)
'''


@pytest.mark.parametrize("name", ["Rewritten", "Declared"])
def test_a_method_of_ones_own_in_its_own_process_resumes_only_when_it_says_so(name, tmp_path):
    (tmp_path / "mine.py").write_text(PLUGIN)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}
    out = tmp_path / "runs"
    command = [sys.executable, "-m", "bench", "--method", f"mine:{name}", "--budget", "2000", "--task", "digits",
               "--out", str(out), "--quiet", "--set", "members=1"]
    folder = records.run_folder(out, "digits", name.lower(), 2000, 0)
    code, err = _stopped_through_the_command_line(command, [folder], env)
    assert code == 143, err
    line = err.strip().splitlines()[-1]
    if name == "Declared":  # its process was stopped by SIGTERM and wrote the checkpoint there
        assert line.endswith(f"progress is kept in {folder / checkpoint.CHECKPOINT}: run the same command again to "
                             "continue it")
    else:
        assert line.endswith("method 'rewritten' keeps no checkpoint (it does not declare resumable = True, "
                             "docs/running.md), so the same command starts it again")
        assert not (folder / checkpoint.CHECKPOINT).exists()


def test_a_stop_while_replaying_keeps_the_checkpoint_it_resumes_from(tmp_path, monkeypatch):
    whole, total = _steps_of(tmp_path, "digits", "sae", monkeypatch)
    spec = _spec(tmp_path / "stopped", "digits", "sae", every=3600.0)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", 2 * total // 3)
    with pytest.raises(checkpoint.Stopped) as stopped:
        run(spec)
    monkeypatch.setattr(checkpoint.Tape, "stop_after_steps", None)
    kept = stopped.value.path.read_bytes()
    original = checkpoint.Tape.enter_call

    def stop_in_a_skipped_call(self):
        saved = original(self)
        if saved is not None and saved.get("skip"):
            interrupts.request_stop()
        return saved

    monkeypatch.setattr(checkpoint.Tape, "enter_call", stop_in_a_skipped_call)
    with pytest.raises(checkpoint.Stopped) as again:
        run(spec)
    assert again.value.path == stopped.value.path and again.value.path.read_bytes() == kept  # nothing written
    monkeypatch.setattr(checkpoint.Tape, "enter_call", original)
    assert run(spec)["predictions_sha256"] == whole["predictions_sha256"]
