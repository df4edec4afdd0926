"""What an embedded reference keeps beside its model average, and every figure of its metadata recomputed from it.

A reference's ``.npz`` holds the predictive a method is scored against. Its evidence, ``reference/evidence/T.npz``
(in the repository; the wheel does not carry it), holds what its diagnostics and noise floor are computed from,
so that ``python -m bench reference diagnose`` recomputes every figure of the ``.json`` from shipped files:

- ``points`` ``(P,)``: the stated test points (:func:`evidence_points`: :data:`POINTS_PER_TASK` spread evenly over
  each test block, or over the test set);
- ``point_draws`` ``(C, S, P, q)`` float32, for each chain's kept draws: at each stated point, the probability of the
  class the reference predicts there (classification, q = 1) or the predictive mean and standard deviation
  (regression, q = 2);
- ``traces`` ``(C, S, 2)`` float64, per kept draw: the log posterior the Metropolis test used (training data
  log-likelihood plus log prior) and the log-likelihood of the test set;
- ``chain_average`` ``(C, N, K)`` float32 (classification): each chain's predictive average over its kept draws. A
  regression reference's 1000 draws of y need nothing more: column j comes from chain ``floor(j C / 1000)``
  (:func:`reference.generate.predictive_samples` takes the draws chain-major), so its chains are its columns;
- ``every_point_draws`` ``(C, S, N, q)`` float32, as ``point_draws`` but at every test point (references generated
  before issue 63 lack it): what the diagnostics over every test point
  (:func:`every_point_diagnostics`) are computed from;
- ``accept_prob`` ``(C, T)`` float64: every iteration's Metropolis acceptance probability, burn-in first;
- ``leapfrog_steps`` ``(C, T_kept)`` int32: each kept iteration's number of leapfrog steps;
- ``step_size`` ``(C,)`` float64: each chain's step size after adaptation.

**Diagnostics** (:func:`summarise`): the rank-normalised split R-hat, bulk ESS and tail ESS (Vehtari et al. 2021,
:mod:`reference.diagnostics`) of every quantity of ``point_draws`` and ``traces``, the worst of each named.

**Noise floor** (:func:`noise_floor`): the distance an independent run of the reference's sampler, with as many
chains and draws, as autocorrelated, but exact, is expected to score against the reference (what a method that
matched the posterior as well as the reference does cannot beat; a sampler of independent draws would score less,
by about sqrt((1 + ESS / draws) / 2)). Such a run A and the reference R estimate one predictive with errors of
equal variance s^2 per entry, so A - R has variance 2 s^2. The two halves H1, H2 of the reference's chains have twice
its variance each, so H1 - H2 has variance 4 s^2. Every metric here is, for small errors, proportional to the errors'
standard deviation (total variation and W1 exactly in expectation for Gaussian errors; the disagreement rate 1 -
agreement for a smooth density of the margin between the top two classes; W2 up to a slowly growing factor), so

    floor = d(H1, H2) / sqrt(2)          (agreement: 1 - (1 - agreement(H1, H2)) / sqrt(2)),

averaged over every split of the chains into two halves (35 for 8 chains: one split's distance varies by tens of
percent from one set of chains to another, their mean by a few). For regression a half is its chains' own columns of
the reference (column j comes from chain floor(j C / 1000)): half the chains and half the draws of y, so every source
of noise halves, as the rule needs. The rule is checked two ways: by simulation where exact sampling is possible
(``benchmarks/floor_simulation.py``, asserted by ``tests/reference/test_evidence.py``: the estimate against the mean
distance of independent exact runs), and here by splitting the chains into K = 2, 4 and 8 consecutive parts
(:func:`parts_check`): K parts of M / K draws are sqrt(2K / 2) times as far apart as A is from R, so the mean distance
of the parts' pairs / sqrt(K) estimates the same floor for every K if the scaling holds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import metrics
from bench.errors import DamagedFile, DamagedInstallation, ReferenceMismatch
from bench.io import npz_bytes, read_npz
from bench.tasks import Task
from reference import diagnostics

POINTS_PER_TASK = {"classification": 64, "regression": 32}
"""How many test points' per-draw predictive the evidence keeps (the files stay a megabyte or two: every point of
every draw of the CNN-LSTM would be 276 MB)."""
PARTS = (2, 4, 8)
"""The splits of the chains :func:`parts_check` compares."""
TRACE_NAMES = ("log posterior", "test log-likelihood")
ARRAYS = ("points", "point_draws", "traces", "accept_prob", "leapfrog_steps", "step_size")
"""What every evidence file holds; a classification reference's also holds ``chain_average``, and a reference
generated since issue 63 ``every_point_draws``."""
EVERY_POINT_DTYPE = np.float32
"""How ``every_point_draws`` is stored: in single precision, as ``point_draws``. Half precision would make ties of
draws near a probability of 1 and move the diagnostics at their printed precision (the stated points' worst R-hat of
``digits`` 1.0096 -> 1.0097 and its least bulk ESS 1060 -> 1065; 1 - p in half precision moves ``digits-cnn``'s least
tail ESS 1540 -> 1580), so the files are larger (about 9, 14 and 22 MB for the three digits tasks) but exact."""


@dataclass(frozen=True)
class Evidence:
    """The arrays of an evidence file (shapes in the module's docstring); ``chain_average`` is None for regression."""

    points: np.ndarray
    point_draws: np.ndarray
    traces: np.ndarray
    accept_prob: np.ndarray
    leapfrog_steps: np.ndarray
    step_size: np.ndarray
    chain_average: np.ndarray | None = None
    every_point_draws: np.ndarray | None = None

    @property
    def chains(self) -> int:
        return int(self.point_draws.shape[0])

    @property
    def draws_per_chain(self) -> int:
        return int(self.point_draws.shape[1])

    def arrays(self) -> dict[str, np.ndarray]:
        out = {name: getattr(self, name) for name in ARRAYS}
        for name in ("chain_average", "every_point_draws"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def to_bytes(self) -> bytes:
        return npz_bytes(**self.arrays())


def evidence_points(task: Task) -> np.ndarray:
    """The test points whose per-draw predictive the evidence keeps: :data:`POINTS_PER_TASK` spread evenly over each
    test block (the same number from each), or over the whole test set; point i of a range of n rows is its row
    ``floor((i + 1/2) n / m)`` of m."""
    blocks = [(b.start, b.stop) for b in task.test_blocks] or [(0, task.n_test)]
    per_block = POINTS_PER_TASK[task.kind] // len(blocks)
    rows = [start + np.floor((np.arange(per_block) + 0.5) * (stop - start) / per_block).astype(np.int64)
            for start, stop in blocks]
    return np.concatenate(rows)


def every_point_quantities(task: Task, draws: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``every_point_draws``: :func:`point_quantities` at every test point, stored as :data:`EVERY_POINT_DTYPE`."""
    every = point_quantities(task, draws, reference, np.arange(draws.shape[2]))
    return every.astype(EVERY_POINT_DTYPE)


def point_quantities(task: Task, draws: np.ndarray, reference: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``point_draws`` from function-space draws ``(C, S, N, K)`` (probabilities) or ``(C, S, N, 2)`` (mean, std):
    the probability of the reference's predicted class at each point (``reference`` its probabilities ``(N, K)``), or
    the mean and std there."""
    if task.kind == "classification":
        predicted = reference[points].argmax(axis=1)
        return draws[:, :, points, predicted][..., None].astype(np.float32)
    return draws[:, :, points, :].astype(np.float32)


def load(path: Path, advice: str, installed: bool = False) -> Evidence:
    """The evidence file at ``path``; one :class:`ReferenceMismatch` line if it cannot be read or lacks an array, a
    :class:`~bench.errors.DamagedInstallation` (exit 3) where ``installed`` (the package's own evidence)."""
    damaged = DamagedInstallation if installed else ReferenceMismatch
    try:
        arrays = read_npz(path, "reference evidence", advice)
    except DamagedFile as error:
        raise damaged(f"reference evidence damaged: {error}") from None
    missing = [name for name in ARRAYS if name not in arrays]
    if missing:
        raise damaged(f"reference evidence damaged: {path} lacks {', '.join(missing)}; {advice}")
    evidence = Evidence(**{name: arrays[name] for name in ARRAYS}, chain_average=arrays.get("chain_average"),
                        every_point_draws=arrays.get("every_point_draws"))
    draws = evidence.point_draws
    if draws.ndim != 4 or evidence.traces.shape != (*draws.shape[:2], len(TRACE_NAMES)) \
            or evidence.points.shape != (draws.shape[2],) or evidence.accept_prob.ndim != 2 \
            or evidence.accept_prob.shape[0] != draws.shape[0] or evidence.leapfrog_steps.ndim != 2 \
            or evidence.leapfrog_steps.shape[0] != draws.shape[0] \
            or not draws.shape[1] <= evidence.leapfrog_steps.shape[1] <= evidence.accept_prob.shape[1] \
            or evidence.step_size.shape != (draws.shape[0],) \
            or evidence.every_point_draws is not None and (
                evidence.every_point_draws.ndim != 4 or evidence.every_point_draws.shape[:2] != draws.shape[:2]
                or evidence.every_point_draws.shape[3] != draws.shape[3]
                or not np.isfinite(evidence.every_point_draws).all()) \
            or not all(np.isfinite(a).all() for a in (draws, evidence.traces, evidence.accept_prob)):
        raise damaged(f"reference evidence damaged: {path} holds arrays of inconsistent shapes or non-finite "
                      f"values; {advice}")
    return evidence


def _parts(task: Task, reference: np.ndarray, evidence: Evidence, k: int) -> list[np.ndarray]:
    """The reference split into ``k`` predictives of disjoint, consecutive groups of chains (:func:`_half` of each)."""
    size = evidence.chains // k
    return [_half(task, reference, evidence, list(range(i * size, (i + 1) * size))) for i in range(k)]


def _distances(task: Task, a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The primary distances between two predictives, as metrics that are 0 for equal ones: total variation and
    disagreement (1 - agreement), or W1 and W2."""
    if task.kind == "classification":
        return {"total_variation": metrics.total_variation(a, b), "disagreement": 1.0 - metrics.agreement(a, b)}
    return {"w1": metrics.w1_distance(a, b), "w2": metrics.w2_distance(a, b)}


def _as_metrics(task: Task, distances: dict[str, float]) -> dict[str, float]:
    """Distances back to the board's metrics: agreement = 1 - disagreement; competition_w = -W1 (the competition's
    score is minus the mean W1 of 1000 draws a side)."""
    if task.kind == "classification":
        return {"agreement": 1.0 - distances["disagreement"], "total_variation": distances["total_variation"]}
    return {"w1": distances["w1"], "w2": distances["w2"], "competition_w": -distances["w1"]}


def halves(chains: int) -> list[tuple[list[int], list[int]]]:
    """Every split of ``chains`` chains into two halves, each once (the half holding chain 0 first): 35 for 8."""
    return [(list(first), [c for c in range(chains) if c not in first])
            for first in itertools.combinations(range(chains), chains // 2) if 0 in first]


def _half(task: Task, reference: np.ndarray, evidence: Evidence, chains: list[int]) -> np.ndarray:
    """The predictive of the reference's chains ``chains`` alone: their average (classification) or their columns."""
    if task.kind == "classification":
        return evidence.chain_average[chains].astype(np.float64).mean(axis=0)
    columns = np.split(reference, evidence.chains, axis=1)
    return np.concatenate([columns[c] for c in chains], axis=1)


def noise_floor(task: Task, reference: np.ndarray, evidence: Evidence) -> dict[str, dict[str, float]]:
    """Per block (``all`` first, then the task's test blocks): the metrics an independent, exact run of the reference's
    sampler is expected to score against the reference, d(H1, H2) / sqrt(2) averaged over every split of the chains
    into halves (:func:`halves`; the module's docstring)."""
    blocks = [("all", slice(None))] + [(b.name, slice(b.start, b.stop)) for b in task.test_blocks]
    sums: dict[str, dict[str, float]] = {name: {} for name, _ in blocks}
    splits = halves(evidence.chains)
    for first, second in splits:
        a, b = _half(task, reference, evidence, first), _half(task, reference, evidence, second)
        for name, rows in blocks:
            for metric, value in _distances(task, a[rows], b[rows]).items():
                sums[name][metric] = sums[name].get(metric, 0.0) + value
    return {name: _as_metrics(task, {metric: total / len(splits) / math.sqrt(2) for metric, total in found.items()})
            for name, found in sums.items()}


def floor_spread(task: Task, reference: np.ndarray, evidence: Evidence) -> dict[str, dict[str, float]] | None:
    """Per block and metric (as :func:`noise_floor`): how far one independent, exact run of the reference's sampler
    may score from the floor, the standard deviation of d(A, R) - floor over exact runs A and references R, estimated
    from the reference's own chains. Every choice of half the chains is a smaller reference R' and the other half an
    exact run A' of its size; R''s floor comes from its own halves as the floor does, so D' = d(A', R') - floor(R')
    is one draw, at half the chains, of what an exact run scores beyond the floor. Its variance over every choice
    (70 for 8 chains), halved (at half the chains every error is sqrt 2 times larger), is the spread's square. It
    holds both the run's own noise and the reference's: the realised error of R, which every seed of a method
    shares, and the floor's own estimation error; :func:`leaderboard.ranking.within_noise_floor` needs the two.
    None for fewer than ``MIN_SPREAD_CHAINS`` chains: a half must split in two again, and there must be more than
    one choice of half."""
    blocks = [("all", slice(None))] + [(b.name, slice(b.start, b.stop)) for b in task.test_blocks]
    chains = evidence.chains
    if chains < MIN_SPREAD_CHAINS:
        return None
    beyond: dict[str, dict[str, list[float]]] = {name: {} for name, _ in blocks}
    for smaller in itertools.combinations(range(chains), chains // 2):
        run = [c for c in range(chains) if c not in smaller]
        a, r = _half(task, reference, evidence, run), _half(task, reference, evidence, list(smaller))
        splits = [(_half(task, reference, evidence, [smaller[i] for i in first]),
                   _half(task, reference, evidence, [smaller[i] for i in second]))
                  for first, second in halves(len(smaller))]
        for name, rows in blocks:
            scored = _distances(task, a[rows], r[rows])
            floors = [_distances(task, h1[rows], h2[rows]) for h1, h2 in splits]
            for metric, value in scored.items():
                floor = float(np.mean([f[metric] for f in floors])) / math.sqrt(2)
                beyond[name].setdefault(metric, []).append(value - floor)
    return {name: _spreads_as_metrics(task, {metric: math.sqrt(float(np.var(values, ddof=1)) / 2)
                                              for metric, values in found.items()})
            for name, found in beyond.items()}


MIN_SPREAD_CHAINS = 4
"""The fewest chains :func:`floor_spread` is computed from (6 choices of half of them, each half splitting in two)."""


def _spreads_as_metrics(task: Task, spreads: dict[str, float]) -> dict[str, float]:
    """A spread of each distance under its metric's name (a spread of 1 - agreement is one of agreement)."""
    if task.kind == "classification":
        return {"agreement": spreads["disagreement"], "total_variation": spreads["total_variation"]}
    return {"w1": spreads["w1"], "w2": spreads["w2"], "competition_w": spreads["w1"]}


def parts_check(task: Task, reference: np.ndarray, evidence: Evidence) -> dict[str, dict[str, float]]:
    """For each K of :data:`PARTS` that divides the chains: the floor's distances on the whole test set estimated
    from K parts, the mean over the parts' pairs / sqrt(K). Equal for every K where the floor's scaling holds."""
    out = {}
    for k in PARTS:
        if evidence.chains % k or (task.kind == "regression" and reference.shape[1] % k):
            continue
        parts = _parts(task, reference, evidence, k)
        pairs = [_distances(task, parts[i], parts[j]) for i in range(k) for j in range(i + 1, k)]
        out[str(k)] = {metric: float(np.mean([p[metric] for p in pairs])) / math.sqrt(k) for metric in pairs[0]}
    return out


def _point_names(task: Task, points) -> list[str]:
    """A name for each point quantity at each of ``points``, in the order ``point_draws`` flattens them."""
    what = ["p(reference's class)"] if task.kind == "classification" else ["predictive mean", "predictive std"]
    return [f"{name}, test point {int(point)}" for point in points for name in what]


def _point_quantity(task: Task) -> str:
    """What ``point_draws`` holds at a point, in words."""
    return "probability of the reference's class" if task.kind == "classification" else "predictive mean and std"


def quantity_names(task: Task, evidence: Evidence) -> list[str]:
    """A name for every diagnosed quantity, in the order :func:`summarise` flattens them."""
    return _point_names(task, evidence.points) + list(TRACE_NAMES)


def _worst(quantities: np.ndarray, names: list[str]) -> dict:
    """The worst split R-hat, bulk and tail ESS of ``quantities`` ``(C, S, Q)`` and where each is."""
    rhat = diagnostics.split_rhat(quantities)
    bulk = diagnostics.bulk_ess(quantities)
    tail = diagnostics.tail_ess(quantities)
    return {"n_quantities": len(names),
            "max_split_rhat": float(rhat.max()), "max_split_rhat_at": names[int(rhat.argmax())],
            "min_bulk_ess": float(bulk.min()), "min_bulk_ess_at": names[int(bulk.argmin())],
            "median_bulk_ess": float(np.median(bulk)),
            "min_tail_ess": float(tail.min()), "min_tail_ess_at": names[int(tail.argmin())]}


def every_point_diagnostics(task: Task, evidence: Evidence) -> dict | None:
    """The diagnostics of ``every_point_draws`` (every test point's probability of the reference's class, or its
    predictive mean and std), as :func:`summarise`'s over the stated points; None where the evidence lacks them."""
    every = evidence.every_point_draws
    if every is None:
        return None
    quantities = every.reshape(evidence.chains, evidence.draws_per_chain, -1).astype(np.float64)
    return {"quantities": f"every test point's {_point_quantity(task)}",
            **_worst(quantities, _point_names(task, range(every.shape[2])))}


def summarise(task: Task, reference: np.ndarray, evidence: Evidence) -> dict:
    """Every figure of a reference's metadata that the evidence decides: diagnostics, acceptance, trajectory
    steps, step sizes, the noise floor and its check by parts. ``reference diagnose`` compares them with the
    ``.json``; generation writes them there."""
    chains, draws = evidence.chains, evidence.draws_per_chain
    quantities = np.concatenate([evidence.point_draws.reshape(chains, draws, -1).astype(np.float64),
                                 evidence.traces], axis=2)
    names = quantity_names(task, evidence)
    kept = evidence.leapfrog_steps.shape[1]
    burnin = evidence.accept_prob[:, :evidence.accept_prob.shape[1] - kept]
    kept_accept = evidence.accept_prob[:, evidence.accept_prob.shape[1] - kept:]
    every_point = every_point_diagnostics(task, evidence)
    return {
        **({"diagnostics_every_point": every_point} if every_point is not None else {}),
        "diagnostics": {
            "quantities": (f"{len(evidence.points)} stated test points' {_point_quantity(task)}, the log posterior "
                           "and the test log-likelihood"),
            **_worst(quantities, names),
        },
        "acceptance_rate": float(kept_accept.mean()),
        "acceptance_rate_per_chain": kept_accept.mean(axis=1).tolist(),
        "burnin_acceptance_rate": float(burnin.mean()) if burnin.size else None,
        "leapfrog_steps": evidence.leapfrog_steps.mean(axis=1).tolist(),
        "step_sizes": evidence.step_size.tolist(),
        "kept_samples_per_chain": draws,
        "kept_samples_total": chains * draws,
        "noise_floor": noise_floor(task, reference, evidence),
        "noise_floor_spread": floor_spread(task, reference, evidence),
        "noise_floor_by_parts": parts_check(task, reference, evidence),
    }


def consistent_with(task: Task, reference: np.ndarray, evidence: Evidence, seed: int) -> str | None:
    """Why ``evidence`` cannot be the evidence of this reference (None if it can), checked exactly where the reference
    is a function of it: the stated test points; a classification reference is the mean of the chains' averages, and
    each chain's average at a stated point the mean of its draws there (both to float32 round-off); a regression
    reference's draws of y at the stated points are the ones its generation drew (``seed`` the reference's) from the
    evidence's predictive means and standard deviations."""
    if not np.array_equal(evidence.points, evidence_points(task)):
        return "its test points are not the ones the evidence states for this task"
    every = evidence.every_point_draws
    if every is not None:
        if every.shape[2] != reference.shape[0]:
            return f"its draws at every test point cover {every.shape[2]} points, the reference {reference.shape[0]}"
        gap = float(np.abs(every[:, :, evidence.points].astype(np.float64)
                           - evidence.point_draws.astype(np.float64)).max())
        if gap > 0:
            return f"its draws at every test point differ from its draws at the stated points (by up to {gap:.2g})"
    if task.kind == "classification":
        if evidence.chain_average is None or evidence.chain_average.shape != (evidence.chains, *reference.shape):
            return "it holds no predictive average of each of its chains over the reference's test points"
        gap = float(np.abs(evidence.chain_average.astype(np.float64).mean(axis=0) - reference).max())
        if gap > 1e-6:
            return f"the mean of its chains' averages differs from the reference by up to {gap:.2g}"
        classes = reference[evidence.points].argmax(axis=1)
        from_draws = evidence.point_draws[..., 0].astype(np.float64).mean(axis=1)
        from_averages = evidence.chain_average[:, evidence.points, classes].astype(np.float64)
        gap = float(np.abs(from_draws - from_averages).max())
        if gap > 1e-5:
            return f"its draws at the stated points do not average to its chains' averages (by up to {gap:.2g})"
        return None
    if reference.shape[1] % evidence.chains:
        return f"the reference's {reference.shape[1]} draws of y do not split into its {evidence.chains} chains"
    flat = evidence.point_draws.astype(np.float64).reshape(-1, *evidence.point_draws.shape[2:])  # (C S, P, 2)
    n = reference.shape[1]
    chosen = np.floor(np.arange(n) * len(flat) / n).astype(int)
    noise = np.random.default_rng(np.random.SeedSequence([seed, 1])).standard_normal((n, task.n_test))
    drawn = (flat[chosen, :, 0] + flat[chosen, :, 1] * noise[:, evidence.points]).T
    gap = float(np.abs(drawn - reference[evidence.points]).max())
    if gap > 1e-9 * max(1.0, float(np.abs(reference).max())):
        return f"the reference's draws of y at the stated points are not the ones its predictive gives (by up to {gap:.2g})"
    return None


def gold_standard(task: Task, summary: dict, every_point_rhat: float | None = None) -> dict[str, dict]:
    """The reference's diagnostics against :data:`reference.settings.GOLD_STANDARD`: per criterion its value, its
    limit and whether it is met, over the stated points and, where the evidence keeps every test point's draws
    (``summary["diagnostics_every_point"]``), over every test point (``*_every_point``). Else ``every_point_rhat``,
    the worst split R-hat over every test point that generation recorded (``generation_check``, which the evidence
    cannot recompute), is held to the R-hat limit as ``max_split_rhat_every_point``: a reference is short of the
    gold standard if it misses a limit there, whatever its stated points show."""
    from reference.settings import GOLD_STANDARD

    chains = len(summary["acceptance_rate_per_chain"])
    least_ess = GOLD_STANDARD["min_ess_per_chain"] * chains
    limit = GOLD_STANDARD["max_split_rhat"]

    def criteria(found: dict, suffix: str) -> dict[str, dict]:
        return {
            f"max_split_rhat{suffix}": {"value": found["max_split_rhat"], "limit": f"< {limit}",
                                        "met": found["max_split_rhat"] < limit},
            f"min_bulk_ess{suffix}": {"value": found["min_bulk_ess"], "limit": f">= {least_ess}",
                                      "met": found["min_bulk_ess"] >= least_ess},
            f"min_tail_ess{suffix}": {"value": found["min_tail_ess"], "limit": f">= {least_ess}",
                                      "met": found["min_tail_ess"] >= least_ess},
        }

    out = criteria(summary["diagnostics"], "")
    if "diagnostics_every_point" in summary:
        out.update(criteria(summary["diagnostics_every_point"], EVERY_POINT))
    elif every_point_rhat is not None:
        out[f"max_split_rhat{EVERY_POINT}"] = {"value": every_point_rhat, "limit": f"< {limit}",
                                               "met": every_point_rhat < limit, "recomputable": False}
    return out


EVERY_POINT = "_every_point"
"""The suffix of a gold-standard criterion judged over every test point."""


def generation_rhat(metadata: dict) -> float | None:
    """The worst split R-hat over every test point that generation recorded (None: generated before it was)."""
    check = metadata.get("generation_check") if isinstance(metadata, dict) else None
    value = check.get("max_split_rhat") if isinstance(check, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


RELATIVE_TOLERANCE = 1e-9
"""How far a recomputed figure may be from the stored one: the same arithmetic on the same arrays, up to the last
bits a different CPU's vector instructions may change in a sum."""


def differences(stored, recomputed, where: str = "") -> list[str]:
    """Every place where ``recomputed`` (a summary, or part of one) differs from ``stored``, as ``where: stored ->
    recomputed`` lines; numbers compare to :data:`RELATIVE_TOLERANCE`."""
    if isinstance(recomputed, dict):
        if not isinstance(stored, dict):
            return [f"{where}: stored {stored!r}, recomputed a table"]
        return [line for key, value in recomputed.items()
                for line in differences(stored.get(key), value, f"{where}.{key}" if where else key)]
    if isinstance(recomputed, list):
        if not isinstance(stored, list) or len(stored) != len(recomputed):
            return [f"{where}: stored {stored!r}, recomputed {len(recomputed)} values"]
        return [line for i, (a, b) in enumerate(zip(stored, recomputed)) for line in differences(a, b, f"{where}[{i}]")]
    if isinstance(recomputed, float) and isinstance(stored, (int, float)) and not isinstance(stored, bool):
        same = math.isclose(stored, recomputed, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-15)
    else:
        same = stored == recomputed
    return [] if same else [f"{where}: stored {stored!r}, recomputed {recomputed!r}"]
