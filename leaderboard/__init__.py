"""The leaderboard: a store of runs re-scored from their predictions, rendered tables and pages, the CI gate."""
