"""`attnbench selftest`: can this machine be trusted? Every backend and kernel path against
its reference on the device, the timer, NVML and the machine ceilings, one row each; exit 1
naming the checks that failed."""

from __future__ import annotations

from pathlib import Path

import typer

from attnbench.cli import core, options
from attnbench.errors import UsageError


@core.app.command()
def selftest(
    device: options.Device = "auto",
    quick: bool = typer.Option(
        False, "--quick", help="tiny shapes (always so under the simulator)"
    ),
    json: Path | None = typer.Option(None, help="write the checks to this JSON file"),
) -> None:
    """Check every backend and numba kernel path against its plain-torch reference on the
    device (float32 and the half types), hash codes against the CPU's, the timer, NVML and
    the machine ceilings. Exit 1 if any check fails.

    Under NUMBA_ENABLE_CUDASIM=1, --device cuda runs the CUDA kernels in numba's simulator
    on tiny shapes."""
    from attnbench.api.probes import output_path

    device = _device(device)
    json = output_path(json, "--json", (".json",))
    import json as json_module

    from attnbench.results.formats import atomic_write
    from attnbench.studies import selftest as study
    from attnbench.views.selftest import selftest_table

    target = study.target(device, quick)
    with core.progress_console.status("selftest") as status:
        report = study.run(target, on_check=lambda name: status.update(f"selftest: {name}"))
    core.console.print(selftest_table(report))
    if json is not None:
        atomic_write(json, json_module.dumps(report.as_dict(), indent=2) + "\n")
        core.console.print(f"wrote {json}")
    if report.failed:
        typer.echo(f"selftest failed: {'; '.join(report.failed)}", err=True)
        raise typer.Exit(1)


def _device(name: str) -> str:
    """cpu or cuda as `resolve_device` says, but cuda-sim for cuda (and auto) under the
    CUDA simulator, where the CPU kernels cannot be checked."""
    from attnbench.api.probes import resolve_device
    from attnbench.kernels.target import simulator_enabled

    if name.lower() in ("auto", "cuda") and simulator_enabled():
        return "cuda-sim"
    device = resolve_device(name)
    if device == "cpu" and simulator_enabled():
        raise UsageError(
            "--device cpu: NUMBA_ENABLE_CUDASIM=1 sends every numba kernel to the CUDA "
            "simulator; unset it to check the CPU kernels"
        )
    return device
