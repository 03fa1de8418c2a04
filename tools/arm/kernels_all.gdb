# For tools/arm/probe.sh, after it attached to a program running under
# qemu-aarch64's gdb stub and caught the load of MNN's library: one
# breakpoint on every MNN GEMM, matmul and dynamic-quantisation kernel (their
# symbols are in the library's .symtab: our build does not strip it); each
# prints the kernel's name the first time it runs, then disables itself, so
# the list is every such kernel the run used, in the order first used.
rbreak ^(MNN|_MNN|Arm82|ARM82|DynamicQuan)[A-Za-z0-9_]*(Gemm|MatMul|Matmul|Quan)[A-Za-z0-9_]*$
commands 2-$bpnum
silent
info symbol $pc
disable $_hit_bpnum
continue
end
continue
quit
