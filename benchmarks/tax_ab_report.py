"""tax_ab.json and its README table from bench_tax_ab.py's raw samples (GPU) and the real
fixture's (benchmarks/tax_ab_real.py). Torch-free.

Per config and kernel class (name + grid + block) of each shape:

* ``alone_us``: median duration alone (n);
* ``beside_emulated[variant][order]``: slowdown = median duration of the samples at least
  ``FULL`` under the stand-in's kernel / the alone median, with n, [min, max] of the
  samples' ratios, and the comm kernel's median duration beside it (its stretch against
  the model); offsets pooled (each order has two);
* ``beside_real`` (the fixture config only, classes matched by name + grid + block, the
  real ops pooled: the fixture recorded no input shapes): ``transfer`` = real samples at
  least ``FULL`` under a NCCL kernel that was moving data (polling parts excluded: none
  of those overlap), ``polling`` = samples at least ``FULL`` under a NCCL kernel waiting
  for its late peer (SMs held, no traffic); each against the real alone median;
* ``verdict``: per real population with samples, the stand-in's slowdown within 15 % of
  the real one (transfer: ``paced`` vs ``burst``; polling: ``paced_spin`` vs
  ``burst_spin``), comm-first order (the only order polling has, and the one where the
  comm kernel holds its SMs first).

Usage: python benchmarks/tax_ab_report.py RAW.json.gz [--real real.json] --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

FULL = 0.9  # a sample counts as "beside" when at least this share of it is under comm
TOL = 0.15
VARIANTS = ("burst", "paced", "burst_spin", "paced_spin")


def _ratio_stats(durs: list[float], base: float) -> dict | None:
    if not durs or not base:
        return None
    r = sorted(d / base for d in durs)
    return {"slowdown": statistics.median(r), "n": len(r), "min": r[0], "max": r[-1]}


def _classes(samples: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for cls, dur, _f, _c, _o in samples.get("alone|-|0", []):
        out.setdefault(cls, []).append(dur)
    return out


def build(raw: dict, real: dict | None) -> dict:
    real_by_name: dict[str, dict] = {}
    if real:
        for key, c in real["classes"].items():
            name = key.split(" @ ")[0]
            r = real_by_name.setdefault(name, {"alone": [], "transfer": [], "polling": [],
                                               "ops": []})  # fmt: skip
            r["alone"] += c["alone_ns"]
            r["transfer"] += [b["dur_ns"] for b in c["beside"] if b["f"] >= FULL]
            r["polling"] += [p["dur_ns"] for p in c["polling"] if p["f"] >= FULL]
            r["ops"].append(key.split(" @ ", 1)[1] if " @ " in key else "")
    doc: dict = {"definition": {"full_overlap": FULL, "tolerance": TOL,
                                "slowdown": "median duration beside / median alone"},
                 "device": raw.get("device"), "torch": raw.get("torch"),
                 "checks": raw.get("checks"), "configs": {}}  # fmt: skip
    for cname, c in raw["configs"].items():
        # the fixture's schedule (autograd, per micro-batch) never ran the weight gradient
        # over two micro-batches: those shapes are not matched; a class two of the other
        # shapes share is ambiguous there (the fixture recorded no input shapes)
        shapes_of: dict[str, list[str]] = {}
        for label, sh in c["shapes"].items():
            if "error" not in sh and not label.endswith(" 2mb"):
                for cls in _classes(sh["samples"]):
                    shapes_of.setdefault(cls, []).append(label)
        cd = doc["configs"][cname] = {"profile": c["profile"], "R": c["R"], "T": c["T"],
                                      "comm_model_us": c["comm_model_us"], "shapes": {}}  # fmt: skip
        for label, sh in c["shapes"].items():
            if "error" in sh:
                cd["shapes"][label] = {"error": sh["error"].strip().splitlines()[-1]}
                continue
            S = sh["samples"]
            rows = {}
            for cls, alone in _classes(S).items():
                base = statistics.median(alone)
                if base < 2000:  # < 2 us: launch-bound helpers of a shape, not its kernel
                    continue
                row: dict = {"alone_us": base / 1e3, "n_alone": len(alone),
                             "beside_emulated": {}}  # fmt: skip
                for v in VARIANTS:
                    row["beside_emulated"][v] = {}
                    for order in ("comm_first", "compute_first"):
                        durs, comm, comm_all = [], [], []
                        for key, ss in S.items():
                            if not key.startswith(f"{v}|{order}|"):
                                continue
                            for k, dur, f, cdur, _off in ss:
                                if k != cls or cdur is None:
                                    continue
                                comm_all.append(cdur)
                                if f >= FULL:
                                    durs.append(dur)
                                    comm.append(cdur)
                        st = _ratio_stats(durs, base)
                        if st is not None:
                            st["comm_us"] = statistics.median(comm) / 1e3
                        row["beside_emulated"][v][order] = st
                        # every sample partly under comm, per overlapped time (METRICS.md's
                        # slowdown): 1 + sum(dur - base) / sum(f x base)
                        part = [(dur, f) for key, ss in S.items()
                                if key.startswith(f"{v}|{order}|")
                                for k, dur, f, cdur, _o in ss if k == cls and f > 0.05]
                        if part:
                            row["beside_emulated"][v][order + "_weighted"] = {
                                "slowdown": 1 + sum(d - base for d, _ in part)
                                / sum(f * base for _, f in part), "n": len(part)}  # fmt: skip
                        if comm_all:  # the comm kernel beside this one, any overlap
                            row["beside_emulated"][v][order + "_comm"] = {
                                "comm_us": statistics.median(comm_all) / 1e3,
                                "of_model": statistics.median(comm_all) / 1e3
                                / c["comm_model_us"], "n": len(comm_all)}  # fmt: skip
                if cname == "fixture" and real is not None:
                    rr = real_by_name.get(cls)
                    if label.endswith(" 2mb"):
                        row["beside_real"] = {"note": "the fixture's per-micro-batch schedule "
                                              "never ran this shape"}  # fmt: skip
                    elif len(shapes_of.get(cls, [])) > 1:
                        row["beside_real"] = {"note": "ambiguous: the fixture's kernels of this "
                                              "class are " + " and ".join(shapes_of[cls])
                                              + " (no input shapes recorded)"}  # fmt: skip
                    elif rr is None:
                        row["beside_real"] = {"note": "no kernel of this class in the fixture"}
                    else:
                        rbase = statistics.median(rr["alone"]) if len(rr["alone"]) >= 2 else None
                        row["beside_real"] = {
                            "alone_us": rbase / 1e3 if rbase else None, "n_alone": len(rr["alone"]),
                            "ops": sorted(set(rr["ops"])),
                            "transfer": _ratio_stats(rr["transfer"], rbase),
                            "polling": _ratio_stats(rr["polling"], rbase),
                        }  # fmt: skip
                        row["verdict"] = _verdict(row)
                rows[cls] = row
            cd["shapes"][label] = {"unit": sh["unit"], "phase": sh["phase"], "classes": rows}
    return doc


def _verdict(row: dict) -> dict:
    out = {}
    real = row["beside_real"]
    em = row["beside_emulated"]
    for pop, new, old in (("transfer", "paced", "burst"), ("polling", "paced_spin", "burst_spin")):
        r = real.get(pop)
        if not r:
            out[pop] = {"real_n": 0, "note": "no real sample"}
            continue
        n = (em.get(new) or {}).get("comm_first")
        o = (em.get(old) or {}).get("comm_first")
        v = {"real": r["slowdown"], "real_n": r["n"]}
        for tag, e in (("new", n), ("old", o)):
            if e is None:
                v[tag] = None
                v[f"{tag}_within_15pct"] = None
            else:
                v[tag] = e["slowdown"]
                v[f"{tag}_within_15pct"] = abs(e["slowdown"] / r["slowdown"] - 1) <= TOL
        out[pop] = v
    return out


def _f(x, fmt=".2f"):
    return "—" if x is None else format(x, fmt)


def table(doc: dict) -> str:
    lines = []
    for cname, c in doc["configs"].items():
        lines.append(f"\n**{cname}** (profile `{c['profile']}`, R = {c['R']}, T = {c['T']} "
                     f"tokens, the all-reduce of [T, 3072] bf16: model {c['comm_model_us']:.1f} us; "
                     f"emulated comm)\n")  # fmt: skip
        head = ("| shape | kernel (grid) | alone us | burst | paced | burst spin | paced spin "
                "| comm beside, compute first: burst / paced (x model) |")
        if cname == "fixture":
            head += " real transfer (n) | real polling (n) | new within 15 % |"
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        for label, sh in c["shapes"].items():
            if "error" in sh:
                lines.append(f"| {label} | error: {sh['error'][:80]} |")
                continue
            for cls, row in sh["classes"].items():
                em = row["beside_emulated"]

                def s(v, order="comm_first"):
                    e = em[v][order]
                    if e is None:  # none fully under comm: the per-overlapped-time figure
                        w = em[v].get(order + "_weighted")
                        return "—" if w is None else f"~{w['slowdown']:.2f} ({w['n']})"
                    return f"{e['slowdown']:.2f} ({e['n']})"
                kname = cls.split("[grid")[0].strip()
                kname = (kname[:38] + "…") if len(kname) > 39 else kname
                grid = cls.split("[grid ")[1].split("]")[0] if "[grid " in cls else ""
                def cm(v):
                    e = em[v].get("compute_first_comm")
                    return "—" if e is None else f"{e['of_model']:.2f}"
                cells = [label, f"`{kname}` ({grid})", f"{row['alone_us']:.1f}", s("burst"),
                         s("paced"), s("burst_spin"), s("paced_spin"),
                         f"{cm('burst')} / {cm('paced')}"]  # fmt: skip
                if cname == "fixture":
                    br = row.get("beside_real", {})
                    if "note" in br:
                        cells += [br["note"], "", "—"]
                        lines.append("| " + " | ".join(cells) + " |")
                        continue
                    t, p = br.get("transfer"), br.get("polling")
                    cells.append("no sample" if not t else f"{t['slowdown']:.2f} ({t['n']})")
                    cells.append("no sample" if not p else f"{p['slowdown']:.2f} ({p['n']})")
                    v = row.get("verdict", {})
                    parts = []
                    for pop in ("transfer", "polling"):
                        x = v.get(pop, {})
                        if x.get("real_n"):
                            parts.append(f"{pop}: {'yes' if x.get('new_within_15pct') else 'no'}"
                                         f" (old {'yes' if x.get('old_within_15pct') else 'no'})")
                    cells.append("; ".join(parts) or "—")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--real", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    raw = json.loads(gzip.decompress(args.raw.read_bytes()) if args.raw.suffix == ".gz"
                     else args.raw.read_bytes())  # fmt: skip
    real = json.loads(args.real.read_text()) if args.real else None
    doc = build(raw, real)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in (("tax_ab.json", json.dumps(doc, indent=1) + "\n"),
                       ("tax_ab_table.md", table(doc))):  # fmt: skip
        tmp = args.out / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out / name)
    print(table(doc))


if __name__ == "__main__":
    main()
