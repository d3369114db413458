"""The reference's module paths (``streaming.base.*``) for scripts that import from them:
``astream.base.util``, ``astream.base.storage``, ``astream.base.array``,
``astream.base.format.mds.encodings``, ``astream.base.hashing``, ``astream.base.compression``,
``astream.base.distributed`` and ``astream.base.registry_utils``. Each holds the names that
make sense in astream, with the reference's behaviour; docs/migrating.md lists the names left
out and why.

May import: every layer (it is a top layer of thin modules over astream's own).
"""
