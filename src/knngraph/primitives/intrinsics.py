"""PTX instructions numba-cuda does not expose, written once for every kernel family.

``dp4a_u8`` / ``dp4a_i8``: four 8-bit products of two 32-bit words summed into an int32 accumulator in
one instruction (PTX ``dp4a.u32.u32`` / ``dp4a.s32.s32``), where the element path spends eight (four
byte loads or extractions and four multiply-adds). Arguments of any integer type are cast to int32 (a
``uint32`` word keeps its bits). The simulator cannot run PTX: there they are plain Python, the four
byte products one by one.
"""

from __future__ import annotations

from numba import config, int32

__all__ = ["dp4a_u8", "dp4a_i8"]


def _dp4a_python(signed: bool):
    def dp4a(a, b, c):
        a = int(a) & 0xFFFFFFFF
        b = int(b) & 0xFFFFFFFF
        acc = int(c)
        for s in range(4):
            x = (a >> (8 * s)) & 255
            y = (b >> (8 * s)) & 255
            if signed:
                x = x - 256 if x >= 128 else x
                y = y - 256 if y >= 128 else y
            acc += x * y
        return int32(acc)

    return dp4a


def _dp4a_ptx(signed: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    op = "s32.s32" if signed else "u32.u32"

    @intrinsic
    def dp4a(typingctx, a, b, c):
        sig = types.int32(a, b, c)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            vals = [context.cast(builder, v, t, types.int32) for v, t in zip(args, signature.args)]
            asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32, i32]), f"dp4a.{op} $0, $1, $2, $3;", "=r,r,r,r")
            return builder.call(asm, vals)

        return sig, codegen

    return dp4a


if config.ENABLE_CUDASIM:
    dp4a_u8 = _dp4a_python(False)
    dp4a_i8 = _dp4a_python(True)
else:  # pragma: no cover - needs numba's CUDA target
    dp4a_u8 = _dp4a_ptx(False)
    dp4a_i8 = _dp4a_ptx(True)
