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
    for unended in (text.replace("<!-- end: demo -->", ""), text.replace("<!-- end: demo -->", "<!-- end generated -->"),
                    text + text.split("prose after")[0].rsplit("<!-- end", 1)[0]):
        with pytest.raises(BenchError, match="the block 'demo' has no end marker `<!-- end: demo -->`"):
            docblocks.rewritten(unended, path)
    with pytest.raises(BenchError, match="the block 'other' has no end marker"):
        docblocks.rewritten(text + "<!-- generated: other by `x` -->\n", path)


def test_a_kept_measurement_is_rendered_with_its_command_machine_and_columns_in_order(tmp_path, monkeypatch):
    from bench import scripts

    monkeypatch.setattr("sys.argv", ["cost.py", "--epochs", "50"])
    path = tmp_path / "cost.json"
    scripts.keep(path, "benchmarks/cost.py", 0.0, {"charged": [{"task": "toy-gap", "sgd": 1.234, "de": 0.5},
                                                               {"task": "digits", "sgd": 2.0}]}, epochs=50)
    monkeypatch.setattr(docblocks, "MEASUREMENTS", tmp_path)
    monkeypatch.setattr(docblocks, "ROOT", tmp_path)
    text = docblocks.measured_table("cost", "charged", ".2f")
    heading, _, table = text.partition("\n\n")
    assert heading.startswith("`python benchmarks/cost.py --epochs 50`: ") and "thread(s)" in heading
    lines = table.splitlines()
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == ["task", "sgd", "de"]
    assert [cell.strip() for cell in lines[2].strip("|").split("|")] == ["toy-gap", "1.23", "0.50"]
    assert [cell.strip() for cell in lines[3].strip("|").split("|")] == ["digits", "2.00", ""]
    with pytest.raises(BenchError, match="no table 'marginal'; it holds charged"):
        docblocks.measured_table("cost", "marginal", ".2f")
    with pytest.raises(BenchError, match="kept measurement"):
        docblocks.measured_table("peers", "ratios", ".2f")
