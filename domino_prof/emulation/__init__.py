"""Comm emulation, the torch-free half (docs/EMULATION.md): comm profiles, the timing and
HBM-bytes models, the calibrate fit, the trace mark. The GPU half, the emulated
collectives themselves, is ``domino_prof.reference_model.emulate`` (torch + Triton); nothing
here, in ``trace/``, ``analysis/`` or ``report/`` imports it."""

from domino_prof.emulation.marker import (
    FAMILY,
    KERNEL_PATTERN,
    MARKER_KEY,
    add_marker,
    comm_marker,
    label,
    mark_trace_file,
    trace_marker,
)
from domino_prof.emulation.model import (
    COLLECTIVES,
    DTYPE_BYTES,
    bus_factor,
    hbm_bytes,
    message_bytes,
    time_ns,
    time_us,
)
from domino_prof.emulation.plan import Copy, plan
from domino_prof.emulation.profile import (
    SHIPPED,
    Entry,
    Profile,
    dumps,
    load_profile,
    parse_profile,
    read_profile,
)

__all__ = [
    "COLLECTIVES", "DTYPE_BYTES", "FAMILY", "KERNEL_PATTERN", "MARKER_KEY", "SHIPPED",
    "Copy", "Entry", "Profile", "add_marker", "bus_factor", "comm_marker", "dumps",
    "hbm_bytes", "label", "load_profile", "mark_trace_file", "message_bytes",
    "parse_profile", "plan", "read_profile", "time_ns", "time_us", "trace_marker",
]  # fmt: skip
