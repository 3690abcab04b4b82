"""Exports of an analysis to other tools' formats (optional extras, imported lazily).

``perfetto``: a Perfetto protobuf trace (``-o FILE.pftrace``) of each rank's device
streams, comm split into hidden and exposed, step and layer x micro-batch ranges, host
threads and the findings (``pip install 'domino-prof[perfetto]'``).
"""
