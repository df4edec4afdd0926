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
3. **Statistical mode**, otherwise (or with ``--statistical``): another machine or library version
   behaves like fresh seeds. Per metric, z = (mean now - mean baseline) / SE, the pooled two-sample t
   statistic: with n_b baseline seeds and n_m seeds measured now (all of the baseline's, or its first
   ``--seeds``), each s floored (below),
   s_p^2 = ((n_b - 1) s_baseline^2 + (n_m - 1) s_now^2) / (n_b + n_m - 2) and
   SE = s_p sqrt(1 / n_b + 1 / n_m) (for n_b = n_m = n, sqrt((s_baseline^2 + s_now^2) / n)). Fidelity
   metrics (``FIDELITY_METRICS``) are flagged when |z| exceeds the tolerance in **either** direction:
   at small budgets a large "improvement" is as suspicious as a loss. Other metrics are flagged when
   worse. The default tolerance is the Bonferroni bound for a family-wise false-alarm rate
   ``FAMILY_FALSE_ALARM`` over the m metrics compared, under Student's t with n_b + n_m - 2 degrees of
   freedom: t^-1(1 - alpha / (2 m)). Fewer seeds now make a weaker check (a larger SE and tolerance)
   at the same false-alarm rate: CI, which reruns 2 seeds to stay within its time, is exact on the baseline's
   machine and this weaker statistical check on any other. A seed measured now that repeats a baseline
   seed under other round-off only correlates the two means, which shrinks the true SE of their
   difference: the test stays conservative.

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
from leaderboard.gate.statistics import (BUDGET_FIELDS, EXACT_TOLERANCE, FAMILY_FALSE_ALARM, FIDELITY_METRICS, Finding,
                                        Report, compare, spread_floor, standard_error, statistical_tolerance)

__all__ = ["BASELINE_FORMAT", "BUDGET_FIELDS", "DEFAULT_SEEDS", "EVERY_METHOD", "EXACT_TOLERANCE", "FAMILY_FALSE_ALARM",
           "FIDELITY_METRICS", "Finding", "Report", "baseline_sources", "budget_options", "check", "compare",
           "describe_baseline", "load_baseline", "measure", "setting_options", "spread_floor", "standard_error",
           "statistical_tolerance", "update", "vet_sources"]
