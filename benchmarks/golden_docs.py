"""The analysis documents every speed/memory change must reproduce, to the ns.

    PYTHONPATH=<checkout of cd6e349> python benchmarks/golden_docs.py --out tests/data/golden_cd6e349

Writes one ``<name>.json`` per input of :data:`INPUTS` (``document.encode`` of
``analyse_path(...).to_json()``, ``source`` replaced by the input's name), made by
whichever ``domino_prof`` is importable: run it once against the commit before the
decode work (cd6e349) and commit the output; ``tests/test_decode_columns.py`` then
compares what the current code makes against those bytes. Inputs: the committed
fixtures and small sets built here deterministically (the real trace tiled, a
``gen_trace`` kernel-heavy rank pair).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_inputs(tmp: Path) -> dict[str, Path]:
    """name -> trace path: the fixtures, plus the built sets under ``tmp``."""
    tile = _load("tile_trace")
    gen = _load("gen_trace")
    tile.write_ranks(tmp / "tiled-2x4", tiles=2, ranks=4, gz=False)
    (tmp / "kernel-heavy").mkdir(parents=True, exist_ok=True)
    for r in range(2):
        gen.write_trace(tmp / "kernel-heavy" / f"rank{r}.pt.trace.json.gz", events=30_000,
                        rank=r, world_size=2)  # fmt: skip
    return {
        "h200-domino": DATA / "h200_llama3_3b_2layers_tp2" / "domino",
        "h200-tp": DATA / "h200_llama3_3b_2layers_tp2" / "tp",
        "h200-two-stream": DATA / "h200_two_stream",
        "tiled-2x4": tmp / "tiled-2x4",
        "kernel-heavy-30k": tmp / "kernel-heavy",
    }


def document(path: Path, name: str, **kw) -> bytes:
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.analysis.document import encode
    from domino_prof.engine import analyse_path

    doc = analyse_path(path, AnalysisConfig(), progress=False, **kw).to_json()
    doc["source"] = name
    return encode(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import domino_prof

    print(f"domino_prof from {domino_prof.__file__}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in build_inputs(Path(tmp)).items():
            (out / f"{name}.json").write_bytes(document(path, name, workers=1))
            print(f"wrote {out / name}.json", file=sys.stderr)


if __name__ == "__main__":
    main()
