"""Deprecated alias of :mod:`bench.hmc`, the HMC kernel that the references and the ``hmc`` method share (it moved
to the ground floor in 0.2.0, so that neither imports the other). Importing it warns; it goes in 0.3.0."""

import sys
import warnings

from bench import hmc

warnings.warn("reference.hmc moved to bench.hmc; the old name goes in bdl-bench 0.3.0", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = hmc
