"""The tables docs/references.md shows of the shipped references, written from their metadata
(``python -m bench.docblocks --write``), whose every figure ``python -m bench reference diagnose`` recomputes from the
references' evidence."""

from __future__ import annotations

from pathlib import Path

from bench.io import malformed_is_damage, read_json
from bench.tasks import get_task
from reference import crosscheck
from reference.evidence import EVERY_POINT, generation_rhat, gold_standard
from reference.settings import GOLD_STANDARD, REFERENCE_SETTINGS
from reference.store import load_reference

PRIMARY = {"classification": ("agreement", "total_variation"), "regression": ("w1", "w2")}
NAMES = {"agreement": "agreement", "total_variation": "TV", "w1": "W1", "w2": "W2"}


def _met(value: float, ok: bool) -> str:
    return f"{value} ✓" if ok else f"**{value}** ✗"


_ON_STATED_POINTS = {"max_split_rhat": "worst split R-hat", "min_bulk_ess": "min bulk ESS",
                     "min_tail_ess": "min tail ESS"}
CRITERIA = {**_ON_STATED_POINTS, **{f"{criterion}{EVERY_POINT}": f"{name} over every test point"
                                    for criterion, name in _ON_STATED_POINTS.items()}}
"""The gold standard's criteria as the table's verdict names them."""


def references_table() -> str:
    """Per shipped reference: its size, acceptance, worst diagnostics over the stated points and over every test point
    (against the gold standard, ✓ met, ✗ short), noise floor and sampling time; then where each worst R-hat is, and
    which references fall short of what. Over every test point the figures are recomputed from the evidence where it
    keeps every point's draws, else the worst R-hat generation recorded (marked: not recomputable)."""
    least = GOLD_STANDARD["min_ess_per_chain"]
    limit = GOLD_STANDARD["max_split_rhat"]
    lines = [f"| task | chains x kept draws | acceptance | worst split R-hat (< {limit}) | "
             f"min bulk ESS (>= {least} per chain) | min tail ESS (>= {least} per chain) | noise floor | "
             f"sampling | every test point: worst split R-hat, min bulk ESS, min tail ESS |",
             "|---|---|---|---|---|---|---|---|---|"]
    short = []
    for name in REFERENCE_SETTINGS:
        task = get_task(name)
        meta = load_reference(task).metadata
        chains = meta["hmc"]["n_chains"]
        floor = ", ".join(f"{NAMES[m]} {meta['noise_floor']['all'][m]:.4f}" for m in PRIMARY[task.kind])
        seconds = meta["compute_seconds"]
        sampling = f"{seconds:.0f} s" if meta["hmc"]["vectorise"] else f"{seconds:.0f} s, summed over chains"
        gold = gold_standard(task, meta, generation_rhat(meta))
        missed = [CRITERIA[criterion] for criterion in gold if not gold[criterion]["met"]]
        if missed:
            short.append(f"`{name}` ({', '.join(missed)})")
        shown = {criterion: _met(f"{gold[criterion]['value']:{'.0f' if 'ess' in criterion else '.4f'}}",
                                 gold[criterion]["met"]) for criterion in gold}
        every = [shown[c + EVERY_POINT] for c in _ON_STATED_POINTS if c + EVERY_POINT in shown]
        if "max_split_rhat" + EVERY_POINT not in gold:
            every_cell = "n/a (generated before it was recorded)"
        elif gold["max_split_rhat" + EVERY_POINT].get("recomputable", True):
            every_cell = ", ".join(every)
        else:
            every_cell = f"{every[0]} (R-hat at generation, not recomputable)"
        lines.append(
            f"| `{name}` | {chains} x {meta['kept_samples_per_chain']} | {meta['acceptance_rate']:.3f} | "
            f"{shown['max_split_rhat']} | {shown['min_bulk_ess']} | {shown['min_tail_ess']} | "
            f"{floor} | {sampling} | {every_cell} |")
    worst = [f"`{name}`: {load_reference(get_task(name)).metadata['diagnostics']['max_split_rhat_at']}"
             for name in REFERENCE_SETTINGS]
    verdict = f"Short of the gold standard: {'; '.join(short)}." if short else "Every reference meets the gold standard."
    return "\n".join(lines) + "\n\nWhere the worst split R-hat is: " + "; ".join(worst) + f".\n\n{verdict}\n"


