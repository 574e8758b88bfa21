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
