"""Exa.TrkX data and models: ACTS simulation (generate.py), torch models and training (models.py, train.py), export."""
