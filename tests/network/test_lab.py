"""The network lab: what it makes is really there and really shaped, and nothing of it is left afterwards.

The link's delay and rate are checked by measuring them, with lower bounds only: a slow machine makes a
transfer slower, never faster, so "a 30 ms link answers in no less than 30 ms" and "1 MB at 20 Mb/s takes no
less than 0.4 s" hold however loaded the machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from sonic_hep.workflows.netlab import LabRefused, Link, NetworkLab, namespaces, sweep_leftovers
from sonic_hep.workflows.netlab.link import loss_bytecode
from tests.polling import gone, wait_for

pytestmark = pytest.mark.integration


def test_a_link_reads_as_an_operator_writes_it():
    link = Link.parse("rate=100mbit, rtt=50ms, jitter=5ms, loss=0.1%")
    assert (link.rate_mbit, link.rtt_ms, link.jitter_ms, link.loss) == (100.0, 50.0, 5.0, 0.001)
    assert Link.parse("rate=10gbit").rate_mbit == 10_000 and Link.parse("loss=0.01").loss == 0.01
    assert Link.parse("").describe() == "unshaped"
    assert Link.parse("rate=10gbit,rtt=1ms,loss=1%").describe() == "10 Gb/s, RTT 1 ms, loss 1 %"
    for text, culprit in (("rtt=fast", "'rtt=fast'"), ("speed=1gbit", "'speed'"), ("loss=150%", "loss")):
        with pytest.raises(Exception, match=culprit) as refused:
            Link.parse(text)
        assert "\n" not in str(refused.value)


def test_loss_is_a_fraction_of_the_random_numbers_range():
    count, load, compare, drop, keep = loss_bytecode(0.25).split(",")
    assert count == "4" and load == "32 0 0 4294963256"  # A = a random u32 (SKF_AD_OFF + SKF_AD_RANDOM)
    assert compare == f"53 1 0 {2**30}"  # jump to keep when A >= a quarter of 2**32
    assert (drop, keep) == ("6 0 0 65538", "6 0 0 65537")  # classes 1:2 (holds nothing) and 1:1


def test_refused_in_one_line_where_namespaces_cannot_be_made(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabRefused, match="needs root; this process runs as uid 1000$"):
        NetworkLab().open()
    monkeypatch.setattr(namespaces.shutil, "which", lambda tool: None if tool == "tc" else "/usr/sbin/ip")
    with pytest.raises(LabRefused, match=r"^network lab: tc not found \(install iproute2\)$"):
        NetworkLab().open()


def test_the_relay_delays_by_the_round_trip_asked(network_lab):
    network_lab.shape(Link(rtt_ms=30))
    assert network_lab.uses_relay  # this kernel has no netem: the relay is in the path
    rtts = network_lab.measure(pings=10)["rtt_ms"]
    # the lab takes the relay's own ~0.1 ms (at most 0.5 ms) off the delay it asks for: never more than that under
    assert min(rtts) >= 30 - 0.5 - network_lab.relay_base_rtt_ms, rtts
    network_lab.shape(Link())
    assert not network_lab.uses_relay  # no delay asked, no relay left in the path


def test_the_rate_is_shaped_both_ways(network_lab):
    network_lab.shape(Link(rate_mbit=20))
    moved = network_lab.measure(pings=0, upload=1_000_000, download=1_000_000)
    # half the time 1 MB takes at 20 Mb/s: htb lets a burst through at once and the sender's buffers hide a
    # little more, while an unshaped veth moves 1 MB in milliseconds, so this still fails without shaping
    least = 0.5 * 1_000_000 * 8 / 20e6
    assert moved["upload_s"] >= least and moved["download_s"] >= least, moved


def test_loss_drops_packets_in_the_kernel(network_lab):
    network_lab.shape(Link(loss=0.05))
    network_lab.measure(pings=0, upload=2_000_000)  # TCP delivers it all, retransmitting what was dropped
    classes = network_lab.run(["tc", "-s", "class", "show", "dev", namespaces.DEVICE]).stdout
    dropping = classes.split("class htb 1:2")[1]
    assert int(dropping.split("dropped ")[1].split(",")[0]) > 0, classes


def test_a_partition_is_silent_and_heals(network_lab):
    network_lab.shape(Link())
    network_lab.partition()
    with pytest.raises(subprocess.TimeoutExpired):  # no answer and no refusal: the connection just hangs
        network_lab.run(["python", str(namespaces.__file__).replace("namespaces.py", "probe.py"), "measure",
                         "10.77.0.1:7007", "--pings=1"], timeout=3)
    network_lab.shape(Link())
    assert len(network_lab.measure(pings=2)["rtt_ms"]) == 2


def test_nothing_is_left_behind_when_the_block_fails():
    try:
        lab = NetworkLab(Link(rtt_ms=5)).open()
    except LabRefused as refusal:
        pytest.skip(str(refusal))
    names = dict(lab.names)
    with pytest.raises(RuntimeError, match="the test failed"), lab:
        pids = [pid for name in names.values() for pid in namespaces.pids(name)]
        assert len(pids) == 2, [open(f"/proc/{pid}/cmdline").read() for pid in pids]  # the probe's server, the relay
        raise RuntimeError("the test failed")
    assert not set(names.values()) & set(namespaces.names())
    assert all(gone(pid) for pid in pids)


def test_a_killed_run_s_namespaces_are_swept_by_the_next_lab(tmp_path):
    if namespaces.refusal():
        pytest.skip(namespaces.refusal())
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from sonic_hep.workflows.netlab import Link, NetworkLab
        lab = NetworkLab(Link(rtt_ms=5)).open()
        print(" ".join(lab.names.values()), flush=True)
        time.sleep(600)
    """))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        names = child.stdout.readline().split()
        assert len(names) == 2 and set(names) <= set(namespaces.names())
    finally:
        child.send_signal(signal.SIGKILL)  # no cleanup runs: its namespaces and their processes stay
        child.wait()
    left = [pid for name in names for pid in namespaces.pids(name)]
    assert left  # the probe server and the relay outlived the killed run
    assert set(sweep_leftovers()) >= set(names)
    assert not set(names) & set(namespaces.names())
    wait_for(lambda: all(gone(pid) for pid in left), 30, "the killed run's processes to end")
