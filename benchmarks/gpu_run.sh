#!/usr/bin/env bash
# Every GPU check and figure in one go, on one CUDA machine:
#   bash benchmarks/gpu_run.sh checks|sweeps OUTDIR [AUTHORS_DIR]
# checks: the GPU tests, which SDPA kernel torch picks, Nsight Compute on YOSO's kernels and
# (given the YOSO authors' yoso_v2 folder) their kernels against ours. sweeps: time against
# n for every linear backend, fp32 and bf16, forward and forward+backward, and SCRAM's
# stage profile at 256x256. Each step has its own time limit and log under OUTDIR, and a
# failed step does not stop the ones after it; the script exits 1 if any step failed.
set -u
what=$1
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

linear=sdpa,yoso-32,linformer,performer,nystromformer,reformer,longformer
if [ "$what" = checks ]; then
    step env 30 bash -c 'nvidia-smi; python3 -c "import torch, numba, numba.cuda as c, sys;
print(sys.version); print(\"torch\", torch.__version__, torch.version.cuda);
print(\"numba\", numba.__version__, \"numba-cuda\", c.__version__ if hasattr(c, \"__version__\") else \"?\");
print(torch.cuda.get_device_name())"; python3 -m pip show numba-cuda | head -2'
    if [ -n "$authors" ]; then  # build the authors' extensions while the tests run
        (timeout 240 python3 benchmarks/authors_yoso.py --authors "$authors" --build-only \
            >"$out/logs/authors-build.log" 2>&1; echo "exit $?" >>"$out/logs/authors-build.log") &
    fi
    step tests 130 python3 -m pytest -q -rs -s tests/test_gpu.py tests/test_ptx.py
    step sdpa-kernels 20 python3 benchmarks/sdpa_kernels.py
    if [ -n "$authors" ]; then
        wait
        tail -n 3 "$out/logs/authors-build.log"
        step authors 80 python3 benchmarks/authors_yoso.py --authors "$authors" \
            --csv "$out/authors-yoso.csv"
    fi
    step ncu-yoso 50 ncu --clock-control none --profile-from-start off --target-processes all \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --csv --log-file "$out/ncu-yoso.csv" python3 benchmarks/yoso_once.py --seq 16384
else
    for dtype in float32 bfloat16; do  # the crossover with sdpa in fp32, bf16 coarser
        seq=1k..64k
        limit=70
        [ "$dtype" = float32 ] || { seq=1k,4k,16k,64k; limit=45; }
        for mode in fwd fwdbwd; do
            step "time-$dtype-$mode" "$limit" python3 -m attnbench time --device cuda \
                --seq "$seq" --backends "$linear" --dtype "$dtype" --mode "$mode" --repeats 3 \
                --warmup 2 --min-time 0.05 --csv "$out/time-$dtype-$mode.csv"
        done
    done
    step scram-profile 45 python3 -m attnbench profile --device cuda --grid 256x256 \
        --backends sdpa,scram:kappa=4,b=1 --dim 3 --heads 1 --csv "$out/scram-profile.csv"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
