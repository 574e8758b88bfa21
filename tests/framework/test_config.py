"""Configuration errors name the file, line and key; overrides are validated like the file."""

from __future__ import annotations

import pytest

from sonic_hep.framework import ConfigError, Process
from sonic_hep.framework import config as cfgmod

GOOD = """\
process: demo
source:
  files: [in.root]
modules:
  ht:
    type: CollectionSum
    src: Jet
    min_pt: 20.0
"""


def load_text(tmp_path, text, overrides=None):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return Process(cfgmod.load(path, overrides), open_source=False), str(path)


def test_good_config_fills_defaults(tmp_path):
    process, _ = load_text(tmp_path, GOOD)
    assert process.module_params["ht"] == {"src": "Jet", "min_pt": 20.0}
    assert process.config.source.chunk_size == 1000


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD + "  bad: [unclosed\n")
    assert "c.yaml:9" in str(err.value) or "c.yaml:10" in str(err.value)
    assert "YAML syntax error" in str(err.value)


def test_unknown_module_type_suggests(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD.replace("CollectionSum", "CollectionSumm"))
    text = str(err.value)
    assert "modules.ht.type" in text and "c.yaml:6" in text and "did you mean 'CollectionSum'" in text


def test_unknown_parameter_names_key_and_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD.replace("min_pt: 20.0", "min_ptt: 20.0"))
    text = str(err.value)
    assert "modules.ht.min_ptt" in text and "c.yaml:8" in text and "unknown parameter" in text


def test_wrong_type(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD.replace("min_pt: 20.0", "min_pt: twenty"))
    assert "modules.ht.min_pt" in str(err.value) and "expected float" in str(err.value)


def test_missing_required_parameter(tmp_path):
    text = GOOD + "  h:\n    type: Histogram1D\n"
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, text)
    assert "modules.h.src" in str(err.value) and "missing required parameter" in str(err.value)


def test_unknown_section_and_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD + "sources: {}\n")
    assert "did you mean 'source'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD.replace("  files: [in.root]", "  files: [in.root]\n  chunksize: 5"))
    assert "source.chunksize" in str(err.value) and "c.yaml:4" in str(err.value)


def test_duplicate_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD + "  ht:\n    type: NullProducer\n")
    assert "duplicate key 'ht'" in str(err.value)


def test_overrides_apply_and_validate(tmp_path):
    process, _ = load_text(tmp_path, GOOD, ["ht.min_pt=35", "source.max_events=7", "options.streams=3"])
    assert process.module_params["ht"]["min_pt"] == 35.0
    assert process.config.source.max_events == 7 and process.config.options.streams == 3
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD, ["ht.min_pt=abc"])
    assert "modules.ht.min_pt" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD, ["hx.min_pt=1"])
    assert "did you mean 'ht'" in str(err.value)


def test_missing_file():
    with pytest.raises(ConfigError) as err:
        cfgmod.load("/nonexistent/x.yaml")
    assert "/nonexistent/x.yaml" in str(err.value) and "not found" in str(err.value)


def test_zero_streams_rejected(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD, ["options.streams=0"])
    assert "options.streams" in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("ht.min_pt=abc", "modules.ht.min_pt"),          # a module parameter that is in the file (line 8)
    ("ht.src=3", "modules.ht.src"),
    ("ht.type=Nope", "modules.ht.type"),
    ("source.files=3", "source.files"),              # a section key that is in the file (line 3)
    ("source={files: 3}", "source.files"),           # a whole section given on the command line
])
def test_override_errors_blame_the_command_line_not_the_yaml_line(tmp_path, override, key):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD, [override])
    text = str(err.value)
    assert text.startswith(f"<command line>: {key}: ") and "c.yaml" not in text


def test_errors_in_the_file_still_name_its_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD.replace("src: Jet", "src: 3"), ["ht.min_pt=30"])
    assert "c.yaml:7: modules.ht.src" in str(err.value)


