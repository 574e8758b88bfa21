"""The Python API (sonic_hep.framework.run / events): a result object equal to what `sonic run` writes, overrides
as strings or a dict, histograms without an output file, and products iterated in memory without any file."""

from __future__ import annotations

import os

import awkward as ak
import numpy as np
import pytest
import uproot

import sonic_hep.modules.common.collections  # noqa: F401 - registers the module types
import sonic_hep.modules.common.histograms  # noqa: F401
import sonic_hep.modules.common.synthetic  # noqa: F401
from sonic_hep.framework import ConfigError, ModuleError, Result, events, run
from sonic_hep.workflows.compare import compare_files


def _config(write_config, files, **extra_modules):
    return write_config({
        "process": "apitest",
        "source": {"files": [str(f) for f in files], "chunk_size": 60},
        "modules": {"ht": {"type": "CollectionSum", "min_pt": 30.0},
                    "two": {"type": "MinCountFilter", "min_pt": 30.0, "min_count": 2},
                    "hht": {"type": "Histogram1D", "src": "ht:sum", "name": "ht", "bins": 20, "high": 1000.0},
                    **extra_modules},
        "path": ["ht", "two", "hht", *extra_modules],
        "output": {"products": ["ht:*", "MET_pt"]},
        "options": {"streams": 2, "threads": 2},
    })


def _passing(files) -> np.ndarray:
    """Which events have two jets above 30 GeV, and their HT above 30 GeV, from plain uproot."""
    keep, hts = [], []
    for path in files:
        with uproot.open(path) as handle:
            pt = handle["Events"]["Jet_pt"].array()
        keep.append(ak.to_numpy(ak.sum(pt >= 30.0, axis=1) >= 2))
        hts.append(ak.to_numpy(ak.sum(ak.where(pt >= 30.0, pt, 0.0), axis=1)))
    return np.concatenate(keep), np.concatenate(hts)


def test_run_returns_what_sonic_run_writes(nano_files, write_config, sonic_cli, tmp_path):
    config = _config(write_config, nano_files)
    result = run(config, {"source.chunk_size": 25}, output=str(tmp_path / "api.root"))
    assert isinstance(result, Result)
    keep, ht = _passing(nano_files)
    assert result.events == len(keep) and result.written == int(keep.sum()) > 0
    assert result.output == str(tmp_path / "api.root") and os.path.exists(result.output)
    assert (result.modules["two"].visited, result.modules["two"].passed) == (len(keep), int(keep.sum()))
    assert result.modules["hht"].visited == int(keep.sum()) and result.modules["ht"].latency_ms is None
    assert result.report["events"] == result.events and "two" in str(result)
    # the histogram holds the HT of the events that passed; the output file holds the same histogram
    histogram = result.histograms["hht/ht"]
    assert histogram.sum() == int(keep.sum())
    assert np.array_equal(histogram.values(), np.histogram(ht[keep], bins=20, range=(0, 1000))[0])
    with uproot.open(result.output) as handle:
        assert np.array_equal(handle["hht/ht"].values(), histogram.values())
    cli = tmp_path / "cli.root"
    sonic_cli("run", config, "-o", cli, "-p", "source.chunk_size=25", "--no-progress", "-q", check=True, timeout=120)
    comparison = compare_files(result.output, str(cli), atol=0, rtol=0)
    assert comparison.equal(), comparison.summary()


def test_overrides_as_strings_or_dict_and_config_as_dict(nano_files, write_config, tmp_path):
    config = _config(write_config, nano_files)
    as_strings = run(config, ["source.max_events=30", "two.min_count=1"])
    as_dict = run(config, {"source.max_events": 30, "two.min_count": 1})
    assert as_strings.events == as_dict.events == 30 and as_strings.written == as_dict.written
    assert as_strings.output is None and not list(tmp_path.glob("*.root"))  # no output.file: nothing written
    import yaml

    from_dict = run(yaml.safe_load(config.read_text()), {"source.max_events": 30, "two.min_count": 1})
    assert from_dict.written == as_dict.written
    with pytest.raises(ConfigError, match=r"two\.min_count"):
        run(config, {"two.min_count": "many"})


def test_events_iterates_products_in_memory(nano_files, write_config, tmp_path):
    config = _config(write_config, nano_files)
    keep, ht = _passing(nano_files)
    before = set(os.listdir(tmp_path))
    stream = events(config, {"output.file": str(tmp_path / "ignored.root")})
    seen = [(event.index, event["ht:sum"], float(event["MET_pt"]), event.passed) for event in stream]
    assert set(os.listdir(tmp_path)) == before  # nothing written, not even the configured output
    assert [index for index, *_ in seen] == list(np.flatnonzero(keep))
    assert np.allclose([s for _, s, _, _ in seen], ht[keep], rtol=1e-6)
    assert all(passed for *_, passed in seen)
    assert stream.result is not None and stream.result.written == len(seen)
    assert stream.result.histograms["hht/ht"].sum() == len(seen)
    everything = list(events(config, everything=True))
    assert len(everything) == len(keep) and [e.passed for e in everything] == list(keep)
    with pytest.raises(KeyError, match="output.products"):
        everything[0]["good:objects"]


def test_leaving_the_loop_stops_the_job_and_errors_reach_the_loop(nano_files, write_config, tmp_path):
    config = _config(write_config, nano_files)
    stream = events(config, buffer=2)
    for count, _ in enumerate(stream, 1):
        if count == 3:
            break
    assert not stream._thread.is_alive() and stream.result is None
    failing = _config(write_config, nano_files,
                      gate={"type": "WaitForFile", "path": str(tmp_path / "never"), "timeout_s": 0.01})
    with pytest.raises(ModuleError, match="gate"):
        for _ in events(failing, {"output.products": ["gate:*"]}):
            pass
