TERMUX_SUBPKG_DESCRIPTION="OpenCL backend for MNN (Adreno and Mali GPUs)"
# as llama-cpp-backend-opencl: the ICD loader, and a vendor driver or clvk
TERMUX_SUBPKG_RECOMMENDS="ocl-icd"
TERMUX_SUBPKG_SUGGESTS="opencl-vendor-driver | clvk"
TERMUX_SUBPKG_INCLUDE="
lib/libMNN_CL.so
"
