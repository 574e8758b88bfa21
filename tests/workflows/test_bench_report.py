"""Every benchmark's report: the same opening lines, its files written whole, the paths said in one line."""

from __future__ import annotations

import json

import pytest

from sonic_hep.workflows.bench._report import BenchReport, header


def test_a_report_writes_page_data_and_figures_and_says_where(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["sonic", "bench", "gpu-models", "--out", str(tmp_path / "out")])
    report = BenchReport.start("gpu-models", tmp_path / "out")
    data = {**report.fields(), "rows": [1, 2]}
    text = "\n".join([*header("sonic bench gpu-models", data, "Inputs: shapes"), "| a |"])
    report.write(text, data, {"gpu_models.png": lambda path: path.write_bytes(b"\x89PNG"),
                              "gpu_models_extra.png": lambda path: path.write_bytes(b"\x89PNG")})
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["gpu_models.json", "gpu_models.md", "gpu_models.png",
                                                     "gpu_models_extra.png"]
    assert json.loads((out / "gpu_models.json").read_text())["command"] == "sonic bench gpu-models --out OUT"
    page = (out / "gpu_models.md").read_text()
    assert page.startswith("# sonic bench gpu-models\n\nCommand: `sonic bench gpu-models --out OUT`  \nMachine: ")
    assert f"Date: {report.date}  \nInputs: shapes\n" in page
    printed = capsys.readouterr().out
    assert printed.endswith(f"results in {out}/gpu_models.{{md,json,png}} and {out}/gpu_models_extra.png\n")


def test_a_figure_that_fails_leaves_no_temporary_and_a_partial_report_still_reads(tmp_path):
    report = BenchReport.start("scale", tmp_path)

    def broken(path):
        path.write_bytes(b"half")
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError, match="plot failed"):
        report.write("# page\n", {"machine": "m"}, {"scale.png": broken})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale.json", "scale.md"]
    assert header("t", {"machine": "m"}) == ["# t", "", "Machine: m", ""]
