"""Python overhead of a light-mode RandomX verification call.

Times, in one process and on one machine, per hash of a 76-byte Monero hashing blob:

* ``rust``:  the Rust API called in a Rust loop (``Vm::hash``, through ``_rust_hash_loop``: no
  Python between calls), on the same VM as the next row;
* ``proofkit``: ``proofkit.randomx.VM.hash`` called from Python;
* ``cyrx``: ``cyrx.VM.hash`` (the reference RandomX through Cython), when cyrx is installed.

Rounds alternate between the three so that machine load hits them alike. Each call is timed
with the wall clock and the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID, which does not count
time spent descheduled on a loaded machine); medians are printed.

A light-mode hash takes milliseconds and varies by tens of microseconds from call to call, so
the difference of two medians cannot resolve the binding's cost, which is about a microsecond.
The ``overhead`` line measures it per call instead: ``_hash_timed`` is ``VM.hash`` returning
also the time spent inside ``Vm::hash``; the call's time seen from Python minus that is what
the binding adds (argument conversion, GIL release and re-acquisition, the bytes object, plus
the clock reads), on the wall clock and on the thread's CPU clock. Run::

    python python/bench/light_overhead.py [--rounds 10] [--calls 20] [--v2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from proofkit import randomx


def timed_calls(fn, data: bytes, calls: int) -> list:
    out = []
    for _ in range(calls):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        fn(data)
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        out.append((t1 - t0, c1 - c0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20, help="hashes per round and implementation")
    ap.add_argument("--v2", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    key = b"proofkit python overhead key"
    data = bytes(range(76))
    flags = randomx.get_flags() | (randomx.FLAG_V2 if args.v2 else 0)
    cache = randomx.Cache(flags)
    cache.init(key)
    vm = randomx.VM(flags, cache=cache)
    impls = {
        "rust": lambda: randomx._rust_hash_loop(vm, data, args.calls),
        "proofkit": lambda: timed_calls(vm.hash, data, args.calls),
    }
    try:
        import cyrx

        cflags = cyrx.get_flags() | (cyrx.CYRX_FLAG_V2 if args.v2 else 0)
        ccache = cyrx.Cache(cflags)
        ccache.init(key)
        cvm = cyrx.VM(cflags, cache=ccache)
        assert cvm.hash(data) == vm.hash(data), "cyrx and proofkit disagree"
        impls["cyrx"] = lambda: timed_calls(cvm.hash, data, args.calls)
    except ImportError:
        pass

    def overhead_calls() -> list:
        out = []
        for _ in range(args.calls):
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            _, inner_wall, inner_cpu = randomx._hash_timed(vm, data)
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            out.append((t1 - t0 - inner_wall, c1 - c0 - inner_cpu))
        return out

    impls["overhead"] = overhead_calls
    samples: dict = {name: [] for name in impls}
    for name, run in impls.items():  # warm-up (JIT pages, scratchpad, caches)
        run()
    for _ in range(args.rounds):
        for name, run in impls.items():
            samples[name].extend(run())

    overhead = samples.pop("overhead")
    rows = []
    for name, s in samples.items():
        rows.append(
            {
                "impl": name,
                "calls": len(s),
                "wall_us_median": statistics.median(w for w, _ in s) / 1e3,
                "cpu_us_median": statistics.median(c for _, c in s) / 1e3,
            }
        )
    by = {r["impl"]: r for r in rows}
    summary = {
        "binding_overhead_wall_ns_median": statistics.median(w for w, _ in overhead),
        "binding_overhead_cpu_ns_median": statistics.median(c for _, c in overhead),
        "median_diff_wall_us": by["proofkit"]["wall_us_median"] - by["rust"]["wall_us_median"],
        "median_diff_cpu_us": by["proofkit"]["cpu_us_median"] - by["rust"]["cpu_us_median"],
        "loadavg_1m": os.getloadavg()[0],
        "version": "v2" if args.v2 else "v1",
        "jit": vm.uses_jit,
    }
    if args.json:
        print(json.dumps({"rows": rows, **summary}))
        return
    print(f"light-mode RandomX {summary['version']}, 76-byte input, {args.rounds}x{args.calls} calls each, "
          f"load average {summary['loadavg_1m']:.2f}")
    print(f"{'impl':<10} {'wall median (us)':>17} {'cpu median (us)':>16}")
    for r in rows:
        print(f"{r['impl']:<10} {r['wall_us_median']:>17.1f} {r['cpu_us_median']:>16.1f}")
    print(f"difference of medians (proofkit - rust): wall {summary['median_diff_wall_us']:+.1f} us, "
          f"cpu {summary['median_diff_cpu_us']:+.1f} us (noise of the hash itself)")
    print(f"binding overhead per call (Python call time - time inside Vm::hash), medians: "
          f"wall {summary['binding_overhead_wall_ns_median'] / 1e3:.2f} us, "
          f"cpu {summary['binding_overhead_cpu_ns_median'] / 1e3:.2f} us")
    if "cyrx" in by:
        print(f"proofkit / cyrx (cpu medians): {by['proofkit']['cpu_us_median'] / by['cyrx']['cpu_us_median']:.3f}")


if __name__ == "__main__":
    main()
