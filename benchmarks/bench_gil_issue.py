"""Would two threads issue a step's ops faster than one? (issue 34: eager domino-sp is
host-bound; one idea was to issue each micro-batch from its own thread, since aten's
Python bindings release the GIL around each op's C++ call.)

    python benchmarks/bench_gil_issue.py            # CPU tensors (any machine)
    python benchmarks/bench_gil_issue.py --cuda     # the same ops on the GPU

The same small ops (a GEMM, two views, a multiply, a SiLU on a [16, 64] tensor: the
size of a dispatch-bound step, where the host's per-op cost is the whole cost) are
issued 2N times from one thread, then N times from each of two threads; ``--rounds``
alternations, ABAB. Printed per round: both wall times and their ratio (two threads /
one; below 1 would mean the second thread hides dispatch). Each op hands the GIL over
twice, and with two threads wanting it every hand-over is a wake-up of the other
thread: CPython's GIL convoy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="op groups per thread")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cuda", action="store_true")
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    dev = "cuda" if a.cuda else "cpu"
    x0 = torch.randn(16, 64, device=dev)
    w = torch.randn(64, 64, device=dev)

    def work(n: int) -> None:
        x = x0
        for _ in range(n):
            y = torch.mm(x, w).transpose(0, 1).t()
            x = torch.nn.functional.silu(y * 0.5)

    def sync() -> None:
        if a.cuda:
            torch.cuda.synchronize()

    work(100)
    sync()
    ratios = []
    py = sys.version.split()[0]
    print(f"{2 * a.n} op groups on {dev}, Python {py}, torch {torch.__version__}")
    for r in range(a.rounds):
        t = time.perf_counter()
        work(2 * a.n)
        sync()
        one = time.perf_counter() - t
        th = [threading.Thread(target=work, args=(a.n,)) for _ in range(2)]
        t = time.perf_counter()
        for x in th:
            x.start()
        for x in th:
            x.join()
        sync()
        two = time.perf_counter() - t
        ratios.append(two / one)
        print(f"round {r + 1}: one thread {one * 1e3:.0f} ms, two threads {two * 1e3:.0f} ms, "
              f"ratio {two / one:.2f}")  # fmt: skip
    print(f"two / one: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}, "
          f"max {max(ratios):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
