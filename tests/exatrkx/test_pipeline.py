"""The whole workflow with direct inference on held-out events: physics goals, output file, errors."""

from __future__ import annotations

import logging

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError
from sonic_hep.modules.exatrkx.performance import summed_counts

from tests.exatrkx.conftest import EVENTS


def test_physics_goals_on_held_out_events(direct_run):
    with uproot.open(direct_run.output) as file:
        counts = summed_counts(file["Events"])
    assert counts.reconstructable > 100 * EVENTS  # a real sample, not a handful of particles
    assert counts.efficiency >= 0.90, counts.summary(1.0)
    assert counts.fake_rate <= 0.05, counts.summary(1.0)
    assert 0.0 <= counts.duplicate_rate <= 0.05, counts.summary(1.0)


def test_track_candidates_in_the_output(direct_run, events_file):
    with uproot.open(direct_run.output) as file:
        out = file["Events"].arrays(library="ak")
        hist_names = {key.split(";")[0] for key in file.keys()}
    with uproot.open(events_file) as file:
        n_hits = file["Events"]["nHit"].array(library="np")
    assert len(out) == EVENTS
    np.testing.assert_array_equal(ak.to_numpy(ak.num(out.HitTrack)), n_hits)
    # candidates are numbered 0..nTrack-1 and their hit counts are the labels' multiplicities
    for event in out:
        labels = ak.to_numpy(event.HitTrack)
        assert labels.max() + 1 == event.nTrack
        np.testing.assert_array_equal(np.bincount(labels[labels >= 0], minlength=int(event.nTrack)),
                                      ak.to_numpy(event.Track_nhits))
    assert ak.all(out.Track_nhits >= 3) and ak.all(out.Track_pt > 0)
    assert "performance/reconstructed_pt" in hist_names and "performance/reconstructable_pt" in hist_names


def test_every_stage_ran(direct_run):
    labels = [m["label"] for m in direct_run.timing.report()["modules"]]
    assert labels == ["features", "embedding", "graph", "filter", "gnn", "labeling", "tracks", "matching",
                      "performance"]  # the ensemble was pruned: nothing consumes it


def test_working_point_override_changes_the_graph(events_file, tmp_path):
    """A module parameter overrides the repository's working point (no edges: no candidates)."""
    from tests.exatrkx.conftest import run_workflow

    result = run_workflow(events_file, tmp_path / "tiny.root", "graph.radius=0.000001", "source.max_events=1")
    with uproot.open(result.output) as file:
        assert file["Events"]["nTrack"].array(library="np").tolist() == [0]


def test_ensemble_needs_a_server(events_file):
    config = cfgmod.load("exatrkx", [f"source.files=['{events_file}']", "tracks.labels=ensemble:labels",
                                     "output.file=null", "source.max_events=1"])
    with pytest.raises(ConfigError, match=r"module 'ensemble'.*services.inference.mode=sonic"):
        Process(config).run(progress=False)


def test_cli_run_reports_the_rates(sonic_cli, events_file, tmp_path):
    result = sonic_cli("run", "exatrkx", "-i", events_file, "-o", tmp_path / "cli.root", "-n", "2", "--no-progress")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if "Exa.TrkX (performance)" in line)
    assert "tracking efficiency" in line and "fake rate" in line and "duplicate rate" in line
    assert "labeling" in result.stdout  # the per-module timing table


def test_default_run_prunes_the_unused_pipeline_without_a_warning(events_file, tmp_path, caplog):
    """The shipped config carries both pipelines on purpose; pruning the one not chosen is a notice, not a
    warning (a shipped configuration's default run prints no WARNING)."""
    config = cfgmod.load("exatrkx", [f"source.files=['{events_file}']", f"output.file='{tmp_path / 'o.root'}'"])
    with caplog.at_level(logging.INFO):
        process = Process(config)
    assert process.graph.pruned == ["ensemble"]
    assert "ensemble" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