@pytest.mark.parametrize("override, message", [
    ("source.first_entry=-5", "source.first_entry: must be at least 0, got -5"),
    ("source.max_events=-5", "source.max_events: must be at least -1, got -5 (-1 means all events)"),
    ("source.events=-1", "source.events: must be at least 0"),
    ("options.threads=100000", "options.threads: must be at most 1024, got 100000"),
    ("options.streams=100000", "options.streams: must be at most 4096"),
    ("output.chunk_size=0", "output.chunk_size: must be at least 1"),
])
def test_values_out_of_range(tmp_path, override, message):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, GOOD, [override])
    assert message in str(err.value)


def test_config_that_is_not_a_yaml_text_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        cfgmod.load(tmp_path)
    binary = tmp_path / "c.root"
    binary.write_bytes(b"root\x00\x00\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"c\.root: not a YAML configuration: byte \d+ is not UTF-8"):
        cfgmod.load(binary)


def test_unreadable_config(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    real_open = open

    def refuse(file, *args, **kwargs):  # root reads a chmod-000 file, so the refusal is simulated
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ConfigError, match="c.yaml: configuration file cannot be read: permission denied"):
        cfgmod.load(path)


@pytest.mark.parametrize("key, value, message", [
    ("timeout_s", -1, "must be a positive number of seconds, got -1"),
    ("timeout_s", 0, "must be a positive number of seconds"),
    ("timeout_s", ".nan", "must be a positive number of seconds, got nan"),
    ("allowed_tries", 0, "must be at least 1"),
    ("workers", 0, "must be at least 1"),
    ("breaker_threshold", 0, "must be at least 1"),
    ("breaker_backoff_s", -1, "must be a positive number of seconds"),
    ("breaker_max_backoff_s", ".inf", "must be a positive number of seconds, got inf"),
    ("keepalive_s", 0.5, "must be at least 1.0, got 0.5 (servers refuse more frequent pings)"),
    ("keepalive_s", ".nan", "must be a positive number of seconds, got nan"),
    ("keepalive_timeout_s", 0, "must be a positive number of seconds"),
    ("keepalive_timeout_s", 3600, "must be at most 600, got 3600"),
])
def test_inference_settings_out_of_range(key, value, message):
    import yaml

    from sonic_hep.framework.inference.service import InferenceConfig

    with pytest.raises(ConfigError) as err:
        InferenceConfig.from_dict({key: yaml.safe_load(str(value))})
    assert f"services.inference.{key}: {message}" in str(err.value)


@pytest.mark.parametrize("text, expected", [("on", "on"), ("off", "off"), ("'off'", "off"), ("auto", "auto")])
def test_shared_memory_on_and_off_read_as_yaml_writes_them(text, expected):
    """``shared_memory: off`` as a physicist types it: YAML makes a bare on/off a boolean, which was refused
    ("expected str, got bool")."""
    import yaml

    from sonic_hep.framework.inference.service import InferenceConfig

    assert InferenceConfig.from_dict({"shared_memory": yaml.safe_load(text)}).shared_memory == expected


SERVICE = GOOD + "services:\n  inference:\n    repository: [data/models/demo]\n    timeout_s: 5\n"


@pytest.mark.parametrize("text, overrides, expected", [
    (SERVICE.replace("timeout_s: 5", "timeout_s: -1"), [], "c.yaml:12: services.inference.timeout_s: must be a positive"),
    (SERVICE, ["services.inference.timeout_s=-1"], "<command line>: services.inference.timeout_s: must be a positive"),
    (SERVICE, ["services.inference.mode=x"], "<command line>: services.inference.mode: 'x' is not one of"),
    (SERVICE, ["services.bogus.x=1"], "<command line>: services.bogus: unknown service 'bogus'"),
])
def test_service_errors_say_where_the_value_came_from(tmp_path, text, overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, text, overrides)
    assert str(err.value).startswith(expected.replace("c.yaml", str(tmp_path / "c.yaml")))
