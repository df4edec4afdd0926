"""The bootstrap ensemble run from Python, as in a notebook: three seeds on toy-gap and their distance to HMC.

    python run_from_python.py [OUT_DIR]
"""

import sys

from bench.api import BenchError, run
from bootstrap_ensemble import BootstrapEnsemble

out = sys.argv[1] if len(sys.argv) > 1 else "runs"
try:
    results = [run("toy-gap", BootstrapEnsemble, budget=20, seed=seed, settings={"members": 4}, out=out)
               for seed in range(3)]
except BenchError as error:  # any failure a user can cause, as the one line the command line would print
    sys.exit(f"error: {error}")
for result in results:
    print(f"seed {result['seed']}: W2 {result['metrics']['w2']:.4f} after {result['epochs_used']:g} epochs")
