"""The docs' generated figures agree with their sources, and the block mechanism rewrites only what it owns."""

import pytest

from bench import docblocks
from bench.errors import BenchError


@pytest.mark.shipped_store  # the shipped-fidelity block is the committed store's
def test_every_generated_block_of_the_docs_is_what_its_source_gives():
    assert docblocks.stale(docblocks.doc_files()) == [], "run `python -m bench.docblocks --write`"
    names = [name for path in docblocks.doc_files() for name, _ in docblocks.blocks(path.read_text())]
    assert set(names) == set(docblocks.GENERATORS), "every generator writes a block some doc shows"


def test_a_block_is_rewritten_between_its_markers_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setitem(docblocks.GENERATORS, "demo", lambda: "| fresh |\n")
    text = ("prose before\n<!-- generated: demo by `python -m bench.docblocks --write` -->\n| stale |\n"
            "<!-- end: demo -->\nprose after\n")
    path = tmp_path / "doc.md"
    path.write_text(text)
    assert docblocks.stale([path]) == [f"{path}: the block 'demo' differs from what `{docblocks.COMMAND}` writes "
                                       "from its sources"]
    assert docblocks.rewritten(text, path) == text.replace("| stale |", "| fresh |")
    with pytest.raises(BenchError, match="no generator writes the block 'other'"):
        docblocks.rewritten(text.replace("demo", "other"), path)
