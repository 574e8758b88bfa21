"""The discrete-event simulation of jobs, servers and a link against closed-form cases."""

from __future__ import annotations

import pytest

from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.simulate import Scenario, from_measurement, knee, simulate, steady_rate


@pytest.mark.parametrize("jobs", [1, 5, 10, 11, 15, 30])
def test_one_server_deterministic_times(jobs):
    """t_other = 1 s, t_ml = 0.1 s: flat at 1.1 s up to the knee (1.1 / 0.1 = 11 jobs), then jobs × 0.1 s."""
    result = simulate(Scenario(jobs=jobs, other_s=1.0, service_s=0.1, events=40))
    assert result.knee_jobs == pytest.approx(11.0)
    assert result.time_per_event_median == pytest.approx(max(1.1, jobs * 0.1), rel=0.02)
    assert result.events_per_s == pytest.approx(min(jobs / 1.1, 10.0), rel=0.03)
    # busy fraction over the whole run (its start and end included): the closed form within a few per cent
    assert result.server_utilisation[0] == pytest.approx(min(1.0, jobs * 0.1 / 1.1), rel=0.06)


def test_several_instances_and_servers_move_the_knee():
    assert knee(Scenario(jobs=1, other_s=1.0, service_s=0.1, instances=2, servers=3)) == pytest.approx(66.0)
    result = simulate(Scenario(jobs=40, servers=2, other_s=1.0, service_s=0.1, events=30))
    assert result.events_per_s == pytest.approx(20.0, rel=0.03)  # two saturated servers


def test_dynamic_batching_merges_waiting_requests():
    """8 jobs without other work; an execution of any batch costs 0.1 s (fixed=1): batching makes 8 of them
    one execution, so throughput is 8 / 0.1 s instead of 1 / 0.1 s."""
    single = simulate(Scenario(jobs=8, other_s=0.0, service_s=0.1, events=30))
    # jobs in lock-step: staggered ones settle into two alternating batches of 4 (40/s), as a server would
    batched = simulate(Scenario(jobs=8, other_s=0.0, service_s=0.1, max_batch=8, queue_delay_s=0.001, fixed=1.0,
                                events=30, stagger=False))
    assert single.events_per_s == pytest.approx(10.0, rel=0.02)
    assert batched.events_per_s == pytest.approx(80.0, rel=0.03)
    # fixed=0: a batch costs what its requests cost alone, so batching changes nothing
    plain = simulate(Scenario(jobs=8, other_s=0.0, service_s=0.1, max_batch=8, fixed=0.0, events=30))
    assert plain.events_per_s == pytest.approx(10.0, rel=0.02)


def test_a_slow_link_caps_the_event_rate():
    """1 MB per event on 0.08 Gb/s (10 MB/s): at most 10 events/s whatever the servers do."""
    result = simulate(Scenario(jobs=8, servers=4, other_s=0.01, service_s=0.001, bytes_sent=1e6, link_gbps=0.08,
                               events=30))
    assert result.events_per_s == pytest.approx(10.0, rel=0.03)
    assert result.link_utilisation == pytest.approx(1.0, rel=0.05)
    assert result.peak_link_bytes_per_s == pytest.approx(10e6, rel=0.05)


@pytest.mark.parametrize("servers,jobs", [(2, 7), (3, 16), (4, 50)])
def test_balanced_load(servers, jobs):
    result = simulate(Scenario(jobs=jobs, servers=servers, other_s=0.5, service_s=0.05, requests=3, service_cv=0.3,
                               other_cv=0.3, events=30))
    even = 1.0 / servers
    assert all(abs(share - even) <= 0.1 * even for share in result.server_share), result.server_share


def test_spread_service_times_queue_before_the_knee():
    """Random service times make requests queue already below the deterministic knee (M/G/1-like)."""
    steady = simulate(Scenario(jobs=8, other_s=1.0, service_s=0.1, events=60))
    spread = simulate(Scenario(jobs=8, other_s=1.0, service_s=0.1, service_cv=1.0, other_cv=1.0, events=60))
    assert spread.queue_s_per_request > steady.queue_s_per_request


def test_settings_from_a_measurement_split_the_event_over_its_requests():
    settings = from_measurement(2.0, 0.3, 3.0, bytes_per_event=900.0, sent_fraction=2 / 3, servers=2)
    assert settings == {"other_s": 2.0, "service_s": pytest.approx(0.1), "requests": 3, "bytes_sent": pytest.approx(200.0),
                        "bytes_received": pytest.approx(100.0), "servers": 2}


def test_steady_rate_counts_the_common_window():
    assert steady_rate([[1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.5]]) == pytest.approx(2.0)
    assert steady_rate([]) == 0.0


def test_impossible_settings_are_named():
    with pytest.raises(GridError, match="servers must be at least 1"):
        simulate(Scenario(jobs=1, servers=0))
    with pytest.raises(GridError, match="fixed"):
        simulate(Scenario(jobs=1, fixed=2.0))


def test_jobs_sharing_few_cores_saturate_them_before_the_server():
    """16 jobs whose events each need 50 ms of CPU on 2 cores: at most 40 events/s, however fast the server."""
    result = simulate(Scenario(jobs=16, other_s=0.1, cpu_s=0.05, cores=2, service_s=0.001, events=30))
    assert result.events_per_s == pytest.approx(40.0, rel=0.03)
    assert result.knee_jobs == pytest.approx((0.1 + 0.001) / 0.025)
    alone = simulate(Scenario(jobs=1, other_s=0.1, cpu_s=0.05, cores=2, service_s=0.001, events=30))
    assert alone.time_per_event_median == pytest.approx(0.101)  # the CPU is part of other_s, not added to it
