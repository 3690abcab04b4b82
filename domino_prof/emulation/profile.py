"""Comm profiles: per (collective, R, dtype) the alpha / algbw of the timing model, the CTA
count of the real kernel, the algorithm and where the numbers come from.

File format (JSON, one object; docs/EMULATION.md)::

    {"schema": "domino-prof/comm-profile", "version": 1,
     "name": "h200-nvlink-tp2", "description": "...",
     "entries": [
       {"collective": "all_reduce", "ranks": 2, "dtype": "bfloat16",
        "alpha_us": 21.472, "algbw_GBps": 323.37, "busbw_GBps": 323.37,
        "ctas": 24, "algorithm": "ring/LL", "source": "...",
        "fit": {...}}          # optional: what calibrate measured (kept, not used)
     ]}

``busbw_GBps`` is for reference only: when present it must equal algbw x 2(R-1)/R
(all_reduce) or algbw x (R-1)/R (RS/AG) to 0.1%. Every problem is one
:class:`~domino_prof.errors.ConfigError` line naming the file, the entry and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from domino_prof.emulation.model import COLLECTIVES, DTYPE_BYTES, bus_factor, time_ns
from domino_prof.errors import ConfigError

SCHEMA = "domino-prof/comm-profile"
VERSION = 1
SHIPPED: tuple[str, ...] = ("h200-nvlink-tp2", "h200-nvlink-tp4", "h200-nvlink-tp8")
BUSBW_TOLERANCE = 1e-3  # relative: busbw is written rounded beside algbw
_ENTRY_KEYS = {"collective", "ranks", "dtype", "alpha_us", "algbw_GBps", "busbw_GBps",
               "ctas", "algorithm", "source", "fit", "threads", "registers", "shared_bytes",
               "fifo_bytes", "cta_busbw_GBps"}  # fmt: skip
# the real kernel's launch attributes the paced stand-in copies when an entry has none
# (profiles written before they were recorded): NCCL's 512 + 32 threads, no reservation
DEFAULT_THREADS = 544


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One (collective, R, dtype) of a profile."""

    collective: str  # all_reduce | reduce_scatter | all_gather
    ranks: int  # R
    dtype: str  # torch's name: bfloat16, float32, ...
    alpha_us: float  # latency term of t = alpha + size / algbw
    algbw_gbps: float  # GB/s = 1e9 B/s, nccl-tests' algbw
    ctas: int  # CTAs (thread blocks) of the real kernel
    algorithm: str  # e.g. "ring/LL", "ring/Simple"
    source: str  # citation of every figure
    fit: dict | None = None  # calibrate's evidence, when fitted
    # the real kernel's launch attributes (a trace's kernel args: block, "registers per
    # thread", "shared memory"), which the paced stand-in copies; None: not recorded
    threads: int | None = None
    registers: int | None = None
    shared_bytes: int | None = None
    fifo_bytes: int | None = None  # FIFO bytes per channel (None: the protocol's default)
    # busbw at fewer CTAs than ``ctas`` (--comm-ctas): ((ctas, busbw GB/s), ...) ascending
    cta_busbw: tuple[tuple[int, float], ...] | None = None

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.collective, self.ranks, self.dtype)

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * bus_factor(self.collective, self.ranks)

    def time_ns(self, size_bytes: int) -> int:
        return time_ns(alpha_us=self.alpha_us, algbw_gbps=self.algbw_gbps, size_bytes=size_bytes)

    @property
    def protocol(self) -> str:
        """NCCL protocol of ``algorithm`` (``ring/LL`` -> LL; else LL128 or Simple)."""
        from domino_prof.emulation.ring import protocol_of

        return protocol_of(self.algorithm)

    def busbw_at(self, ctas: int) -> float:
        """busbw (GB/s) with ``ctas`` CTAs: linear between the ``cta_busbw`` points and
        (``self.ctas``, this entry's busbw); at or above ``self.ctas`` this entry's busbw
        (more CTAs than the real kernel's add no bandwidth here); below the first point,
        proportional to the CTAs. Needs ``cta_busbw`` unless ``ctas == self.ctas``."""
        if ctas < 1:
            raise ValueError(f"ctas must be >= 1, got {ctas}")
        if ctas >= self.ctas:
            return self.busbw_gbps
        if not self.cta_busbw:
            raise ConfigError(
                f"comm profile entry {self.collective} R={self.ranks} {self.dtype} has no "
                f"per-CTA bandwidth curve ('cta_busbw_GBps'), so --comm-ctas {ctas} (fewer "
                f"than its {self.ctas}) has no bandwidth to use; add the curve with its source"
            )
        pts = [p for p in self.cta_busbw if p[0] < self.ctas] + [(self.ctas, self.busbw_gbps)]
        if ctas <= pts[0][0]:
            return pts[0][1] * ctas / pts[0][0]
        for (n0, b0), (n1, b1) in zip(pts, pts[1:]):
            if n0 <= ctas <= n1:
                return b0 + (b1 - b0) * (ctas - n0) / (n1 - n0)
        return self.busbw_gbps  # unreachable: ctas < self.ctas = the last point

    def with_ctas(self, ctas: int | None) -> Entry:
        """This entry run with ``ctas`` CTAs (None: as it is): the CTA count of the stand-in
        and the bandwidth of :meth:`busbw_at`; alpha unchanged."""
        if ctas is None or ctas == self.ctas:
            return self
        import dataclasses

        algbw = self.busbw_at(ctas) / bus_factor(self.collective, self.ranks)
        return dataclasses.replace(self, ctas=ctas, algbw_gbps=algbw)

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "collective": self.collective,
            "ranks": self.ranks,
            "dtype": self.dtype,
            "alpha_us": self.alpha_us,
            "algbw_GBps": self.algbw_gbps,
            "busbw_GBps": round(self.busbw_gbps, 4),
            "ctas": self.ctas,
            "algorithm": self.algorithm,
            "source": self.source,
        }
        for k, v in (("threads", self.threads), ("registers", self.registers),
                     ("shared_bytes", self.shared_bytes), ("fifo_bytes", self.fifo_bytes)):
            if v is not None:
                d[k] = v
        if self.cta_busbw is not None:
            d["cta_busbw_GBps"] = [[n, b] for n, b in self.cta_busbw]
        if self.fit is not None:
            d["fit"] = self.fit
        return d


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str
    entries: tuple[Entry, ...]
    path: str = ""  # where it was read from ("" when built in memory)

    @property
    def label(self) -> str:
        """What every emulated number is labelled with."""
        return f"emulated comm (profile {self.name})"

    def ranks(self) -> list[int]:
        return sorted({e.ranks for e in self.entries})

    def entry(self, collective: str, ranks: int, dtype: str) -> Entry:
        """The entry for one call; a ConfigError line when the profile has none."""
        for e in self.entries:
            if e.key == (collective, ranks, dtype):
                return e
        where = self.path or self.name
        have = [e for e in self.entries if e.collective == collective and e.ranks == ranks]
        if not any(e.ranks == ranks for e in self.entries):
            raise ConfigError(
                f"{where}: comm profile {self.name!r} has no entries for R={ranks} "
                f"(it covers R={', '.join(map(str, self.ranks()))}); use a profile fitted "
                f"for {ranks} ranks (shipped: {', '.join(SHIPPED)})"
            )
        raise ConfigError(
            f"{where}: comm profile {self.name!r} has no {collective} for R={ranks} "
            f"dtype {dtype}"
            + (f" (only {', '.join(e.dtype for e in have)})" if have else "")
            + "; add that entry (domino-prof calibrate, or by hand with its source)"
        )

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "name": self.name,
            "description": self.description,
            "entries": [e.to_json() for e in self.entries],
        }


