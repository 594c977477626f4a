"""`attnbench machine`: this machine's ceilings (GEMM peaks, bandwidth per memory level),
measured once per machine fingerprint and read from the cache after that."""

from pathlib import Path

import typer

from attnbench.cli import core, options


@core.app.command()
def machine(
    device: options.Device = "auto",
    threads: options.Threads = None,
    remeasure: bool = typer.Option(
        False, help="measure again even when this machine's ceilings are cached"
    ),
    json: Path | None = typer.Option(None, help="write the ceilings record to this JSON file"),
) -> None:
    """This machine's ceilings: GEMM GFLOP/s per dtype, copy/triad GB/s per memory level.

    Measured at --threads on first use (saying so on stderr), then read from the cache of
    this machine fingerprint once its check passes; ceilings measured on a busy host are
    provisional and measured again on the next quiet run. The theoretical peak (cores x
    SIMD width x clock) is shown beside them."""
    from attnbench.api.parse import check_threads
    from attnbench.api.probes import output_path, resolve_device

    threads = check_threads(threads)
    device = resolve_device(device)
    json = output_path(json, "--json", (".json",))
    from attnbench.measure.ceilings import cache_path, to_json
    from attnbench.measure.limits import load_or_measure
    from attnbench.measure.threads import set_threads
    from attnbench.results.formats import atomic_write
    from attnbench.views.ceilings import ceilings_table

    threads = set_threads(threads)
    with core.progress_console.status("reading this machine's ceilings") as status:
        ceilings = load_or_measure(
            device, threads, remeasure, on_step=lambda text: status.update(f"measuring {text}")
        )
    cached = cache_path(ceilings.fingerprint)
    core.console.print(ceilings_table(ceilings, str(cached) if cached.is_file() else None))
    if json is not None:
        atomic_write(json, to_json(ceilings))
        core.console.print(f"wrote {json}")
