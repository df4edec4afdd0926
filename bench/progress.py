"""Progress a person can read, on standard error: a bar of runs done / total with a time estimate and, under
it, a bar of the current run's epochs (0..budget), driven by the budget meter (the only place epochs are
counted), and under that one, a bar of the run's current phase beside training (:class:`Phase`: its predictive's
members evaluated on the test set, then the scoring of the whole test set and each block). Other long phases (reading
a board's records, rendering it, converting fetched data) draw a bar of their own (:func:`steps`). Bars are drawn only
on a terminal, so a piped standard error holds error lines alone.

A phase is reported from where it happens, which knows nothing of bars or processes: :func:`phase` hands it to the
observer the innermost :func:`observed` put in place (a run's bar, or a worker process's pipe to its parent's bar),
and to nothing where there is none. The predictive's members are reported by
:class:`approximators.base.PredictiveAccumulator` through :func:`members_evaluated`."""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

from bench.budget import budget_label

EPOCH_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} epochs [{elapsed}<{remaining}]"
PHASE_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} {unit} [{elapsed}<{remaining}]"
STEP_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:g}/{total:g} {unit} [{elapsed}<{remaining}]"

PREDICTIVE = "predictive"
SCORING = "scoring"


@dataclass(frozen=True)
class Phase:
    """What a run does beside training: ``name`` (:data:`PREDICTIVE`, :data:`SCORING`), ``done`` of ``total``
    ``unit``s (members evaluated on the test set, a fraction while one is part way; the whole test set and its blocks
    scored). Sent as it is through a worker process's pipe, where the run's epochs go."""

    name: str
    done: float
    total: float
    unit: str


_OBSERVER: contextvars.ContextVar[Callable[[Phase], None] | None] = contextvars.ContextVar("bench_phase_observer",
                                                                                          default=None)


@contextlib.contextmanager
def observed(observer: Callable[[Phase], None] | None) -> Iterator[None]:
    """Within it, :func:`phase` reports to ``observer`` (None: to nothing)."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def current_observer() -> Callable[[Phase], None] | None:
    """The observer :func:`observed` put in place, or None. A run's bar (:meth:`Progress.epochs`) hears the epochs
    used (numbers) as well as phases, so that a run trained out of sight of its bar's callback (``verify``'s
    re-executions) can give it to its meter."""
    return _OBSERVER.get()


def phase(name: str, done: float, total: float, unit: str) -> None:
    """Reports a run's phase to the observer in place, if any (no cost beyond a look-up without one)."""
    observer = _OBSERVER.get()
    if observer is not None:
        observer(Phase(name, done, total, unit))


def members_evaluated(done: float, total: int) -> None:
    """``done`` of a predictive's ``total`` members evaluated on the test set (a fraction: the test rows of a member
    evaluated so far), as :class:`approximators.base.PredictiveAccumulator` reports them: at the end of a method's fit,
    or while it trains where it keeps samples as it goes (SG-MCMC)."""
    phase(PREDICTIVE, done, total, "members")


def drawn(quiet: bool, stream=None) -> bool:
    """Whether bars are drawn: not ``quiet`` and standard error (``stream``) a terminal, as tqdm decides."""
    stream = sys.stderr if stream is None else stream
    try:
        return not quiet and stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


@contextlib.contextmanager
def steps(description: str, unit: str, quiet: bool) -> Iterator[Callable[[float, float], None]]:
    """A bar of one long phase of a command that is not a run (reading a board's records, rendering it, converting
    fetched data): ``description``, counted in ``unit``s; yields the callback that hears (done, total) as the phase
    goes. Drawn as every bar is, on a terminal only, and it leaves no line behind."""
    from tqdm.auto import tqdm

    with tqdm(total=None, desc=description, unit=unit, leave=False, disable=True if quiet else None,
              dynamic_ncols=True) as bar:
        def heard(done: float, total: float) -> None:
            if bar.disable:
                return
            if bar.total != total:
                bar.total, bar.bar_format = total, STEP_BAR_FORMAT
            bar.update(done - bar.n)

        yield heard


def run_title(task: str, method: str, budget: float, seed: int, variant: str | None = None) -> str:
    return f"{task} {method} budget {budget_label(budget)} seed {seed}" + (f" [{variant}]" if variant else "")


class Progress:
    """The bars of one command. ``runs``: how many runs it will train (no runs bar for a single run);
    ``quiet``: no bars at all."""

    def __init__(self, runs: int, quiet: bool, description: str = "runs"):
        from tqdm.auto import tqdm

        self._tqdm = tqdm
        self._disable = True if quiet else None  # None: tqdm draws only when standard error is a terminal
        self.drawn = drawn(quiet)
        self._failed = 0
        self._runs = tqdm(total=runs, desc=description, unit="run", disable=True if runs < 2 else self._disable,
                          dynamic_ncols=True)

    @contextlib.contextmanager
    def epochs(self, title: str, budget: float) -> Iterator[Callable[[float], None]]:
        """A bar of one run's epochs; yields the callback the run's meter reports the epochs used to. The run's
        phases (:class:`Phase`: its predictive's members evaluated, which some methods do while they train, then its
        scoring), heard from :func:`phase` within it or given to the callback (from a worker process), are drawn on
        a bar under it, one phase after the other."""
        position = 0 if self._runs.disable else 1
        with self._tqdm(total=budget, desc=title, leave=False, disable=self._disable, dynamic_ncols=True,
                        position=position, bar_format=EPOCH_BAR_FORMAT) as bar:
            phases: list = [None, None]  # the phase drawn under the epochs, and its bar

            def heard(used: "float | Phase") -> None:
                if not isinstance(used, Phase):
                    bar.update(used - bar.n)
                    return
                if bar.disable:
                    return
                if phases[0] != used.name:  # the next phase: a new bar under the epochs
                    if phases[1] is not None:
                        phases[1].close()
                    phases[:] = [used.name, self._tqdm(total=used.total, desc=f"{title}: {used.name}", unit=used.unit,
                                                       leave=False, disable=self._disable, dynamic_ncols=True,
                                                       position=position + 1, bar_format=PHASE_BAR_FORMAT)]
                phases[1].update(used.done - phases[1].n)

            try:
                with observed(heard):
                    yield heard
            finally:
                if phases[1] is not None:
                    phases[1].close()

    def finished(self, title: str, failed: bool) -> None:
        self._failed += failed
        self._runs.set_postfix_str(f"last: {title}" + (f"; {self._failed} failed" if self._failed else ""),
                                   refresh=False)
        self._runs.update(1)

    def say(self, line: str, file) -> None:
        """Prints ``line`` to ``file`` above the bars, which are drawn again under it."""
        self._tqdm.write(line, file=file)

    def note(self, line: str) -> None:
        """Prints ``line`` on standard error above the bars where they are drawn (a terminal, not ``--quiet``), and
        nowhere else: what a person watching wants to read, which a log or CI keeps out of its error lines."""
        if self.drawn:
            self._tqdm.write(line, file=sys.stderr)

    def close(self) -> None:
        self._runs.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