def dumps(profile: Profile) -> str:
    """The file's text: stable key order, one entry per block, trailing newline."""
    return json.dumps(profile.to_json(), indent=2, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- loading
def shipped_path(name: str) -> Path:
    return Path(str(resources.files("domino_prof.emulation") / "profiles" / f"{name}.json"))


def load_profile(name_or_path: str | Path) -> Profile:
    """A shipped profile by name (``h200-nvlink-tp2``) or a profile file by path."""
    s = str(name_or_path)
    if s in SHIPPED:
        return read_profile(shipped_path(s))
    p = Path(s)
    if not p.suffix and not p.exists():
        raise ConfigError(
            f"{s}: no such comm profile; pass a profile file or one of {', '.join(SHIPPED)}"
        )
    return read_profile(p)


def read_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such comm profile file; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a comm profile file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read comm profile ({e}); check the file") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{p}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
            "fix the comm profile file"
        ) from None
    return parse_profile(doc, where=str(p))


def parse_profile(doc: Any, *, where: str = "<profile>") -> Profile:
    """Validate a decoded profile document; ConfigError (one line) on the first problem."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: a comm profile is a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        raise ConfigError(
            f'{where}: not a comm profile (expected "schema": {SCHEMA!r}, '
            f"got {doc.get('schema')!r})"
        )
    if doc.get("version") != VERSION:
        raise ConfigError(
            f"{where}: comm profile version {doc.get('version')!r} is not supported "
            f"(this domino-prof reads version {VERSION})"
        )
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f'{where}: comm profile needs a non-empty string "name"')
    entries_raw = doc.get("entries")
    if not isinstance(entries_raw, list) or not entries_raw:
        raise ConfigError(f'{where}: comm profile needs a non-empty "entries" list')
    entries = [_parse_entry(e, where=f"{where}: entry {i}") for i, e in enumerate(entries_raw)]
    seen: set[tuple[str, int, str]] = set()
    for i, e in enumerate(entries):
        if e.key in seen:
            raise ConfigError(
                f"{where}: entry {i}: a second {e.collective} for R={e.ranks} dtype {e.dtype}; "
                "keep one entry per (collective, ranks, dtype)"
            )
        seen.add(e.key)
    desc = doc.get("description", "")
    return Profile(
        name=name, description=desc if isinstance(desc, str) else "", entries=tuple(entries),
        path=where if where != "<profile>" else "",
    )  # fmt: skip


def _number(e: dict, key: str, where: str) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where}: {key!r} must be a number, got {v!r}")
    if not math.isfinite(v):
        raise ConfigError(f"{where}: {key!r} must be finite, got {v!r}")
    return float(v)


def _parse_entry(e: Any, *, where: str) -> Entry:
    if not isinstance(e, dict):
        raise ConfigError(f"{where}: an entry is a JSON object, got {type(e).__name__}")
    unknown = sorted(set(e) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(_ENTRY_KEYS))})"
        )
    coll = e.get("collective")
    if coll not in COLLECTIVES:
        raise ConfigError(
            f"{where}: unknown collective {coll!r}; use one of {', '.join(COLLECTIVES)}"
        )
    ranks = e.get("ranks")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ConfigError(f"{where}: 'ranks' must be an integer >= 2, got {ranks!r}")
    dtype = e.get("dtype")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"{where}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    alpha = _number(e, "alpha_us", where)
    if alpha < 0:
        raise ConfigError(f"{where}: 'alpha_us' must be >= 0, got {alpha!r}")
    algbw = _number(e, "algbw_GBps", where)
    if algbw <= 0:
        raise ConfigError(f"{where}: 'algbw_GBps' must be > 0, got {algbw!r}")
    ctas = e.get("ctas")
    if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < 1:
        raise ConfigError(f"{where}: 'ctas' must be an integer >= 1, got {ctas!r}")
    for k in ("algorithm", "source"):
        if not isinstance(e.get(k), str) or not e[k].strip():
            raise ConfigError(f"{where}: {k!r} must be a non-empty string (cite the figures)")
    fit = e.get("fit")
    if fit is not None and not isinstance(fit, dict):
        raise ConfigError(f"{where}: 'fit' must be an object, got {type(fit).__name__}")
    opt: dict[str, int | None] = {}
    for k, lo in (("threads", 32), ("registers", 1), ("shared_bytes", 0), ("fifo_bytes", 16)):
        v = e.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            raise ConfigError(f"{where}: {k!r} must be an integer >= {lo}, got {v!r}")
        opt[k] = v
    curve = _cta_curve(e.get("cta_busbw_GBps"), ctas=ctas, where=where)
    entry = Entry(
        collective=coll, ranks=ranks, dtype=dtype, alpha_us=alpha, algbw_gbps=algbw,
        ctas=ctas, algorithm=e["algorithm"], source=e["source"], fit=fit, cta_busbw=curve,
        **opt,
    )  # fmt: skip
    if "busbw_GBps" in e:
        busbw = _number(e, "busbw_GBps", where)
        if busbw <= 0:
            raise ConfigError(f"{where}: 'busbw_GBps' must be > 0, got {busbw!r}")
        want = entry.busbw_gbps
        if abs(busbw - want) > BUSBW_TOLERANCE * want:
            f = "2(R-1)/R" if coll == "all_reduce" else "(R-1)/R"
            raise ConfigError(
                f"{where}: busbw_GBps {busbw:g} disagrees with algbw_GBps {algbw:g} x {f} "
                f"= {want:.4f}; fix one of them (algbw is the one the model uses)"
            )
    return entry


def _cta_curve(v: Any, *, ctas: int, where: str) -> tuple[tuple[int, float], ...] | None:
    """``cta_busbw_GBps``: [[ctas, busbw], ...], CTA counts ascending, each below the
    entry's ``ctas``, bandwidths > 0 and not falling."""
    if v is None:
        return None
    ok = isinstance(v, list) and v and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
        and not isinstance(p[0], bool) and isinstance(p[1], (int, float))
        and not isinstance(p[1], bool) and math.isfinite(p[1]) for p in v
    )  # fmt: skip
    if not ok:
        raise ConfigError(f"{where}: 'cta_busbw_GBps' must be a list of [ctas, busbw_GBps] pairs")
    pts = tuple((int(n), float(b)) for n, b in v)
    ns = [n for n, _ in pts]
    if ns != sorted(set(ns)) or ns[0] < 1 or ns[-1] >= ctas:
        raise ConfigError(
            f"{where}: 'cta_busbw_GBps' CTA counts must rise from >= 1 and stay below the "
            f"entry's ctas ({ctas}); got {ns}"
        )
    bws = [b for _, b in pts]
    if any(b <= 0 for b in bws) or bws != sorted(bws):
        raise ConfigError(f"{where}: 'cta_busbw_GBps' bandwidths must be > 0 and not fall")
    return pts
