"""Grid jobs: a workflow split over files or entry ranges, run on a batch system, checked and merged.

::

    sonic submit CONFIG --input 'data/*.root' --output-dir task --events-per-job 5000 --executor slurm
    sonic status task          # pending / running / done / failed (reason, log tail), timing summary
    sonic resubmit task        # the failed jobs, while retries are left
    sonic merge task --output merged.root
    sonic plan task --server-ms-per-event 126 --repository data/models/protodune

The rooms of this package, one idea each:

* ``inputs``, ``splitting`` — the task's files and its jobs (groups of files, or entry ranges);
* ``task``, ``records`` — the self-describing task directory, and each job's two records
  (``submit.json`` written by submit, ``state.json`` by the job itself);
* ``job`` — the wrapper every executor runs: ``sonic run`` in-process, output validated before ``done``;
* ``lifecycle`` — the table that decides a job's state from its report and the batch system's view;
* ``executors`` — ``local``, ``slurm``, ``condor``, ``dask`` behind one ``submit``/``poll`` interface;
* ``submit``, ``status``, ``merge``, ``plan`` — what the CLI commands do.
"""
