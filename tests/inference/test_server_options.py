"""ServerOptions: one options type for every server the project starts, its checks and the flags made from it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from sonic_hep.framework.errors import ConfigError, InferenceError, SonicError
from sonic_hep.framework.inference.serving.server_options import ServerOptions, fallback_server, option_fields
from sonic_hep.framework.settings import Problem
from sonic_hep.workflows.cli import build_parser


def _error(problem: Problem) -> ValueError:
    return ValueError(f"{problem.key}: {problem.message}")


def test_defaults_are_a_private_cpu_server_that_serves_what_it_can():
    options = ServerOptions.from_dict({}, error=_error)
    assert options == ServerOptions()
    assert (options.device, options.backend, options.strict, options.cpus) == ("cpu", "auto", False, None)
    assert (options.host, options.http_host, options.metrics_host) == ("127.0.0.1",) * 3
    assert options.given() == {}
    assert all(f.metadata["help"] for f in option_fields())  # every field says what it does


@pytest.mark.parametrize("raw, message", [
    ({"ort_threads": 0}, "ort_threads: must be at least 1, got 0"),
    ({"python_shm_mb": 0}, "python_shm_mb: must be at least 1, got 0"),
    ({"grpc_port": 70000}, "grpc_port: must be at most 65535, got 70000"),
    ({"startup_timeout": 0}, "startup_timeout: must be a positive number of seconds, got 0.0"),
    ({"shm_janitor_s": -1}, "shm_janitor_s: must be at least 0, got -1.0"),
    ({"device": "tpu"}, "device: must be one of cpu, gpu, not 'tpu'"),
    ({"model_control": "poll"}, "model_control: must be one of none, explicit, not 'poll'"),
    ({"cpus": "0-x"}, 'cpus: must be a core list such as "0-3,8" or [0, 1], not \'0-x\''),
    ({"ort_threads": "2"}, "ort_threads: expected int, got str '2'"),
])
def test_a_value_out_of_bounds_is_one_line_naming_the_key(raw, message):
    with pytest.raises(ValueError) as caught:
        ServerOptions.from_dict(raw, error=_error)
    assert str(caught.value) == message


def test_an_unknown_key_names_the_closest_fields():
    with pytest.raises(ConfigError, match=r"^services\.inference\.fallback_server\.python_shm: unknown fallback server "
                                          r"option \(did you mean 'python_shm_mb'"):
        fallback_server({"python_shm": 64})


def test_core_lists_and_paths_are_read_as_users_write_them(tmp_path):
    options = fallback_server({"cpus": "3,0-1", "workdir": tmp_path, "models": "demo_mlp"})
    assert options.cpus == [0, 1, 3] and options.workdir == str(tmp_path) and options.models == ["demo_mlp"]


@pytest.mark.parametrize("given, culprit, words", [
    ({"tls_cert": "cert"}, "tls_key", "is missing: TLS needs both tls_cert and tls_key"),
    ({"tls_key": "key"}, "tls_cert", "is missing: TLS needs both tls_cert and tls_key"),
    ({"tls_root_cert": "ca"}, "tls_cert", "is missing: mutual TLS (tls_root_cert) needs both tls_cert and tls_key"),
])
def test_the_tls_pair_is_checked_in_one_place_for_every_front_end(tmp_path, given, culprit, words):
    paths = {k: str(tmp_path / v) for k, v in given.items()}
    for name in paths.values():
        open(name, "w").close()
    with pytest.raises(ConfigError) as config:
        fallback_server(paths)
    assert str(config.value) == f"services.inference.fallback_server.{culprit}: {words}"
    with pytest.raises(InferenceError) as server:  # a server built in code: the same check, the same words
        from sonic_hep.framework.inference.serving.server import TritonServer
        TritonServer([tmp_path], **paths)
    assert str(server.value) == f"server {culprit} {words}"


def test_a_tls_file_that_does_not_exist_is_named(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ValueError, match=r"^tls_key: file .*nowhere\.key does not exist$"):
        ServerOptions.from_dict({"tls_cert": str(cert), "tls_key": str(tmp_path / "nowhere.key")}, error=_error)


def _start_parser() -> argparse.ArgumentParser:
    """The parser of ``sonic server start``, walked to as argparse keeps it."""
    parser = build_parser()
    for name in ("server", "start"):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
        parser = sub.choices[name]
    return parser


def test_sonic_server_start_has_one_flag_per_field_and_nothing_else():
    start = _start_parser()
    dests = {a.dest for a in start._actions} - {"help", "verbose", "repository", "config"}
    assert dests == {f.name for f in option_fields()}
    spellings = {s for a in start._actions for s in a.option_strings}
    assert {"--" + f.name.replace("_", "-") for f in option_fields()} <= spellings
    assert {"--model", "-m", "-r"} <= spellings  # the documented short spellings stay
    text = start.format_help()
    assert "cores the server and its python stubs may run on" in text  # the field's help, not a second one


def test_flags_become_the_same_options_as_the_configuration_keys():
    from sonic_hep.workflows.cli.server import server_options

    args = _start_parser().parse_args(["-r", "x", "--cpus", "0", "--backend", "python", "--env", "A=1", "-m", "a",
                                       "--strict", "--model-control", "explicit"])
    options = server_options(args)
    assert options == fallback_server({"cpus": [0], "backend": "python", "env": {"A": "1"}, "models": ["a"],
                                       "strict": True, "model_control": "explicit"})
    with pytest.raises(SonicError, match=r"^--ort-threads: must be at least 1, got 0$"):
        server_options(_start_parser().parse_args(["-r", "x", "--ort-threads", "0"]))


def test_a_fleet_spec_is_server_options_with_the_fleets_defaults():
    from sonic_hep.workflows.grid.fleet import FleetSpec

    spec = FleetSpec(["repo"], backend="python", strict=True, python_shm_mb=64)
    assert isinstance(spec, ServerOptions) and (spec.backend, spec.strict, spec.python_shm_mb) == ("python", True, 64)
    assert spec.host == "0.0.0.0" and spec.startup_timeout == 300.0  # a fleet serves other nodes, starts slower
    assert dataclasses.fields(FleetSpec)[0].metadata == dataclasses.fields(ServerOptions)[0].metadata
