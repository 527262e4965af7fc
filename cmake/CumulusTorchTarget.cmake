# Cumulus::torch: LibTorch's CPU libraries (libtorch_cpu, libc10) and headers from a torch wheel's
# directory CUMULUS_TORCH_DIR, built with _GLIBCXX_USE_CXX11_ABI=CUMULUS_TORCH_CXX11_ABI. Used by
# the build (cmake/torch.cmake) and installed beside CumulusConfig.cmake, which defines the same
# target for a program that links Cumulus::cumulus.
if(NOT TARGET Cumulus::torch)
  foreach(_lib torch_cpu c10)
    if(NOT EXISTS "${CUMULUS_TORCH_DIR}/lib/lib${_lib}.so")
      message(FATAL_ERROR "${CUMULUS_TORCH_DIR}/lib/lib${_lib}.so is missing: is "
                          "${CUMULUS_TORCH_DIR} a torch wheel's directory?")
    endif()
  endforeach()
  add_library(Cumulus::torch INTERFACE IMPORTED)
  set_target_properties(Cumulus::torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${CUMULUS_TORCH_DIR}/include;${CUMULUS_TORCH_DIR}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS
      "_GLIBCXX_USE_CXX11_ABI=${CUMULUS_TORCH_CXX11_ABI};USE_DISTRIBUTED;USE_C10D_GLOO"
    INTERFACE_LINK_LIBRARIES
      "${CUMULUS_TORCH_DIR}/lib/libtorch_cpu.so;${CUMULUS_TORCH_DIR}/lib/libc10.so"
    # LibTorch 2.x's headers need C++20: a program that includes them gets it.
    INTERFACE_COMPILE_FEATURES cxx_std_20)
endif()
