# For tools/arm/check.sh: attach to a generation running under qemu-aarch64's
# gdb stub, and stop at the first of MNN's ARMv8.2/ARMv8.6 int8 GEMM kernels
# it calls (the engine's symbols are in its .symtab: the wheel is not stripped).
set pagination off
set confirm off
target remote :1234
catch load _mnncengine
continue
rbreak ^MNNGemmInt8AddBiasScale_ARMV8
continue
bt 2
kill
quit
