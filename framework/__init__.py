"""sonic-hep's event-processing core: configuration, module DAG, scheduler, ROOT source and output.

Physics-free by design: nothing here imports ``sonic_hep.modules``. Module authors need only::

    from sonic_hep.framework import Producer, Filter, Analyzer, ExternalWork, Param, InputTag, Output

and users running jobs from Python (a notebook), the API of :mod:`.api`::

    from sonic_hep.framework import run, events
    result = run("demo_inference", {"source.events": 100})
"""

from .config import ProcessConfig, load
from .errors import ConfigError, GraphError, InferenceError, ModuleError, OutputError, SonicError, SourceError
from .event import EventID, EventView
from .futures import as_future, completed, delayed, gather, then
from .module import Analyzer, ExternalWork, Filter, Module, Producer
from .params import InputTag, Output, Param
from .process import Interrupted, Process, RunResult
from .api import EventProducts, EventStream, ModuleReport, Result, configure, events, run

__all__ = [
    "Analyzer", "ConfigError", "EventID", "EventProducts", "EventStream", "EventView", "ExternalWork", "Filter",
    "GraphError", "InferenceError", "InputTag", "Interrupted", "Module", "ModuleError", "ModuleReport", "Output",
    "OutputError", "Param", "Process", "ProcessConfig", "Producer", "Result", "RunResult", "SonicError",
    "SourceError", "as_future", "completed", "configure", "delayed", "events", "gather", "load", "run", "then",
]
