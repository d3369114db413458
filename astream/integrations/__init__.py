"""Integrations with training frameworks. Each submodule imports its framework only when it is
imported itself (``import astream`` never does): ``astream.integrations.hf`` for the Hugging Face
Trainer. PyTorch Lightning and torchdata's ``StatefulDataLoader`` need no integration module: see
docs/trainers.md."""
