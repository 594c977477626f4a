"""`attnbench error`: how far a backend is from exact attention, in numbers."""

import typer

from attnbench.cli import core, options


@core.app.command("error")
def error_cmd(
    hashes: str = typer.Option(
        None,
        help="adds yoso:m=... for each number of hashes m: 8..128 doubles 8, 16, ... "
        "(default 8..128 when no --backends)",
    ),
    seq: options.Seq = None,
    grid: options.Grid = None,
    tau: str = typer.Option("8", help="bits per hash code, 1..24, or auto = ceil(log2 n)"),
    trials: int = typer.Option(3, help="independent seeds per case (mean and std)"),
    mc_seeds: int = typer.Option(
        8, help="seeds per input for stochastic backends' bias and std (1 = skip)"
    ),
    inputs: options.Inputs = "clustered",
    backends: options.Backends = "",
    reference: str = typer.Option(
        None,
        help="backend every other is compared with (default: yoso-e with --tau when only "
        "--hashes is swept, as YOSO Fig. 8; else exact softmax)",
    ),
    mode: str = typer.Option(
        "fwd",
        help="fwd: the outputs' error; fwdbwd: also dQ, dK, dV's for a fixed upstream "
        "gradient (grad_rel, grad_cos, grad_bias, grad_noise)",
    ),
    isolate: options.Isolate = False,
    executor: options.Executor = "in-process",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    batch: options.Batch = 1,
    heads: options.Heads = 4,
    dim: options.Dim = 64,
    dtype: options.Dtype = "float32",
    device: options.Device = "auto",
    seed: options.Seed = 0,
    threads: options.Threads = None,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Approximation error of backends against a reference (YOSO Fig. 8).

    By default YOSO-m against YOSO-E over the hashes and n = 64..4096; trial t uses seed + t.
    --mode fwdbwd adds the gradients' error (every backend and the reference need a backward)."""
    from attnbench.api.error import run_error

    executor = options.executor_name(executor, isolate)
    finished = run_error(
        hashes=hashes, seq=seq, grid=grid, tau=tau, trials=trials, mc_seeds=mc_seeds,
        inputs=inputs, backends=backends, reference=reference, mode=mode, executor=executor,
        ray_address=ray_address, cpus_per_worker=cpus_per_worker, resume=resume, batch=batch,
        heads=heads, dim=dim, dtype=dtype, device=device, seed=seed, threads=threads, csv=csv,
        json=json, plot=plot, progress=core.progress_bar(),
    )  # fmt: skip
    from attnbench.views.tables import error_table

    core.console.print(error_table(finished.frame))
    core.report_finished(finished)
