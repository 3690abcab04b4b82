"""domino-prof: exact TP comm/compute overlap from PyTorch profiler traces.

Analysis (``domino_prof.trace``, ``domino_prof.analysis``, ``domino_prof.report``)
never imports torch; only ``domino_prof.reference_model`` does, lazily.
"""

__version__ = "0.1.0"
