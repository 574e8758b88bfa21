"""Running whole workflows: the sonic CLI, job splitting, executors, benchmarks."""
