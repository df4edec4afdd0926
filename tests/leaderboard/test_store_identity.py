"""What makes two rows one run in the database (:attr:`leaderboard.store.RunRow.key`): each field of the key alone
makes another run, stored beside the first; a row equal in every one of them is the same run, whatever else differs."""

import pytest

from leaderboard.store import Store, StoreError
from tests.leaderboard.test_store import row

KEY_FIELDS = {"task": "diabetes-gap", "task_version": 2, "method": "sgd", "budget": 20.0, "seed": 1,
              "reference_sha256": "another reference", "config_hash": "another configuration"}
"""Each field of a run's key, with a value other than :func:`tests.leaderboard.test_store.row`'s."""


@pytest.mark.parametrize("field", KEY_FIELDS)
def test_each_field_of_the_key_alone_makes_another_run(tmp_path, field):
    """A run scored against another reference (or of another task version, configuration...) with other predictions
    is another run: added beside the first, never refused as the first with other predictions."""
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([row(0)])
        changed = {"seed": 0, "predictions": "other", field: KEY_FIELDS[field]}
        added, present = db.insert([row(**changed)])
        assert (len(added), present) == (1, []) and db.count() == 2


def test_a_row_equal_in_every_field_of_the_key_is_the_same_run(tmp_path):
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([row(0)])
        assert db.insert([row(0, submitter="bob", wall_seconds=9.0)])[1] != []
        with pytest.raises(StoreError, match="different predictions"):
            db.insert([row(0, predictions="other")])
