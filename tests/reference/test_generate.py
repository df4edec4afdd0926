"""Reference generation: resumable from checkpoints bitwise, independent of worker processes, checkpoints
checked before they are trusted, and the command refusing what it cannot sample in one line."""

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.errors import DamagedFile
from bench.likelihoods import Categorical
from bench.tasks import Task, get_task
from bench.tasks import TestBlock as Block
from bench.tasks.embedded import mlp
from reference import generate as generation
from bench import hmc
from reference.settings import HMCSettings

TIMINGS = ("wall_seconds", "compute_seconds", "workers")


def tiny_task() -> Task:
    """Three classes of 2-D points, an MLP 2-4-3: a reference in well under a second."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    y = torch.arange(3).repeat(10)
    x = centres[y] + torch.randn(30, 2, generator=g)
    x_test = torch.randn(12, 2, generator=g) * 2
    return Task(name="tiny", version=1, description="tiny", x_train=x, y_train=y, x_test=x_test,
                y_test=torch.arange(3).repeat(4), model_factory=lambda: mlp([2, 4, 3]), architecture="MLP 2-4-3",
                likelihood=Categorical(), prior_variance=1.0, settings={},
                test_blocks=(Block("a", 0, 6), Block("b", 6, 12)), n_classes=3)


SETTINGS = HMCSettings(n_chains=4, n_burnin=5, n_samples=8, initial_step_size=0.05, jitter=0.2, seed=3)


def _without_timings(metadata: dict) -> dict:
    return {k: v for k, v in metadata.items() if k not in TIMINGS}


def _interrupt_at(monkeypatch, calls: int):
    """Makes the ``calls``-th HMC iteration from now raise KeyboardInterrupt, as a Ctrl-C or a kill would."""
    real, count = hmc.step, [0]

    def step(*args, **kwargs):
        count[0] += 1
        if count[0] == calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(hmc, "step", step)
    return lambda: monkeypatch.setattr(hmc, "step", real)


@pytest.mark.parametrize("vectorise", [True, False], ids=["vectorised", "chain-by-chain"])
@pytest.mark.parametrize("stop", [0.2, 0.45, 0.9])  # during the first burn-in, near its end, while a later chain samples
def test_a_killed_generation_resumes_to_the_same_bytes(tmp_path, monkeypatch, vectorise, stop):
    task, settings = tiny_task(), dataclasses.replace(SETTINGS, vectorise=vectorise)
    whole = generation.generate(task, settings, progress=False)
    monkeypatch.setattr(generation, "CHECKPOINT_SECONDS", 0.0)
    iterations = (settings.n_burnin + settings.n_samples) * (1 if vectorise else settings.n_chains)
    restore = _interrupt_at(monkeypatch, int(stop * iterations) + 1)
    with pytest.raises(KeyboardInterrupt):
        generation.generate(task, settings, progress=False, checkpoints=tmp_path)
    restore()
    resumed = generation.generate(task, settings, progress=False, checkpoints=tmp_path)
    assert resumed.array.tobytes() == whole.array.tobytes()
    assert _without_timings(resumed.metadata) == _without_timings(whole.metadata)


def test_an_interrupted_generation_resumes_from_its_last_checkpoint_not_the_start(tmp_path, monkeypatch):
    task = tiny_task()
    monkeypatch.setattr(generation, "CHECKPOINT_SECONDS", 0.0)
    restore = _interrupt_at(monkeypatch, 8)
    with pytest.raises(KeyboardInterrupt):
        generation.generate(task, SETTINGS, progress=False, checkpoints=tmp_path)
    restore()
    iterations = []
    real = hmc.step
    monkeypatch.setattr(hmc, "step", lambda *a, **k: (iterations.append(1), real(*a, **k))[1])
    generation.generate(task, SETTINGS, progress=False, checkpoints=tmp_path)
    assert len(iterations) == SETTINGS.n_burnin + SETTINGS.n_samples - 7


def test_a_checkpoint_of_other_settings_is_refused_in_one_line(tmp_path, monkeypatch):
    task = tiny_task()
    monkeypatch.setattr(generation, "CHECKPOINT_SECONDS", 0.0)
    _interrupt_at(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        generation.generate(task, SETTINGS, progress=False, checkpoints=tmp_path)
    with pytest.raises(DamagedFile, match="other settings.*--restart") as error:
        generation.generate(task, dataclasses.replace(SETTINGS, target_accept=0.7), progress=False,
                            checkpoints=tmp_path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("damage", ["truncated", "not a torch file", "a folder"])
def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, damage):
    task = tiny_task()
    path = generation.checkpoint_path(tmp_path, task, list(range(SETTINGS.n_chains)))
    path.parent.mkdir(parents=True)
    if damage == "a folder":
        path.mkdir()
    else:
        generation.generate(task, SETTINGS, progress=False, checkpoints=tmp_path)  # leaves its final checkpoint
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"{not torch}")
    with pytest.raises(DamagedFile, match="--restart") as error:
        generation.generate(task, SETTINGS, progress=False, checkpoints=tmp_path)
    assert "\n" not in str(error.value)


def test_chain_by_chain_gives_each_chain_its_own_draws_whatever_the_grouping():
    """A chain sampled alone draws exactly what it draws beside the others (its seed, its generator)."""
    task = tiny_task()
    settings = dataclasses.replace(SETTINGS, vectorise=False)
    alone = [generation.run_chain_group(task, settings, [c]) for c in range(settings.n_chains)]
    vectorised = generation.run_chain_group(task, dataclasses.replace(settings, vectorise=True),
                                            list(range(settings.n_chains)))
    for c, run in enumerate(alone):
        torch.testing.assert_close(run.draws[0], vectorised.draws[c], atol=1e-6, rtol=0)


def test_workers_do_not_change_a_single_bit():
    settings = HMCSettings(n_chains=2, n_burnin=3, n_samples=4, vectorise=False, seed=1)
    task = get_task("toy-gap")
    one = generation.generate(task, settings, progress=False, workers=1)
    two = generation.generate(task, settings, progress=False, workers=2)
    assert one.array.tobytes() == two.array.tobytes()
    assert _without_timings(one.metadata) == _without_timings(two.metadata)
    assert (one.metadata["workers"], two.metadata["workers"]) == (1, 2)


def test_more_workers_than_chain_groups_start_as_many_workers_as_groups():
    """The workers are the fewer of those asked for and the chain groups: vectorised chains are one group, so 3
    workers asked run it here in this process, bitwise as one worker, and the record says 1."""
    settings = HMCSettings(n_chains=2, n_burnin=3, n_samples=4, vectorise=True, seed=1)
    task = get_task("toy-gap")
    one = generation.generate(task, settings, progress=False, workers=1)
    asked_three = generation.generate(task, settings, progress=False, workers=3)
    assert asked_three.metadata["workers"] == 1
    assert one.array.tobytes() == asked_three.array.tobytes()


def test_gradient_evaluations_count_what_each_integrator_computes():
    task = tiny_task()
    vectorised = generation.generate(task, SETTINGS, progress=False)
    alone = generation.generate(task, dataclasses.replace(SETTINGS, vectorise=False), progress=False)
    steps = np.array(alone.metadata["leapfrog_steps"]) * SETTINGS.n_samples  # kept iterations only
    assert alone.metadata["gradient_evaluations"] < vectorised.metadata["gradient_evaluations"]
    assert alone.metadata["gradient_evaluations"] >= steps.sum()


def test_reference_generate_refuses_a_task_it_cannot_sample(run_cli, tmp_path):
    code, _, err = run_cli("reference", "generate", "--task", "uci-gap", "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "official" in err, err


def test_an_existing_reference_is_not_replaced_without_force(run_cli, tmp_path):
    (tmp_path / "toy-gap.npz").write_bytes(b"an earlier generation")
    code, _, err = run_cli("reference", "generate", "--task", "toy-gap", "--out", tmp_path,
                           "--checkpoints", tmp_path / "ck")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--force" in err, err
    assert (tmp_path / "toy-gap.npz").read_bytes() == b"an earlier generation"


@pytest.mark.parametrize("where", ["out", "checkpoints"])
def test_an_unwritable_folder_is_refused_before_any_sampling(run_cli, tmp_path, where, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    sampled = []
    monkeypatch.setattr(generation, "generate", lambda *a, **k: sampled.append(1))
    folders = {"out": tmp_path / "out", "checkpoints": tmp_path / "ck", where: blocker / "below"}
    code, _, err = run_cli("reference", "generate", "--task", "toy-gap", "--out", folders["out"],
                           "--checkpoints", folders["checkpoints"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot write" in err, err
    assert not sampled


def test_checkpoints_put_in_the_folder_itself_are_not_passed_over(run_cli, tmp_path, monkeypatch):
    """A task's chains are kept in DIR/TASK/; ones moved into DIR itself would be ignored and hours sampled again,
    so the command refuses in one line, unless the task's folder has its own or --restart says to sample anew."""
    sampled = []
    monkeypatch.setattr(generation, "generate", lambda *a, **k: sampled.append(1) or sys.exit(0))
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "chains-0-0.pt").write_bytes(b"a finished chain")
    args = ("reference", "generate", "--task", "toy-gap", "--out", tmp_path / "out", "--checkpoints", tmp_path / "ck")
    code, _, err = run_cli(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"move them into {tmp_path / 'ck' / 'toy-gap'} to continue them" in err and not sampled
    assert run_cli(*args, "--restart")[0] == 0 and sampled == [1]
    (tmp_path / "ck" / "toy-gap").mkdir(exist_ok=True)
    (tmp_path / "ck" / "toy-gap" / "chains-0-7.pt").write_bytes(b"its own")
    assert run_cli(*args)[0] == 0 and sampled == [1, 1]


def test_a_second_generation_of_a_task_is_refused_while_one_runs(run_cli, tmp_path):
    with generation.claimed_checkpoints(tmp_path / "ck" / "toy-gap"):
        code, _, err = run_cli("reference", "generate", "--task", "toy-gap", "--out", tmp_path / "out",
                               "--checkpoints", tmp_path / "ck")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "in use" in err, err


def test_checkpoints_outlive_a_failure_and_go_once_the_reference_is_written(tmp_path):
    folder = tmp_path / "ck" / "tiny"
    with pytest.raises(RuntimeError):
        with generation.claimed_checkpoints(folder):
            (folder / "chains-0-3.pt").write_bytes(b"progress")
            raise RuntimeError("the write failed")
    assert (folder / "chains-0-3.pt").exists()
    with generation.claimed_checkpoints(folder):
        pass
    assert not (folder / "chains-0-3.pt").exists()


@pytest.mark.parametrize("vectorise", [True, False], ids=["vectorised", "chain-by-chain"])
def test_a_finished_generation_extends_to_more_samples_bitwise(tmp_path, vectorise):
    """Raising n_samples continues the finished chains: the result is the longer run's, bit for bit."""
    task = tiny_task()
    short = dataclasses.replace(SETTINGS, vectorise=vectorise)
    longer = dataclasses.replace(short, n_samples=short.n_samples + 5)
    generation.generate(task, short, progress=False, checkpoints=tmp_path)
    extended = generation.generate(task, longer, progress=False, checkpoints=tmp_path)
    fresh = generation.generate(task, longer, progress=False)
    assert extended.array.tobytes() == fresh.array.tobytes()
    assert _without_timings(extended.metadata) == _without_timings(fresh.metadata)
    with pytest.raises(DamagedFile, match="more than") as error:
        generation.generate(task, short, progress=False, checkpoints=tmp_path)
    assert "\n" not in str(error.value)


_GENERATE_IN_WORKERS = """
import sys
from reference import settings
from reference.settings import HMCSettings
from bench.cli import main
# toy-gap chain by chain in two workers, its chains far longer than the test waits
settings.REFERENCE_SETTINGS["toy-gap"] = HMCSettings(n_chains=2, n_burnin=2, n_samples=10**7, vectorise=False)
sys.exit(main(sys.argv[1:]))
"""


def _children(pid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(p) == pid]


def _parent_of(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


BURN_IN_SECONDS = 300
"""How long the interrupt test waits for two workers to pass burn-in on toy-gap (seconds alone; minutes beside a
load of 10): a bound, not a measure."""

STOP_SECONDS = 60
"""How long the interrupt test waits for the command to end once signalled."""


def _stopped(process: subprocess.Popen) -> str:
    """Kills ``process``'s group (the command and its workers), reaps it and returns what it wrote on stderr, every
    wait bounded: a failed test leaves nothing sampling, and its message waits on nothing that lives on."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        return process.communicate(timeout=STOP_SECONDS)[1] or ""
    except subprocess.TimeoutExpired:  # a pipe still held open by a process that left the group
        return "(its stderr could not be read)"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads worker processes from /proc")
@pytest.mark.parametrize("to_group", [True, False], ids=["to the process group", "to the parent only"])
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_stops_every_worker_at_once_and_keeps_the_checkpoints(tmp_path, to_group, signum, code):
    """Workers busy sampling are stopped by the parent, not awaited (their chains would run for hours); the
    command ends with one line and exit 130 (143 for SIGTERM, which schedulers send before they kill: it once ended
    the parent alone, leaving its workers sampling), and the chains' checkpoints stay for the next run to resume."""
    checkpoints = tmp_path / "ck"
    process = subprocess.Popen(
        [sys.executable, "-c", _GENERATE_IN_WORKERS, "reference", "generate", "--task", "toy-gap", "--out",
         str(tmp_path / "out"), "--checkpoints", str(checkpoints), "--workers", "2", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL), os.setpgrp()))
    try:
        deadline = time.monotonic() + BURN_IN_SECONDS
        while len(list(checkpoints.glob("toy-gap/chains-*.pt"))) < 2:  # both workers past burn-in, sampling
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"two workers did not pass burn-in within {BURN_IN_SECONDS} s; "
                            f"stderr: {_stopped(process)!r}")
            time.sleep(0.1)
        workers = [pid for child in _children(process.pid) for pid in [child, *_children(child)]]
        if to_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        try:
            _, err = process.communicate(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command did not end within {STOP_SECONDS} s of {signum.name}; "
                        f"stderr: {_stopped(process)!r}")
        assert process.returncode == code and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: terminated (SIGTERM)" if signum == signal.SIGTERM else "error: interrupted"), err
        assert "run the same command again" in err and str(checkpoints / "toy-gap") in err
        assert len(list(checkpoints.glob("toy-gap/chains-*.pt"))) == 2
        time.sleep(0.5)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        _stopped(process)  # what is left of the group when a check failed; nothing when every one passed


