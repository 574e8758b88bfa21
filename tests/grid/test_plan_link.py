"""The planner and its simulation over a link: bytes ÷ rate and round trips a job waits, what events in flight
hide of them, and the link as a bound on how many jobs share it (its busier direction, since a link carries
each way apart)."""

from __future__ import annotations

import pytest

from sonic_hep.workflows.grid.plan import plan, report, time_per_event_over_link
from sonic_hep.workflows.grid.simulate import Scenario, knee, simulate


def test_one_event_in_flight_waits_the_bytes_and_the_round_trip():
    # 0.45 s close to the server; 3.04 MB over 100 Mb/s is 0.2432 s; one round trip of 50 ms
    assert time_per_event_over_link(0.45, 3.0e6, 0.04e6, 100, 0.050) == pytest.approx(0.7432)
    assert time_per_event_over_link(0.45, 3.0e6, 0.04e6, 0, 0.0) == pytest.approx(0.45)  # no link: as measured


def test_events_in_flight_hide_the_round_trip_but_not_the_rate():
    # 16 events in flight share one 100 ms round trip per event: 10 ms each, under the 20 ms of local work
    assert time_per_event_over_link(0.020, 0, 0, 0, 0.100, in_flight=16, alone_s=0.050) == pytest.approx(0.020)
    # 4 in flight do not: (50 + 100) / 4 ms
    assert time_per_event_over_link(0.020, 0, 0, 0, 0.100, in_flight=4, alone_s=0.050) == pytest.approx(0.0375)
    # however many are in flight, 1 MB each over 100 Mb/s takes 80 ms per event on the busier direction
    assert time_per_event_over_link(0.020, 1.0e6, 1e3, 100, 0.0, in_flight=64) == pytest.approx(0.080)


def test_the_link_bounds_the_jobs_that_share_it():
    # alone 1.2 s per event; 25 Mb/s carries 3.125 MB/s; 2.5 MB per event of which 99 % sent
    result = plan(1.0, 0.1, 2.5e6, link_gbps=0.025, latency_s_per_event=0.2, sent_fraction=0.99)
    assert result.link_knee_jobs == pytest.approx(1.2 * 3.125e6 / (0.99 * 2.5e6))
    assert result.bound == "link" and result.knee_jobs == pytest.approx(result.link_knee_jobs)
    assert "knee at 1.5 jobs on the link: the link saturates first" in report(result)
    # on a 100 Gb/s link the same jobs are bound by the server, as before
    assert plan(1.0, 0.1, 2.5e6, latency_s_per_event=0.2, sent_fraction=0.99).bound == "server"


def test_a_distant_job_alone_also_waits_the_link():
    result = plan(1.0, 0.1, 2.5e6, link_gbps=0.025, latency_s_per_event=0.2, rtt_s=0.05)
    assert result.link_s_per_event == pytest.approx(2.5e6 / 3.125e6 + 0.05)
    assert result.time_alone_s_per_event == pytest.approx(1.2 + 0.8 + 0.05)
    assert result.knee_jobs_per_server == pytest.approx(2.05 / 0.1)  # every bound's knee starts from it
    assert plan(1.0, 0.1, 2.5e6, latency_s_per_event=0.2).link_s_per_event is None  # not asked: as measured


def test_the_simulated_link_has_a_length_and_two_directions():
    alone = simulate(Scenario(jobs=1, other_s=0.100, service_s=0.010, rtt_s=0.050, events=10))
    assert alone.time_per_event_median == pytest.approx(0.160)
    answers = Scenario(jobs=1, other_s=1.0, service_s=0.01, bytes_sent=1e3, bytes_received=1e6, link_gbps=0.008)
    # 1 MB of answers per event at 1 MB/s: the receiving direction bounds at (1.0 + 0.01 + 1.001) / 1.0 jobs
    assert knee(answers) == pytest.approx((1.0 + 0.01 + 1.001e6 / 1e6) / 1.0)


def test_requests_sent_together_hide_part_of_the_wire_behind_the_server():
    # 2 requests of 1 MB each over 100 Mb/s (80 ms each on the wire), 100 ms of server compute per event (50 each):
    # the second crosses while the first is computed, so the event waits 160 + 50 ms, not 160 + 100
    two = time_per_event_over_link(0.300, 2.0e6, 0.0, 100, 0.0, requests=2, server_s=0.100)
    assert two == pytest.approx(0.300 + 0.160 + 0.050 - 0.100)
    # one request: all of its 160 ms on the wire come before the server computes anything
    assert time_per_event_over_link(0.300, 2.0e6, 0.0, 100, 0.0, requests=1, server_s=0.100) == pytest.approx(0.460)


def test_sonic_plan_plans_a_distant_link(sonic_cli):
    done = sonic_cli("plan", "--other-ms-per-event", "1000", "--server-ms-per-event", "100", "--bytes-per-event",
                     "2.5e6", "--sent-fraction", "0.99", "--link-gbps", "0.025", "--rtt-ms", "50", check=True)
    assert "over the link: B / L + round trips x RTT = 850.000 ms/event more" in done.stdout
    assert "the link saturates first" in done.stdout