def floor_parts_table() -> str:
    """Per shipped reference and primary metric: the noise floor, the same floor estimated from the chains split
    into 2, 4 and 8 parts (equal where the floor's scaling with the number of draws holds), and the floor's spread
    (:func:`reference.evidence.floor_spread`)."""
    lines = ["| task | metric | noise floor | from 2 parts | from 4 parts | from 8 parts | spread of an exact run |",
             "|---|---|---|---|---|---|---|"]
    for name in REFERENCE_SETTINGS:
        task = get_task(name)
        meta = load_reference(task).metadata
        parts = meta["noise_floor_by_parts"]
        for metric in PRIMARY[task.kind]:
            distance = "disagreement" if metric == "agreement" else metric
            shown = (lambda v: f"{1 - v:.4f}") if metric == "agreement" else (lambda v: f"{v:.4f}")
            lines.append(f"| `{name}` | {NAMES[metric]} | {meta['noise_floor']['all'][metric]:.4f} | "
                         + " | ".join(shown(parts[k][distance]) if k in parts else "" for k in ("2", "4", "8"))
                         + f" | {meta['noise_floor_spread']['all'][metric]:.4f} |")
    return "\n".join(lines) + "\n"


def nuts_table(folder: Path) -> str:
    """Per finished NUTS cross-check in ``folder`` (``nuts-<task>.json``, :mod:`benchmarks.nuts_crosscheck`), per test
    block: NUTS's distance to our reference, both floors, the distance expected of two samplers of one posterior and
    their ratio; NUTS's own diagnostics, and per chain its divergences, acceptance, tree length, step size and
    seconds; each check's permutation test (:mod:`reference.crosscheck`): its p-value, decision and the smallest
    width error it detects; last, the range of the ratio over every check and block, the checks told apart and those
    too weak to see a posterior 10% too narrow. A check made against another reference than the installed one is
    named as such."""
    lines, ratios, tests = [], [], []
    for name in REFERENCE_SETTINGS:
        path = folder / f"nuts-{name}.json"
        if not path.exists():
            lines.append(f"- `{name}`: not finished (no `{path.name}`).")
            continue
        repair = f"restore it from the repository (git checkout -- {path}) or make it again with " \
                 f"`python benchmarks/nuts_crosscheck.py --task {name} --verdict-only`"
        result = read_json(path, "NUTS cross-check results file", repair, installed=True)
        with malformed_is_damage(path, "NUTS cross-check results file", repair, installed=True):
            current = load_reference(get_task(name)).sha256 == result["reference_sha256"]
            distance, settings = result["distance"], result["settings"]
            lines += [f"`{name}` ({settings['chains']} chains of {settings['warmup']} + {settings['samples']} iterations; "
                      f"NUTS's worst split R-hat {result['nuts_max_split_rhat']:.3f}, smallest bulk ESS "
                      f"{result['nuts_min_bulk_ess']:.0f}, tail ESS {result['nuts_min_tail_ess']:.0f}; "
                      f"{sum(c['seconds'] for c in result['chains']) / 3600:.1f} h of sampling"
                      + ("" if current else "; made against an earlier reference") + "):", "",
                      crosscheck_sentence(result["test"]), "",
                      f"| block | NUTS vs ours ({NAMES[distance]}) | our floor | NUTS floor | expected if one posterior | "
                      "ratio |", "|---|---|---|---|---|---|"]
            tests.append((name, result["test"]))
            for block, row in result["blocks"].items():
                lines.append(f"| {block} | {row['nuts_vs_reference'][distance]:.4f} | "
                             f"{row['reference_noise_floor'][distance]:.4f} | {row['nuts_noise_floor'][distance]:.4f} | "
                             f"{row['expected_if_equal']:.4f} | {row['ratio']:.2f} |")
                ratios.append(row["ratio"])
            chains = result["chains"]
            lines += ["", "NUTS per chain: " + "; ".join(
                f"{label} {', '.join(shown(chain) for chain in chains)}" for label, shown in (
                    ("divergences", lambda c: f"{c['divergences']}"),
                    ("mean acceptance", lambda c: f"{c['mean_accept_prob']:.3f}"),
                    ("mean tree (leapfrog steps)", lambda c: f"{c['mean_tree_steps']:.0f}"),
                    ("step size", lambda c: f"{c['step_size']:.2e}"),
                    ("seconds of sampling", lambda c: f"{c['seconds']:.0f}"))) + ".", ""]
    if ratios:
        lines.append(f"Over every finished check and block ({len(ratios)} rows), the ratio lies between "
                     f"{min(ratios):.2f} and {max(ratios):.2f}.")
    if tests:
        apart = [f"`{name}` (p = {test['p_value']:.2g})" for name, test in tests if test["decision"] == "told apart"]
        blind = [f"`{name}`" for name, test in tests if not _sees(test, TEN_PERCENT)]
        power = f"with {crosscheck.POWER:.0%} power"
        lines += ["", f"Told apart by the permutation test at level {crosscheck.LEVEL:.0%}: "
                  + (", ".join(apart) if apart else "none") + ". "
                  + (f"Every check sees a posterior {TEN_PERCENT:.0%} too narrow {power}." if not blind else
                     f"Too few chains to see a posterior {TEN_PERCENT:.0%} too narrow {power}: " + ", ".join(blind)
                     + ".")]
    return "\n".join(lines).rstrip("\n") + "\n"


