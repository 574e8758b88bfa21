"""Event generators, model definitions/training, and the project's trained models."""
