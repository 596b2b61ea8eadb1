#!/usr/bin/env bash
# guard --watch end to end on a real GPU host, through the command line: live NVML, real child processes.
#
#   PYTHONPATH=. bash benchmarks/bench_watch_live.sh OUTDIR
#
# Needs PyTorch with a GPU. Three watched runs, each a fresh `hoststate guard --watch`:
#   A  an idle baseline run (sleep 10), saved with its shares (--save-current);
#   B  a bf16 matmul loop as guard's own child, judged against A (degraded: power cap, exit 4), attached to a
#      result written as `vllm bench serve --save-result` writes it, every sample kept (--watch-trace);
#   C  the same against B's saved run (power cap as in the baseline), while a process that is not guard's child
#      starts its own matmuls on the GPU (degraded: another process).
# Then `hoststate results OUTDIR` over the two attached results.
set -u
out=$1
work=$(mktemp -d)
hs() { python3 -m hoststate "$@"; }
cat > "$work/bench.py" <<'EOF'
import json, os, sys, time, torch
seconds, result = float(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end, n, t0 = time.monotonic() + seconds, 0, time.monotonic()
while time.monotonic() < end:
    for _ in range(10): a @ b
    torch.cuda.synchronize(); n += 10
if result:
    took = time.monotonic() - t0
    data = {"date": time.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "completed": n, "failed": 0,
            "duration": took, "tflops": n * 2 * 8192**3 / took / 1e12}
    for item in os.environ.get("HOSTSTATE_METADATA", "").split():
        key, value = item.split("=", 1); data[key] = value
    json.dump(data, open(result, "w"))
EOF
hs snap -q -o "$work/base.toml"
echo "== A: idle baseline run"
hs guard --baseline "$work/base.toml" --watch --save-current "$out/base-run.toml" -- sleep 10; echo "A exit $?"
echo "== B: matmul as guard's child, against the idle baseline run"
hs guard --baseline "$out/base-run.toml" --watch --attach "$out/run=0.json" --watch-trace "$out/live-trace.json" \
    --save-current "$work/loaded-run.toml" --fail-on degraded -- python3 "$work/bench.py" 20 "$out/run=0.json"
echo "B exit $?"
echo "== C: the same against B's run, and a process of someone else's starting on the GPU 6 s in"
(sleep 6; exec python3 "$work/bench.py" 8) &
other=$!
hs guard --baseline "$work/loaded-run.toml" --watch --attach "$out/run=1.json" --fail-on invalid -- \
    python3 "$work/bench.py" 20 "$out/run=1.json"
echo "C exit $? (the other process: pid $other)"
wait
echo "== results"
hs results "$out"; echo "results exit $?"
