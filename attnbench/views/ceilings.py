"""The table `attnbench machine` prints: this machine's measured ceilings (GEMM rates per
dtype, the vector add rate, bandwidth per memory level), and on a GPU what its
specification sheet computes."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

from attnbench.measure.busy import describe


def ceilings_table(ceilings, cache_file: str | None = None) -> Table:
    """A machine's ceilings (`measure.ceilings.Ceilings`): GEMM peak and add rate per dtype,
    copy and triad bandwidth per memory level, the computed peak with its inputs and the
    measured fp32 GEMM peak's share of it, GPU clocks and datasheet peaks when present, and where
    the record is cached (`cache_file`, None: not written)."""
    title = f"attnbench machine: {ceilings.device_name} ({ceilings.device}, "
    threads = f"{ceilings.threads} thread" + ("" if ceilings.threads == 1 else "s")
    table = Table(title=escape(f"{title}{threads})"))
    table.caption = escape(provisional_note(ceilings) or "")
    for column in ("ceiling", "value", "basis"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for dtype, gflops in ceilings.gemm_gflops.items():
        size = ceilings.gemm_size.get(dtype)
        table.add_row(f"GEMM {dtype}", _flops(gflops), f"torch.mm, n = {size}" if size else "")
    for dtype, gflops in ceilings.add_gflops.items():
        basis = "8-lane adds in registers: the peak of work with no multiply to fuse"
        table.add_row(f"vector adds {dtype}", _flops(gflops), basis)
    table.add_section()
    sysfs = {f"L{level}": size for level, size, _ in ceilings.provenance.get("sysfs_caches", [])}
    swept = set(ceilings.provenance.get("swept_levels", []))
    for level in ceilings.levels:
        held = "beyond the caches" if math.isinf(level.capacity) else f"of {_size(level.capacity)}"
        basis = f"working set {_size(level.working_set)} {held}"
        if level.name in swept:
            said = sysfs.get(level.name)
            basis += " (bandwidth sweep" + (f"; sysfs: {_size(said)} a cache)" if said else ")")
        table.add_row(f"{level.name} copy", f"{level.copy_gbs:,.1f} GB/s", basis)
        table.add_row(f"{level.name} triad", f"{level.triad_gbs:,.1f} GB/s", basis)
    measured = ceilings.gemm_gflops.get("float32")
    _computed_rows(table, ceilings.computed, measured)
    _gpu_rows(table, ceilings, measured)
    table.add_section()
    table.add_row("fingerprint", ceilings.fingerprint, f"measured {ceilings.measured_at}")
    if ceilings.provenance:
        state = "provisional" if ceilings.provisional else "final"
        table.add_row("measured under", state, escape(describe(ceilings.provenance)))
    table.add_row("cache file", "", escape(cache_file) if cache_file else "not written")
    return table


def provisional_note(ceilings) -> str | None:
    """The line a table from provisional ceilings carries; None for final ones."""
    if ceilings is None or not ceilings.provisional:
        return None
    return (
        f"ceilings provisional: measured on a busy host ({ceilings.provenance.get('busy')}), "
        "so they read low and % of bound reads high; measured again on the next quiet run"
    )


def _computed_rows(table: Table, computed: dict, measured: float | None) -> None:
    """cores x lanes x 2 x FMA units x clock, and the fp32 GEMM peak's share of it."""
    if not computed:
        return
    table.add_section()
    clocks = computed.get("clock_sources_ghz") or {}
    ghz = computed.get("clock_ghz")
    source = next((k for k, v in clocks.items() if v and v == ghz), None)
    where = {"cpu_mhz": "cpu MHz", "cpufreq_max": "cpufreq max"}.get(source, source)
    clock = f"{ghz:.2f} GHz ({where})" if source else "no clock known"
    assumed = " (assumed)" if computed.get("fma_units_assumed") else ""
    part = {k: computed.get(k, "?") for k in ("cores_used", "fp32_lanes", "simd", "fma_units")}
    basis = (
        f"{part['cores_used']} cores x {part['fp32_lanes']} lanes ({part['simd']}) x "
        f"{computed.get('flops_per_fma', 2)} (FMA) x {part['fma_units']} FMA units{assumed} "
        f"x {clock}"
    )
    peak = computed.get("gflops_fp32")
    table.add_row("computed fp32 peak", _flops(peak) if peak else "-", escape(basis))
    if peak and measured:
        table.add_row("GEMM float32 / computed", f"{measured / peak:.0%}", "measured over computed")


def _gpu_rows(table: Table, ceilings, measured: float | None) -> None:
    """NVML clocks, then the vendor's peaks and the measured share of them."""
    clocks, sheet = ceilings.clocks, ceilings.datasheet
    if clocks:
        table.add_section()
        for label in ("sm", "memory"):
            if clocks.get(f"{label}_max_mhz") is not None:
                now = f"now {clocks.get(f'{label}_mhz')} MHz ({clocks.get('source', 'NVML')})"
                table.add_row(
                    f"{label.upper()} clock", f"{clocks[f'{label}_max_mhz']} MHz max", now
                )
    if not sheet:
        return
    table.add_section()
    source = f"{sheet['product']}, {sheet['source']} (not measured)"
    for key in ("fp32", "tf32", "bf16", "fp16"):
        if sheet.get(f"{key}_tflops"):
            table.add_row(f"datasheet {key}", _flops(1e3 * sheet[f"{key}_tflops"]), source)
    if sheet.get("memory_tbs"):
        table.add_row("datasheet memory", f"{sheet['memory_tbs']:.2f} TB/s", source)
    if measured and sheet.get("fp32_tflops"):
        share = measured / (1e3 * sheet["fp32_tflops"])
        table.add_row("GEMM float32 / datasheet", f"{share:.0%}", "measured over datasheet")
    if ceilings.levels and sheet.get("memory_tbs"):
        last = ceilings.levels[-1]
        share = last.gbs / (1e3 * sheet["memory_tbs"])
        table.add_row(f"{last.name} / datasheet", f"{share:.0%}", "measured over datasheet")


def _flops(gflops: float) -> str:
    return f"{gflops / 1e3:,.1f} TFLOP/s" if gflops >= 1e4 else f"{gflops:,.1f} GFLOP/s"


def _size(nbytes: float) -> str:
    """Bytes in binary units: "32 KiB", "1.5 MiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.4g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.4g} GiB"
