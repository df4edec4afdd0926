"""Progress a person can read, on standard error: a bar of runs done / total with a time estimate and, under
it, a bar of the current run's epochs (0..budget), driven by the budget meter (the only place epochs are
counted). Bars are drawn only on a terminal, so a piped standard error holds error lines alone."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from bench.budget import budget_label

EPOCH_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} epochs [{elapsed}<{remaining}]"


def run_title(task: str, method: str, budget: float, seed: int, variant: str | None = None) -> str:
    return f"{task} {method} budget {budget_label(budget)} seed {seed}" + (f" [{variant}]" if variant else "")


class Progress:
    """The bars of one command. ``runs``: how many runs it will train (no runs bar for a single run);
    ``quiet``: no bars at all."""

    def __init__(self, runs: int, quiet: bool, description: str = "runs"):
        from tqdm.auto import tqdm

        self._tqdm = tqdm
        self._disable = True if quiet else None  # None: tqdm draws only when standard error is a terminal
        self._failed = 0
        self._runs = tqdm(total=runs, desc=description, unit="run", disable=True if runs < 2 else self._disable,
                          dynamic_ncols=True)

    @contextlib.contextmanager
    def epochs(self, title: str, budget: float) -> Iterator[Callable[[float], None]]:
        """A bar of one run's epochs; yields the callback the run's meter reports the epochs used to."""
        with self._tqdm(total=budget, desc=title, leave=False, disable=self._disable, dynamic_ncols=True,
                        position=0 if self._runs.disable else 1, bar_format=EPOCH_BAR_FORMAT) as bar:
            yield lambda used: bar.update(used - bar.n)

    def finished(self, title: str, failed: bool) -> None:
        self._failed += failed
        self._runs.set_postfix_str(f"last: {title}" + (f"; {self._failed} failed" if self._failed else ""),
                                   refresh=False)
        self._runs.update(1)

    def say(self, line: str, file) -> None:
        """Prints ``line`` to ``file`` above the bars, which are drawn again under it."""
        self._tqdm.write(line, file=file)

    def close(self) -> None:
        self._runs.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
