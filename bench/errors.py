"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


class BenchError(Exception):
    """Base class for every error that is the user's to fix (bad input, missing data, budget)."""


class BudgetExhausted(BenchError):
    """A method asked for more training data than its epoch budget allows."""


class MetricInputError(BenchError, ValueError):
    """Predictions or references that cannot be scored (shape, finiteness, not probabilities)."""


class ReferenceMismatch(BenchError):
    """A reference file is missing, corrupted or does not match its task."""


class ConfigError(BenchError, ValueError):
    """An unknown method, task or hyper-parameter, or a value of the wrong type."""


class MeterMisuse(BenchError, AttributeError):
    """A method used the budget meter in a way that would miscount its budget (a zero or negative
    charge, no copies, a write to the meter)."""


class TrainingDiverged(BenchError):
    """A method's parameters became non-finite (a step size too large for the task)."""
