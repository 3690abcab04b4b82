"""The registry of schedules and modes. No torch import here: the CLI, ``report`` and
``check`` read the names and descriptions; a schedule's code loads only when a runner
is built (:func:`load_schedule`).

A **schedule** is an ordering of a training step's events over (unit, micro-batch)
(``schedules.py``): a function ``fn(step, n)`` of the step's operations and the number
of micro-batches. Its spec says which operations it orders — all-reduce TP
(``sequence_parallel=False``: ``tp_step.AllReduceStep``) or sequence parallelism
(``sp_step.ShardedStep``) — whether it takes ``--splits`` micro-batches
(``micro_batched``; else one; ``--split-sizes`` too) and ``--col-splits`` column chunks of
its row-parallel and input-gradient GEMMs (``col_split``; else one).

A **mode** (``domino-prof run --mode``) = a schedule + a comm choice (``comm.make_comm``:
``"process-group"`` or ``"skip"``) + a one-line description. ``nocomm`` is the tp
schedule with every collective skipped, ``domino-nocomm`` the domino schedule with every
collective skipped (the micro-batch split's own cost: ``analysis.limits`` measures it as
domino-nocomm's step − nocomm's), ``domino-sp-nocomm`` the same for domino-sp (its split
and sequence parallelism's own cost against nocomm). A mode with comm ``"skip"``
computes meaningless losses and has no comm to overlap (:attr:`Mode.skips_comm`,
:attr:`Mode.overlaps`).

Adding a mode: ``register_schedule(...)`` (if its ordering is new) and
``register_mode(...)``; both refuse a name already taken.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from domino_prof.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    name: str
    target: object  # "module:function" (loaded lazily) or the function itself
    micro_batched: bool  # runs --splits micro-batches with async collectives (else 1, sync)
    sequence_parallel: bool  # Megatron SP (reduce-scatter / all-gather) instead of all-reduce
    col_split: bool = False  # takes --col-splits (its step's out_chunk op; all-reduce TP only)


@dataclass(frozen=True, kw_only=True)
class Mode:
    name: str
    schedule: str  # a ScheduleSpec name
    comm: str  # "process-group" | "skip"
    description: str  # one line

    @property
    def spec(self) -> ScheduleSpec:
        return SCHEDULES[self.schedule]

    @property
    def micro_batched(self) -> bool:
        return self.spec.micro_batched

    @property
    def sequence_parallel(self) -> bool:
        return self.spec.sequence_parallel

    @property
    def skips_comm(self) -> bool:
        """Every collective skipped: losses meaningless, no comm in its trace."""
        return self.comm == "skip"

    @property
    def overlaps(self) -> bool:
        """Overlaps comm with compute by design: micro-batched, with comm to overlap
        (run.json ``overlap``; what ``check`` gates by default)."""
        return self.micro_batched and not self.skips_comm

    @property
    def col_split(self) -> bool:
        return self.spec.col_split


SCHEDULES: dict[str, ScheduleSpec] = {}
MODES: dict[str, Mode] = {}  # insertion order = `--mode all` order


def register_schedule(
    name: str, target, *, micro_batched: bool, sequence_parallel: bool = False,
    col_split: bool = False,
) -> ScheduleSpec:  # fmt: skip
    if name in SCHEDULES:
        raise ValueError(f"schedule {name!r} is already registered")
    if col_split and sequence_parallel:
        raise ValueError(f"schedule {name!r}: col_split is for all-reduce TP schedules")
    SCHEDULES[name] = spec = ScheduleSpec(
        name=name, target=target, micro_batched=micro_batched, sequence_parallel=sequence_parallel,
        col_split=col_split,
    )  # fmt: skip
    return spec


def register_mode(
    name: str, *, schedule: str, comm: str = "process-group", description: str
) -> Mode:
    if name in MODES or name == "all":
        raise ValueError(f"mode {name!r} is already registered")
    if schedule not in SCHEDULES:
        raise ValueError(f"mode {name!r}: no schedule {schedule!r} is registered")
    if comm not in ("process-group", "skip"):
        raise ValueError(f"mode {name!r}: comm must be process-group or skip, got {comm!r}")
    MODES[name] = m = Mode(name=name, schedule=schedule, comm=comm, description=description)
    return m


def get(name: str) -> Mode:
    if name not in MODES:
        raise ConfigError(f"unknown mode {name!r}; choose {', '.join(MODES)} or all")
    return MODES[name]


def names() -> tuple[str, ...]:
    return tuple(MODES)


def load_schedule(name: str):
    """The schedule's function (imports its module on first use)."""
    target = SCHEDULES[name].target
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target


_S = "domino_prof.reference_model.schedules:"
register_schedule("tp", _S + "tp", micro_batched=False)
register_schedule("domino", _S + "domino", micro_batched=True, col_split=True)
register_schedule("sp", _S + "sp", micro_batched=False, sequence_parallel=True)
register_schedule("domino-sp", _S + "domino_sp", micro_batched=True, sequence_parallel=True)

register_mode("tp", schedule="tp",
              description="synchronous Megatron TP: every all-reduce waited for at once")
register_mode("nocomm", schedule="tp", comm="skip",
              description="tp with every collective skipped: a throughput bound, numbers "
              "meaningless")
register_mode("domino", schedule="domino",
              description="Domino: N micro-batches, each all-reduce hidden behind the "
              "others' compute")
register_mode("domino-nocomm", schedule="domino", comm="skip",
              description="domino's micro-batch split with every collective skipped: the "
              "split's own cost, numbers meaningless")
register_mode("sp", schedule="sp",
              description="Megatron sequence parallelism: reduce-scatter / all-gather, "
              "synchronous")
register_mode("domino-sp", schedule="domino-sp",
              description="Domino over sequence parallelism: each micro-batch's norm chain "
              "overlapped")  # fmt: skip
register_mode("domino-sp-nocomm", schedule="domino-sp", comm="skip",
              description="domino-sp's micro-batch split with every collective skipped: "
              "its own cost, numbers meaningless")  # fmt: skip

# each overlapped schedule -> its mode with every collective skipped (the split's own cost:
# analysis.limits), and the run.json key of its decomposition (runs.py; domino's key
# predates domino-sp's). run, tune, the report and analysis.limits read both from here:
# run and tune print them on the GPU machine, whose image has torch but not the trace
# engine's decoder (msgspec), so they must not come through the analysis package.
SPLIT_MODES: dict[str, str] = {
    m.schedule: m.name for m in MODES.values() if m.skips_comm and m.micro_batched
}
RUN_KEYS: dict[str, str] = {"domino": "limits", "domino-sp": "limits_sp"}
