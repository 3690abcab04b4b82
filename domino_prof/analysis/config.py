"""What the analysis can be told: a frozen, keyword-only config (see docs/METRICS.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from domino_prof.errors import ConfigError

# Device kernels that are communication (matched with ``re.search``, case-insensitive):
#   ncclKernel_* / ncclDevKernel_* / ncclSymk* (NCCL and RCCL, which keeps NCCL names),
#   rccl* (RCCL-only kernels), hccl* / hcom* (Huawei/Habana collective kernels),
#   msccl* (MSCCL), and c10d-level names (``c10d::allreduce_``, ``nccl:all_reduce``,
#   ``gloo:all_reduce``) for traces that record collectives as device spans under
#   those names.
DEFAULT_COMM_PATTERN = r"^(?:nccl|rccl|hccl|hcom|msccl|c10d::|gloo:)"


def combine_comm_pattern(user: str | None, *, replace: bool = False) -> str:
    """The effective comm regex for a user pattern: OR-ed with the default, or
    replacing it when ``replace`` is set. Raises ConfigError for an invalid regex."""
    if not user:
        if replace:
            raise ConfigError(
                "--comm-pattern-only needs --comm-pattern REGEX; give the regex that "
                "names your comm kernels"
            )
        return DEFAULT_COMM_PATTERN
    _compile(user, what="--comm-pattern")
    if replace:
        return user
    return f"(?:{DEFAULT_COMM_PATTERN})|(?:{user})"


def _compile(pattern: str, *, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise ConfigError(
            f"{what} {pattern!r} is not a valid regular expression ({e}); "
            "fix the regex (Python `re` syntax)"
        ) from None


@dataclass(frozen=True, kw_only=True)
class AnalysisConfig:
    """How to classify device work and which thresholds the findings use.

    ``comm_pattern``: the full regex (``re.search``, case-insensitive) that makes a
    kernel comm. Build it from a user regex with :func:`combine_comm_pattern`
    (the CLI's ``--comm-pattern`` is OR-ed with :data:`DEFAULT_COMM_PATTERN`
    unless ``--comm-pattern-only`` is given).
    ``memcpy_as_comm``: count peer-to-peer copies (``gpu_memcpy`` named ``Memcpy PtoP``)
    as comm instead of memory.
    ``overhead_thresholds``: passed through to ``analysis.overheads`` (finding
    thresholds by key).
    """

    comm_pattern: str = DEFAULT_COMM_PATTERN
    memcpy_as_comm: bool = False
    overhead_thresholds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _compile(self.comm_pattern, what="comm pattern")
        # a private copy: later changes to the caller's dict do not leak in
        object.__setattr__(self, "overhead_thresholds", dict(self.overhead_thresholds))

    @property
    def comm_regex(self) -> re.Pattern[str]:
        return _compile(self.comm_pattern, what="comm pattern")

    def to_json(self) -> dict:
        return {
            "comm_pattern": self.comm_pattern,
            "memcpy_as_comm": self.memcpy_as_comm,
            "overhead_thresholds": dict(self.overhead_thresholds),
        }
