# For tools/arm/check.sh, after it attached to a generation running under
# qemu-aarch64's gdb stub and caught the load of MNN's library: stop at the
# first of MNN's ARMv8.2/ARMv8.6 int8 GEMM kernels it calls (their symbols
# are in the library's .symtab: neither the wheel nor our build strips it).
continue
rbreak ^MNNGemmInt8AddBiasScale_ARMV8
continue
bt 2
kill
quit
