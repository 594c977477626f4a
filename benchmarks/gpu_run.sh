#!/usr/bin/env bash
# The GPU checks and figures, on one CUDA machine, as a list of steps:
#   bash benchmarks/gpu_run.sh STEP[,STEP...] OUTDIR [AUTHORS_DIR]
# env: versions and the GPU; tests: the GPU tests (`tests-yoso`: YOSO's alone) and the PTX
# check; sdpa: which SDPA kernel torch picks; authors: the YOSO authors' kernels (their
# yoso_v2 folder) against ours; host: where small YOSO calls spend host time; ncu: Nsight
# Compute on one YOSO forward + backward; time: time against n for every linear backend,
# fp32 forward and forward + backward; time-bf16: the same in bf16; scram: SCRAM's stage
# profile at 256x256. Each step has its own time limit and log under OUTDIR/logs, a failed
# step does not stop the ones after it, and the script exits 1 if any step failed.
set -u
steps=",$1,"
out=$2
authors=${3:-}
mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME SECONDS COMMAND...: run COMMAND under a time limit, log to OUTDIR/logs
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/logs/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    [ "$rc" -eq 0 ] || failed+=("$name")
    tail -n 4 "$out/logs/$name.log"
}

wanted() { [[ $steps == *",$1,"* ]]; }

linear=sdpa,yoso-32,linformer,performer,nystromformer,reformer,longformer
if wanted authors && [ -n "$authors" ]; then  # build their extensions while the tests run
    (timeout 240 python3 benchmarks/authors_yoso.py --authors "$authors" --build-only \
        >"$out/logs/authors-build.log" 2>&1; echo "exit $?" >>"$out/logs/authors-build.log") &
fi
if wanted env; then
    step env 30 bash -c 'nvidia-smi; python3 -c "import torch, numba, numpy, sys;
print(sys.version); print(\"torch\", torch.__version__, torch.version.cuda);
print(\"numba\", numba.__version__, \"numpy\", numpy.__version__);
print(torch.cuda.get_device_name())"; python3 -m pip show numba-cuda 2>/dev/null | head -2'
fi
if wanted tests; then
    step tests 150 python3 -m pytest -q -rs tests/test_gpu.py tests/test_ptx.py
elif wanted tests-yoso; then
    step tests-yoso 100 python3 -m pytest -q -rs tests/test_gpu.py tests/test_ptx.py \
        -k "yoso or lsh or hash or ptx or listed"
fi
if wanted sdpa; then
    step sdpa-kernels 20 python3 benchmarks/sdpa_kernels.py
fi
if wanted authors && [ -n "$authors" ]; then
    wait
    tail -n 3 "$out/logs/authors-build.log"
    step authors 90 python3 benchmarks/authors_yoso.py --authors "$authors" \
        --csv "$out/authors-yoso.csv"
fi
if wanted host; then
    step host 40 python3 benchmarks/yoso_host.py --seq 1024 --calls 200
fi
if wanted ncu; then
    step ncu-yoso 60 ncu --clock-control none --profile-from-start off --target-processes all \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --csv --log-file "$out/ncu-yoso.csv" python3 benchmarks/yoso_once.py --seq 16384
fi
for dtype in float32 bfloat16; do  # the crossover with sdpa in fp32, bf16 coarser
    if [ "$dtype" = float32 ]; then
        wanted time || continue
        seq=1k..64k
        limit=70
    else
        wanted time-bf16 || continue
        seq=1k,4k,16k,64k
        limit=45
    fi
    for mode in fwd fwdbwd; do
        step "time-$dtype-$mode" "$limit" python3 -m attnbench time --device cuda \
            --seq "$seq" --backends "$linear" --dtype "$dtype" --mode "$mode" --repeats 3 \
            --warmup 2 --min-time 0.05 --csv "$out/time-$dtype-$mode.csv"
    done
done
if wanted scram; then
    step scram-profile 120 python3 -m attnbench profile --device cuda --grid 256x256 \
        --backends sdpa,scram:kappa=4,b=1 --dim 3 --heads 1 --csv "$out/scram-profile.csv"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
