TERMUX_SUBPKG_DESCRIPTION="Vulkan backend for MNN"
# as llama-cpp-backend-vulkan: the loader, and a driver
TERMUX_SUBPKG_RECOMMENDS="vulkan-loader"
TERMUX_SUBPKG_SUGGESTS="vulkan-loader-generic, mesa-vulkan-icd-freedreno"
TERMUX_SUBPKG_INCLUDE="
lib/libMNN_Vulkan.so
"
