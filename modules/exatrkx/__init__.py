"""Exa.TrkX GNN tracking: hits → embedding → graph building → edge filter → GNN → labeling → track candidates.

Domain algorithms (numpy/scipy, one file each) are used both by the producers here and by the
Triton python models of the ensemble (:mod:`.ensemble_stages`). See README.md for the physics.
"""
