"""The command line's numeric limits and defaults, in one module that imports nothing: the parser of ``python -m bench``
shows them in its ``--help`` and checks its arguments against them without importing PyTorch (``--version`` and
``--help`` answer where PyTorch cannot even be loaded). :mod:`bench.budget` and :mod:`bench.checkpoint`, which apply
them, read them from here."""

MAX_BUDGET_EPOCHS = 1_000_000
"""The largest budget a run accepts, in epochs: a thousand times the largest budget of the project's
own studies (1000 epochs), and small enough that every number a method derives from it (members, chains, steps of a
schedule) stays a count a machine can hold. A larger budget is refused before anything is built."""

DEFAULT_MAX_EPOCHS = 100_000
"""The most epochs of training that ``verify``, ``check``, ``check --update`` and ``submit --verify`` train unless
``--max-epochs`` allows more: three times the project's own gate (about 33,000 epochs of small models, some four minutes;
its ``--update``, which measures every run twice, natively and with other kernels, 66,000), far below what an edited
record or baseline can claim (a budget of 10^6 epochs would train for hours)."""

DEFAULT_EVERY_SECONDS = 300.0
"""How often a run writes its checkpoint by default (``--checkpoint-every``): a preempted run loses at most five
minutes; writing one costs well under 2% of that on every competition model (``benchmarks/resume_check.py``)."""
