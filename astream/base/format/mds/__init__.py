"""The reference's ``streaming.base.format.mds`` path; see :mod:`.encodings`."""
