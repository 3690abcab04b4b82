"""What the analysis can be told: a frozen, keyword-only config (see docs/METRICS.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from domino_prof.errors import OptionError, opt


@dataclass(frozen=True)
class CommFamily:
    """A named set of device kernels that are communication (docs/METRICS.md)."""

    key: str
    label: str
    pattern: str  # searched (``re.search``) case-insensitively in the kernel name


# Kernel names are demangled: templated kernels start with their return type ("void
# userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(...)"), kernels in an anonymous namespace
# read "(anonymous namespace)::one_shot_all_reduce_kernel<...>", so the families below
# other than NCCL's are searched anywhere in the name.
COMM_FAMILIES: tuple[CommFamily, ...] = (
    # ncclKernel_* / ncclDevKernel_* / ncclSymk* (NCCL and RCCL, which keeps NCCL names),
    # rccl* (RCCL-only kernels), hccl* / hcom* (Huawei/Habana), msccl* (MSCCL)
    CommFamily("nccl", "NCCL/RCCL/HCCL/MSCCL", r"^(?:void\s+)?(?:nccl|rccl|hccl|hcom|msccl)"),
    # torch symmetric memory (torch/csrc/distributed/c10d/symm_mem): the one-/two-shot
    # and multimem collectives, and barrier/put_signal/wait_signal of the async-TP ops
    # (fused all-gather-matmul, matmul-reduce-scatter)
    CommFamily(
        "symm_mem",
        "torch symmetric memory",
        r"\b(?:multimem_all_reduce|multimem_one_shot_all_reduce|multimem_all_gather"
        r"|one_shot_all_reduce|two_shot_all_reduce)_kernel|c10d::symmetric_memory::",
    ),
    # NVSHMEM / rocSHMEM: library kernels (*_on_stream_kernel collectives, nvshmemi_*)
    # and torch's NVSHMEM ops (c10d::nvshmem_extension::allToAllV, ...)
    CommFamily(
        "nvshmem",
        "NVSHMEM/rocSHMEM",
        r"nvshmem|rocshmem|_on_stream_kernel\b",
    ),
    # DeepEP expert-parallel dispatch/combine, under its open-source namespace deep_ep::
    # and dpsk::ep:: (DeepSeek's published training traces): the kernels of its three
    # transports (intranode, internode, internode_ll) that move tokens or signal peers:
    # dispatch, combine, notify_dispatch, cached_notify[_dispatch|_combine], barrier.
    # Nothing broader: layout::get_dispatch_layout and internode_ll::
    # clean_low_latency_buffer are local work, other namespaces are not DeepEP's.
    CommFamily(
        "deepep",
        "DeepEP",
        r"\b(?:deep_ep|dpsk::ep)::(?:intranode|internode|internode_ll)::"
        r"(?:dispatch|combine|notify_dispatch|cached_notify(?:_dispatch|_combine)?|barrier)\b",
    ),
    # TransformerEngine (and TensorRT-LLM) userbuffers: userbuffers_fp16_sum_inplace_gpu_*,
    # kuserbuffers_pushsend / pullrecv / ...
    CommFamily("te_userbuffers", "TransformerEngine userbuffers", r"\bk?userbuffers_"),
    # the comm emulator's kernels (domino_prof.emulation: a collective's time and
    # traffic played on one device): emulated_allreduce* / emulated_reducescatter* /
    # emulated_allgather*, typed all_reduce / reduce_scatter / all_gather by name
    CommFamily(
        "emulated",
        "emulated",
        r"^(?:void\s+)?emulated_(?:allreduce|reducescatter|allgather)",
    ),
    # c10d-level names (c10d::allreduce_, gloo:all_reduce) recorded as device spans
    # (last: c10d::symmetric_memory:: / c10d::nvshmem_extension:: name their families)
    CommFamily("c10d", "c10d collective spans", r"^(?:c10d::|gloo:)"),
)
DEFAULT_COMM_PATTERN = "|".join(f"(?:{f.pattern})" for f in COMM_FAMILIES)
# copies that are comm (gpu_memcpy events, not kernels): see classify
P2P_COPY = CommFamily("p2p_copy", "peer-to-peer copies", "")
DTOD_COPY = CommFamily("dtod_copy", "device-to-device copies (--memcpy-as-comm)", "")
USER_PATTERN = CommFamily("user", "--comm-pattern", "")


def combine_comm_pattern(user: str | None, *, replace: bool = False) -> str:
    """The effective comm regex for a user pattern: OR-ed with the default, or
    replacing it when ``replace`` is set. Raises ConfigError for an invalid regex."""
    if not user:
        if replace:
            raise OptionError(
                f"{opt('comm_pattern_only')} needs {opt('comm_pattern')} REGEX; give the "
                "regex that names your comm kernels"
            )
        return DEFAULT_COMM_PATTERN
    _compile(user, what=opt("comm_pattern"))
    if replace:
        return user
    return f"(?:{DEFAULT_COMM_PATTERN})|(?:{user})"


def _compile(pattern: str, *, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise OptionError(
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
    ``memcpy_as_comm``: count every device-to-device copy (``gpu_memcpy`` named
    ``Memcpy DtoD`` / ``Memcpy PtoP``) as comm; copies between two different devices
    are comm without it.
    ``overhead_thresholds``: passed through to ``analysis.overheads`` (finding
    thresholds by key).
    ``align_clocks``: estimate per-host clock offsets for the cross-rank figures
    (``analysis.ranks.align_hosts``); False (``--no-align-clocks``) uses the times as
    read.
    """

    comm_pattern: str = DEFAULT_COMM_PATTERN
    memcpy_as_comm: bool = False
    overhead_thresholds: Mapping[str, float] = field(default_factory=dict)
    align_clocks: bool = True

    def __post_init__(self) -> None:
        _compile(self.comm_pattern, what="comm pattern")
        # a private copy: later changes to the caller's dict do not leak in
        object.__setattr__(self, "overhead_thresholds", dict(self.overhead_thresholds))

    @property
    def comm_regex(self) -> re.Pattern[str]:
        return _compile(self.comm_pattern, what="comm pattern")

    @property
    def uses_default_families(self) -> bool:
        """Whether the default families are part of the pattern (plain default, or the
        default OR-ed with a user regex by :func:`combine_comm_pattern`)."""
        p = self.comm_pattern
        return p == DEFAULT_COMM_PATTERN or p.startswith(f"(?:{DEFAULT_COMM_PATTERN})|(?:")

    def to_json(self) -> dict:
        return {
            "comm_pattern": self.comm_pattern,
            "memcpy_as_comm": self.memcpy_as_comm,
            "overhead_thresholds": dict(self.overhead_thresholds),
            "align_clocks": self.align_clocks,
        }
