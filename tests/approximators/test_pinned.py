"""Seeded runs reproduce bit for bit: a few predictions of each method, pinned in this file.

A change to the training engine, an update rule, the order of random draws or the loss changes
these bits. The pins were taken on the machine CI runs on (``PINNED_ON``); elsewhere round-off
differs, and the test is skipped rather than loosened (``bench check`` then compares statistically).
To re-pin after a deliberate numerical change, run this file with ``BDL_BENCH_REPIN=1``, paste the
printed table, and say so in the commit.
"""

import os

import pytest

from bench.runner import environment

PINNED_ON = {"torch": "2.13.0+cpu", "cpu": "AMD EPYC", "torch_threads": 1}
"""What the bits depend on: PyTorch's build, the CPU's kernels and the thread count (the suite runs with one; the
pins, taken with two, were the same bits with one), not the operating system's kernel string."""

# (method, task, budget, overrides) -> the predictive's flat values at positions 0, len // 3 and -1 (float.hex).
# Seed 7. Re-pinned after the engine's speed change of issue 10 (baddbmm layers, the prior's gradient in
# closed form): predictions moved by at most 3.6e-7 relative for sgd/de/ae/sae, 1.8e-6 for the others.
PINS = [
    ("sgd", "toy-gap", 3, {}, ["0x1.3aaf79acfe052p+0", "-0x1.2a4d79119b0ffp-1", "0x1.7399e0d31bf70p+0"]),
    ("sgd", "digits", 2, {}, ["0x1.f50f52e09cb86p-4", "0x1.a676ec0c95776p-4", "0x1.b535ddfaad2b8p-4"]),
    ("de", "diabetes-gap", 4, {"members": 2},
     ["0x1.e5aaf2ece0fbdp-1", "-0x1.9e5596426a538p-1", "0x1.2493d60642e27p-4"]),
    ("de", "digits", 2, {"members": 2}, ["0x1.ab1eefc6f4d20p-4", "0x1.791d8bf3914d8p-4", "0x1.abbf45178ad19p-4"]),
    ("ae", "toy-gap", 6, {"epochs": 3}, ["0x1.54c1964a21210p-3", "-0x1.7efa5c159292cp-1", "0x1.e84750df8a0a2p-2"]),
    ("ae", "digits", 4, {"epochs": 2}, ["0x1.a5f8e5203ccb9p-11", "0x1.0e6a9ac470d59p-12", "0x1.ca38fd6276b24p-5"]),
    ("sae", "toy-gap", 8, {"first_epochs": 3, "sequential_epochs": 1},
     ["0x1.365ac190337f0p-2", "0x1.443905fbe1a77p+0", "0x1.2325856cb6fb2p-3"]),
    ("sae", "digits", 5, {"first_epochs": 2, "sequential_epochs": 1, "chains": 2},
     ["0x1.b1414272a961dp-13", "0x1.6b851602520ccp-14", "0x1.8a2bfe19d9893p-4"]),
    # Methods added on the engine (issue 10), pinned when they were added.
    ("swag", "toy-gap", 20, {}, ["0x1.5b316f0c0afc6p+0", "-0x1.d3f10815d9e30p-6", "-0x1.5c021022377d7p+0"]),
    ("swag-diag", "digits", 20, {}, ["0x1.5333e7107e449p-8", "0x1.26c6a0dc322ebp-10", "0x1.52f1be8f5226bp-6"]),
    ("multiswag", "diabetes-gap", 60, {}, ["0x1.2c57fe2f42a69p+0", "-0x1.b01322634fe26p-2", "0x1.5e8a513bd4faap-3"]),
    ("sgld", "digits", 20, {}, ["0x1.216cdde739b77p-8", "0x1.0e68e8df0d804p-10", "0x1.0f9e01471e653p-5"]),
    ("sgld", "toy-gap", 20, {}, ["-0x1.64733546c1e8cp-3", "-0x1.2873e4075cf72p+0", "0x1.5b87d614a91ccp-1"]),
    ("csgmcmc", "toy-gap", 30, {}, ["0x1.17860f859dc53p+1", "-0x1.b206a6756a429p-1", "-0x1.75d1fc8850329p+1"]),
    ("csgmcmc", "digits", 30, {"form": "sgld"},
     ["0x1.4a03eb0d67288p-9", "0x1.8405f13832048p-12", "0x1.427f6ccee4fdbp-6"]),
]


def _pinned_values(fit, method, task, budget, overrides):
    flat = fit(method, task, budget, seed=7, **overrides)[0].ravel()
    return [float(flat[i]).hex() for i in (0, len(flat) // 3, len(flat) - 1)]


@pytest.mark.parametrize("method,task,budget,overrides,expected", PINS,
                         ids=[f"{p[0]}-{p[1]}-{i}" for i, p in enumerate(PINS)])
def test_seeded_predictions_are_pinned(fit, method, task, budget, overrides, expected):
    here = {k: environment()[k] for k in PINNED_ON}
    if here != PINNED_ON and not os.environ.get("BDL_BENCH_REPIN"):
        pytest.skip(f"pins were taken on {PINNED_ON}; this machine is {here}")
    values = _pinned_values(fit, method, task, budget, overrides)
    if os.environ.get("BDL_BENCH_REPIN"):
        print((method, task, budget, overrides, values))
        return
    assert values == expected
