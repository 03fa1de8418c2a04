TERMUX_SUBPKG_DESCRIPTION="OpenCL backend for MNN (Adreno and Mali GPUs)"
TERMUX_SUBPKG_SUGGESTS="opencl-vendor-driver"
TERMUX_SUBPKG_INCLUDE="
lib/libMNN_CL.so
"