def test_generation_samples_with_the_threads_it_is_given_and_records_them(monkeypatch):
    """One thread by default whatever the caller's torch says (the chains then compute in this process as in a
    worker), the caller's count restored after."""
    seen = []
    sample = generation.run_chain_group
    monkeypatch.setattr(generation, "run_chain_group", lambda *a, **k: seen.append(torch.get_num_threads()) or
                        sample(*a, **k))
    torch.set_num_threads(2)
    try:
        generated = generation.generate(tiny_task(), SETTINGS, progress=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert seen and set(seen) == {1} and generated.metadata["torch_threads"] == 1


def test_reference_generate_passes_threads_and_refuses_more_than_the_cores(run_cli, tmp_path, monkeypatch):
    from bench.errors import BenchError
    from bench.executors import usable_cores

    asked = []

    def generate(*args, **kwargs):
        asked.append(kwargs["threads"])
        raise BenchError("stopped before sampling")

    monkeypatch.setattr(generation, "generate", generate)
    command = ("reference", "generate", "--task", "toy-gap", "--out", tmp_path / "out", "--checkpoints", tmp_path / "ck")
    assert run_cli(*command)[0] == 2 and asked == [1]
    code, _, err = run_cli(*command, "--threads", str(usable_cores() + 1))
    assert code == 2 and "oversubscribe" in err and len(err.strip().splitlines()) == 1 and asked == [1]
    code, _, err = run_cli(*command, "--workers", "2", "--threads", str(usable_cores()))
    assert code == 2 and "oversubscribe" in err and asked == [1]


@pytest.mark.parametrize("rhat, written", [(1.05, True), (1.0501, False)])
def test_reference_generate_writes_a_reference_at_the_r_hat_limit_and_refuses_one_just_above(run_cli, tmp_path,
                                                                                              monkeypatch, rhat, written):
    """The worst split R-hat over every test point is held to R_HAT_LIMIT (1.05) before anything is written: at it
    the reference is written, just above it nothing is (sampling stubbed: what it returns decides)."""
    from reference import store

    metadata = {"generation_check": {"max_split_rhat": rhat}, "acceptance_rate": 0.8, "compute_seconds": 1.0,
                "diagnostics": {"max_split_rhat": 1.0, "min_bulk_ess": 1000.0}, "noise_floor": {"all": {"w2": 0.01}}}
    monkeypatch.setattr(generation, "generate", lambda *a, **k: generation.GeneratedReference(
        "samples", np.zeros((2, 2)), metadata, b""))
    wrote = []
    monkeypatch.setattr(store, "write_reference", lambda *a, **k: wrote.append(a) or {"npz_sha256": "0" * 64})
    code, _, err = run_cli("reference", "generate", "--task", "toy-gap", "--out", tmp_path / "out", "--checkpoints",
                           tmp_path / "ck", "--quiet")
    assert (code, bool(wrote)) == ((0, True) if written else (2, False)), err
    assert written or f"worst split R-hat {rhat:.4f} exceeds 1.05: not writing the reference" in err
