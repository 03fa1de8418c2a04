TERMUX_SUBPKG_DESCRIPTION="Vulkan backend for MNN"
TERMUX_SUBPKG_SUGGESTS="vulkan-loader-android"
TERMUX_SUBPKG_INCLUDE="
lib/libMNN_Vulkan.so
"
