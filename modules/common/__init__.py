"""Generic modules usable in any workflow: selections, sums, histograms, and test/benchmark helpers."""