TEN_PERCENT = 0.1
"""The posterior-width error every cross-check should see with :data:`reference.crosscheck.POWER` (issue 63's bar)."""


def _sees(test: dict, width_error: float) -> bool:
    detectable = test["detectable_width_error"]
    return detectable is not None and detectable <= width_error


def crosscheck_sentence(test: dict) -> str:
    """A check's permutation test (:func:`reference.crosscheck.permutation_test`'s result) in one sentence: its
    p-value and decision, and the width error it detects; what docs/references.md and the script print."""
    detectable = test["detectable_width_error"]
    power = f"with {crosscheck.POWER:.0%} power"
    seen = (f"a posterior {detectable:.0%} too narrow is the least it detects {power}" if detectable is not None
            else f"it detects no posterior up to {max(crosscheck.WIDTH_ERRORS):.0%} too narrow {power}")
    return (f"Permutation test of the two samplers' chains at the stated test points "
            f"({test['reassignments']} reassignments): p = {test['p_value']:.3g}, **{test['decision']}** at level "
            f"{test['level']:.0%}; {seen}"
            + ("" if _sees(test, TEN_PERCENT) else f", so it cannot see a {TEN_PERCENT:.0%} error") + ".")


DIGITS_TASKS = ("digits", "digits-cnn", "digits-lstm")
"""The three tasks that share data, test blocks and prior, so that their references differ by the architecture."""


def architectures_table() -> str:
    """The total variation between each two of the digits tasks' references, per test block, beside each reference's
    own noise floor there, and each reference's accuracy on each block: what the architecture alone changes."""
    import itertools

    from bench.metrics import accuracy, total_variation

    tasks = {name: get_task(name) for name in DIGITS_TASKS}
    references = {name: load_reference(task) for name, task in tasks.items()}
    blocks = tasks["digits"].test_blocks
    heads = " | ".join(block.name for block in blocks)
    lines = [f"| total variation between the references | {heads} |", "|---" * (len(blocks) + 1) + "|"]
    for a, b in itertools.combinations(DIGITS_TASKS, 2):
        on = [slice(block.start, block.stop) for block in blocks]
        cells = " | ".join(f"{total_variation(references[a].array[rows], references[b].array[rows]):.3f}" for rows in on)
        lines.append(f"| `{a}` and `{b}` | {cells} |")
    for name in DIGITS_TASKS:
        floor = references[name].noise_floor
        lines.append(f"| noise floor of `{name}` | "
                     + " | ".join(f"{floor[block.name]['total_variation']:.4f}" for block in blocks) + " |")
    lines += ["", f"| accuracy of the reference's predictive | {heads} |", "|---" * (len(blocks) + 1) + "|"]
    for name, task in tasks.items():
        labels = task.y_test.numpy()
        lines.append(f"| `{name}` | " + " | ".join(
            f"{accuracy(references[name].array[block.start:block.stop], labels[block.start:block.stop]):.3f}"
            for block in blocks) + " |")
    return "\n".join(lines) + "\n"
