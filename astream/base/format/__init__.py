"""The reference's ``streaming.base.format`` path; only ``mds.encodings`` is provided."""
