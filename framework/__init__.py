"""sonic-hep's event-processing core: configuration, module DAG, scheduler, ROOT source and output.

Physics-free by design: nothing here imports ``sonic_hep.modules``. Module authors need only::

    from sonic_hep.framework import Producer, Filter, Analyzer, ExternalWork, Param, InputTag, Output

and users running jobs from Python (a notebook), the API of :mod:`.api`::

    from sonic_hep.framework import run, events
    result = run("demo_inference", {"source.events": 100})
"""

from .batch import EventBatch
from .config import ProcessConfig, load
from .errors import (ConfigError, GraphError, InferenceError, ModuleError, OutputError, ParamError, SonicError,
                     SourceError)
from .event import EventID, EventView
from .futures import as_future, completed, delayed, gather, then
from .module import Analyzer, ExternalWork, Filter, Module, Producer
from .params import InputTag, Output, Param
from .paths import project_path
from .process import Interrupted, Process, RunResult
from .api import EventProducts, EventStream, ModuleReport, Result, configure, events, run

__all__ = [
    "Analyzer", "ConfigError", "EventBatch", "EventID", "EventProducts", "EventStream", "EventView", "ExternalWork",
    "Filter", "GraphError", "InferenceError", "InputTag", "Interrupted", "Module", "ModuleError", "ModuleReport",
    "Output", "OutputError", "Param", "ParamError", "Process", "ProcessConfig", "Producer", "Result", "RunResult",
    "SonicError", "SourceError", "as_future", "completed", "configure", "delayed", "events", "gather", "load",
    "project_path", "run", "then",
]
