# ruff: noqa
"""The diagnostic behind this report, kept as it was run (H200: `python3 <this file> OUT ROWS
[PROFILED_ROWS]` from the repository root; DEV=cpu runs the tiny preset on CPU).

ROWS: comma list of schedule:variant (eager, compile, graphs), each a new StepRunner in this
one process (llama3-3b, seq 1024, mbs 2, tp 1, bf16); per row: first step (compiles),
3 warm-up, STEPS timed steps with (issue ms, wall ms, probe ms) each, Dynamo's counters
over the timed steps, cache entries per compiled segment function, CPU seconds per thread
and child process, machine busy / steal fraction, context switches; PROFILED_ROWS also get
one torch.profiler step (counts, self-CPU table) and one cProfile step.
"""
import cProfile, collections, gc, io, json, os, pstats, subprocess, sys, threading, time
import torch
from torch._dynamo.utils import counters
sys.path.insert(0, os.getcwd())
from domino_prof.reference_model import units
from domino_prof.reference_model.comm import ProcessGroupComm
from domino_prof.reference_model.config import preset
from domino_prof.reference_model.parallel import shard_model
from domino_prof.reference_model.schedule import StepRunner
from domino_prof.reference_model.verify import batch

out_dir, rows = sys.argv[1], sys.argv[2].split(",")
prof_rows = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()
os.makedirs(out_dir, exist_ok=True)
dev = torch.device(os.environ.get("DEV", "cuda"))
dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
CU = dev.type == "cuda"
def sync():
    if CU:
        torch.cuda.synchronize()
tag = os.environ.get("TAG", "run")
log = open(os.path.join(out_dir, f"{tag}.txt"), "a")
def P(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True); log.write(s + "\n"); log.flush()

P("torch", torch.__version__, "python", sys.version.split()[0], "gc thresholds", gc.get_threshold(),
  "compile_threads", torch._inductor.config.compile_threads, "cpus", os.cpu_count())
if CU:
    units.attention_kernel(dev, dt); units.attention_kernel(torch.device("cuda", 0), dt)
cfg = preset("llama3-3b" if CU else "tiny")
inp, tgt = batch(cfg, mbs=2, seq=1024 if CU else 128, seed=7, device=dev)
TCK = os.sysconf("SC_CLK_TCK")

def tasks():
    o = {}
    for t in os.listdir("/proc/self/task"):
        try:
            f = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            n = open(f"/proc/self/task/{t}/comm").read().strip()
        except OSError:
            continue
        o[t] = (n, int(f[11]) + int(f[12]))
    return o

def child_cpu():
    r = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "pid=,time=,pcpu=,comm="], capture_output=True, text=True)
    return [l.split() for l in r.stdout.splitlines() if "ps" not in l.split()[-1:]]

def probe():
    t = time.perf_counter(); x = 0
    for i in range(200000):
        x += i
    return round((time.perf_counter() - t) * 1e3, 2)

def sysstat():
    cs = {}
    for l in open("/proc/self/status"):
        if "ctxt_switches" in l:
            k, v = l.split(":"); cs[k] = int(v)
    cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return cs, cpu, open("/proc/loadavg").read().split()[:3]

def snap():
    return {k: dict(v) for k, v in counters.items()}

def cdiff(a, b):
    d = {}
    for k, v in b.items():
        for kk, vv in v.items():
            x = vv - a.get(k, {}).get(kk, 0)
            if x:
                d[f"{k}.{kk}"] = x
    return d

gc_t = {"n": [0, 0, 0], "s": 0.0, "t0": None}
def gccb(phase, info):
    if phase == "start":
        gc_t["t0"] = time.perf_counter()
    else:
        gc_t["n"][info["generation"]] += 1
        gc_t["s"] += time.perf_counter() - gc_t["t0"]
gc.callbacks.append(gccb)
results = []

for spec in rows:
    sched, var = spec.split(":")
    comp = "compile" in var
    comm = ProcessGroupComm()
    model = shard_model(cfg, comm, seed=1, device=dev, dtype=dt)
    r = StepRunner(model, comm, schedule=sched, splits=2, graphs="graphs" in var, compile=comp)
    c0 = snap(); t0 = time.perf_counter()
    r.step(inp, tgt); sync()
    first = time.perf_counter() - t0
    fc = cdiff(c0, snap())
    P(f"== {spec}: first {first:.1f}s counters", {k: v for k, v in fc.items() if not k.startswith("aot_autograd")})
    P("   children after first step:", child_cpu())
    for _ in range(3):
        r.step(inp, tgt)
    sync()
    steps = []
    pr0 = [probe() for _ in range(3)]
    ss0 = sysstat()
    ta = tasks(); gc_t.update(n=[0, 0, 0], s=0.0); c0 = snap(); tw0 = time.perf_counter()
    for i in range(int(os.environ.get("STEPS", 12))):
        sync()
        a = time.perf_counter(); r.step(inp, tgt); b = time.perf_counter(); sync(); c = time.perf_counter()
        steps.append((round((b - a) * 1e3, 1), round((c - a) * 1e3, 1), probe()))
    tw = time.perf_counter() - tw0
    ss1 = sysstat()
    cpu = [b - a for a, b in zip(ss0[1], ss1[1])]  # user nice system idle iowait irq softirq steal
    tot = sum(cpu[:8]) or 1
    sysd = {"ctx": {k: ss1[0][k] - ss0[0][k] for k in ss1[0]}, "machine_busy_frac": round(1 - (cpu[3] + cpu[4]) / tot, 3),
            "steal_frac": round(cpu[7] / tot, 3) if len(cpu) > 7 else None, "loadavg": ss1[2], "probe_before_ms": pr0}
    tb = tasks()
    th = sorted(((tb[k][1] - ta.get(k, (0, 0))[1]) / TCK, tb[k][0], k) for k in tb)
    th = [x for x in th if x[0] > 0]
    rec = {"row": spec, "first_s": first, "steps_issue_wall_ms": steps, "timed_wall_s": tw,
           "counters_timed": cdiff(c0, snap()), "gc": dict(gc_t, t0=None),
           "thread_cpu_s": th, "children": child_cpu(), "sys": sysd}
    if comp:
        ce = {}
        for fn in r.executor._compiled:
            try:
                ce[fn.__name__] = len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))
            except Exception as e:
                ce[fn.__name__] = repr(e)[:80]
        rec["cache_entries"] = ce
    P("   issue/wall/probe per step", steps)
    P("   sys", sysd)
    P("   timed wall %.2fs; thread cpu s" % tw, th[-6:])
    P("   gc", rec["gc"], "counters in timed steps", rec["counters_timed"])
    P("   cache entries", rec.get("cache_entries"))
    if spec in prof_rows:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            r.step(inp, tgt); sync()
        cnt = collections.Counter(e.name for e in p.events())
        rt = {k: v for k, v in cnt.items() if k.startswith(("cuda", "cu", "Torch", "TorchDynamo", "## Call", "aten::_local", "aten::item", "aten::copy_", "aten::empty"))}
        rec["prof_counts"] = dict(sorted(rt.items(), key=lambda kv: -kv[1])[:60])
        P("   profiler counts", json.dumps(rec["prof_counts"])[:3000])
        P(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70))
        pr = cProfile.Profile(); pr.enable()
        r.step(inp, tgt); sync()
        pr.disable()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        P(s.getvalue()[:5000])
    results.append(rec)
    json.dump(results, open(os.path.join(out_dir, f"{tag}.json"), "w"), indent=1, default=str)
    r = model = None
    gc.collect()
    if CU:
        torch.cuda.empty_cache()
P("done")
