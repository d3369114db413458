"""The PyTorch shell: ``StreamingDataset`` (an ``IterableDataset`` over the dataset core),
``StreamingDataLoader``, batches built in DataLoader workers' shared memory, packing.

May import: torch, and every layer below it: the API layer (dataset, packing, shared), the
runtime, the core, the loop bridge and astream.errors. Nothing below imports this package, so
``import astream`` and an asyncio trainer never pay for torch. tests/test_layers.py checks it.
"""
