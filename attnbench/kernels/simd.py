"""Eight float32 lanes in a register (`Vec8`, LLVM `<8 x float>`) for numba CPU kernels.

`+ - *` on two vectors are one IEEE operation per lane, exactly the scalar code's (no
fast-math flags, so LLVM never fuses a product and a sum into an FMA), but they let a
kernel keep a tile of sums in registers, which numba's auto-vectoriser does not do.
Indices are uint64: numba adds no negative-index wraparound to unsigned indices.
"""

from __future__ import annotations

import operator

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, overload, register_model

from attnbench.kernels.compiling import report_compiles

report_compiles()  # before a kernel built on these can compile: say when one does

_LANES = 8
_F32 = ir.FloatType()
_V8 = ir.VectorType(_F32, _LANES)
_I32 = ir.IntType(32)


class _Vec8(types.Type):
    """Eight float32 lanes held in a register."""

    def __init__(self):
        super().__init__(name="vec8f32")


_vec8 = _Vec8()


@register_model(_Vec8)
class _Vec8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V8)


def _lanes_at(context, builder, arrty, arr, idx):
    """Pointer to 8 consecutive 4-byte elements of a 1-d array from element idx on."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [idx]), _V8.as_pointer())


@intrinsic
def _load(typingctx, arr, idx):
    """arr[idx : idx + 8] (float32, any alignment)."""

    def codegen(context, builder, sig, args):
        return builder.load(_lanes_at(context, builder, sig.args[0], *args), align=4)

    return _vec8(arr, types.uint64), codegen


@intrinsic
def _store(typingctx, arr, idx, v):
    """arr[idx : idx + 8] = v."""

    def codegen(context, builder, sig, args):
        builder.store(args[2], _lanes_at(context, builder, sig.args[0], args[0], args[1]), align=4)
        return context.get_dummy_value()

    return types.void(arr, types.uint64, v), codegen


@intrinsic
def _splat(typingctx, x):
    """x (a float32) in all 8 lanes."""

    def codegen(context, builder, sig, args):
        lane = builder.insert_element(ir.Constant(_V8, ir.Undefined), args[0], _I32(0))
        zeros = ir.Constant(ir.VectorType(_I32, _LANES), [0] * _LANES)
        return builder.shuffle_vector(lane, ir.Constant(_V8, ir.Undefined), zeros)

    return _vec8(types.float32), codegen


@intrinsic
def _zeros(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_V8, [0.0] * _LANES)

    return _vec8(), codegen


def _overload_lanes(op, name: str) -> None:
    """Give `op` (operator.add, ...) on two vectors as LLVM's `name` per lane."""

    @intrinsic
    def lanes(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, name)(args[0], args[1])

        return _vec8(_vec8, _vec8), codegen

    def typer(a, b):
        if a == _vec8 and b == _vec8:
            return lambda a, b: lanes(a, b)

    overload(op)(typer)


_overload_lanes(operator.add, "fadd")
_overload_lanes(operator.sub, "fsub")
_overload_lanes(operator.mul, "fmul")
