"""Integrations with training frameworks. Each submodule imports its framework only when it is
imported itself (``import astream`` never does): ``astream.integrations.hf`` for the Hugging Face
Trainer. PyTorch Lightning and torchdata's ``StatefulDataLoader`` need no integration module: see
docs/trainers.md.

May import: its framework (inside the submodule that needs it), astream.torch, astream.writer
and every layer below them. Inside astream only the engines' public modules (astream.spark,
astream.ray) import it; the dataset never does. tests/test_layers.py checks it.
"""
