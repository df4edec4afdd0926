"""The CI fidelity gate: rerun a small fixed configuration and compare it with a committed baseline.

``update`` runs each method on each task (default: the embedded MLP tasks, :data:`bench.tasks.DEFAULT_TASKS`;
a later update with ``--task`` adds others for the methods it names) for seeds 0..n-1 (CPU) and writes the
baseline file: the configuration, the environment (package versions, platform, CPU, threads) and, per method and task,
every seed's ``epochs_used`` and ``test_passes`` and every seed's value of every metric of every test
block, with their mean and standard deviation (ddof = 1). The configuration is what the command line
chose: the methods (built-in, an installed plugin's name, or ``package.module:ClassName``; default
every built-in one), the tasks (default the embedded MLP tasks), the number of seeds, each method's budget
(``--budget [METHOD=]EPOCHS``; default its ``check_budget``) and settings (``--set [METHOD.]KEY=VALUE``;
default its defaults for the task). The file stores all of it, and how to load each method, so that a
plain ``check --baseline FILE`` reruns exactly that configuration.

``check`` reruns the baseline's configuration (or a subset of its methods and tasks) and compares:

1. **Budget, always exactly.** Every seed's ``epochs_used`` and ``test_passes`` must equal the
   baseline's: a meter that charges half of each batch changes no metric but fails here.
2. **Exact mode**, when what decides round-off is the baseline's (:data:`bench.runner.NUMERICS`: library
   versions, CPU, torch threads, device; not the kernel build or the core count): such runs are
   deterministic, so every seed's every metric must reproduce within float round-off
   (``EXACT_TOLERANCE`` x max(1, |value|)); the first value that moved is reported. Any change to what
   a method computes, in either direction, fails: accept a deliberate one with ``--update``.
3. **Cross-CPU mode**, otherwise (or with ``--statistical``): another CPU kind keeps a seed's run where round-off
   stays round-off and makes it another draw where round-off grows chaotically; the baseline's ``other_kernels``
   (every run measured again with :data:`bench.executors.OTHER_KERNELS`) say how far, per metric. Each metric is
   compared seed by seed within :func:`seed_allowance`: max(``SEED_FLOOR`` x its seeds' standard deviation,
   :data:`bench.drift.OTHER_KERNELS_FACTOR` x the most the other kernels moved a seed, round-off), where that is at
   most ``PAIRED_LIMIT`` standard deviations. Beyond, a primary metric on the whole test set
   (:data:`leaderboard.ranking.PRIMARY`) is tested by its mean: z = (mean now - mean baseline) / SE with
   SE = s_baseline sqrt(1 / n_b + 1 / n_m), the baseline's spread alone (a change that makes a method erratic cannot
   widen its own test), flagged when |z| exceeds the Bonferroni bound for a family-wise false-alarm rate
   ``FAMILY_FALSE_ALARM`` over the means tested, under Student's t with n_b - 1 degrees of freedom; the other
   metrics of such a configuration are not comparable off the baseline's CPU (counted in the report). A baseline of
   format 2 (no ``other_kernels``) is compared by its primary metrics' means alone.

The floor of a standard deviation only keeps a (near-)zero spread from flagging any change at all:

- ``agreement``, ``accuracy``: 1 / (test points in the block), the smallest change the metric can show;
- other metrics the reference's noise floor publishes (``total_variation``, ``w1``, ``w2``,
  ``competition_w``): ``NOISE_FLOOR_FRACTION`` of the noise floor's distance from a perfect score,
  a fraction of the Monte Carlo error of the reference itself;
- the rest (``nll``, ``ece``, ``rmse``, ``log_likelihood``, or any metric when the reference
  publishes no noise floor): ``NUMERIC_FLOOR`` x max(1, |mean|), above float64 summation round-off.
"""

from leaderboard.gate.baseline import (BASELINE_FORMAT, DEFAULT_SEEDS, EVERY_METHOD, baseline_sources, budget_options,
                                      describe_baseline, load_baseline, setting_options, vet_sources)
from leaderboard.gate.runs import check, measure, update
from leaderboard.gate.statistics import (BUDGET_FIELDS, EXACT_TOLERANCE, FAMILY_FALSE_ALARM, FIDELITY_METRICS,
                                        PAIRED_LIMIT, SEED_FLOOR, Finding, Move, Report, block_sizes, compare,
                                        seed_allowance, spread_floor, standard_error, statistical_tolerance)

__all__ = ["BASELINE_FORMAT", "BUDGET_FIELDS", "DEFAULT_SEEDS", "EVERY_METHOD", "EXACT_TOLERANCE", "FAMILY_FALSE_ALARM",
           "FIDELITY_METRICS", "PAIRED_LIMIT", "SEED_FLOOR", "Finding", "Move", "Report", "baseline_sources",
           "block_sizes", "budget_options", "check", "compare", "describe_baseline", "load_baseline", "measure",
           "seed_allowance", "setting_options", "spread_floor", "standard_error", "statistical_tolerance", "update",
           "vet_sources"]
