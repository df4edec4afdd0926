"""bdl-bench: how close does an approximate inference method, under a fixed epoch budget, get to HMC?"""

__version__ = "0.1.0"
