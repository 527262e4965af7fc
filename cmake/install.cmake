# `cmake --install build --prefix P`: what a user of Cumulus gets (docs/library.md):
#
#   P/include/cumulus/*.h                 the public API (and the generated version.h)
#   P/lib/libcumulus.so[.X.Y[.Z]]         Cumulus::cumulus
#   P/lib/cmake/Cumulus/                  CumulusConfig.cmake, CumulusConfigVersion.cmake and the
#                                         exported targets, for find_package(Cumulus)
#   P/lib/pkgconfig/cumulus.pc            for `pkg-config --cflags --libs cumulus`
#   P/bin/cumulus-run, cumulus-train, ... the programs a user runs
#
# Every installed path is relative to P, so an installed tree can be moved (the package config
# and cumulus.pc find their prefix from where they lie). Included from the top-level
# CMakeLists.txt in the LibTorch build, after every target it names exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CUMULUS_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Cumulus)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cumulus
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/cumulus/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cumulus)

# The include directory comes with the target (its INSTALL_INTERFACE, api/CMakeLists.txt).
install(TARGETS cumulus EXPORT CumulusTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT CumulusTargets
        NAMESPACE Cumulus::
        DESTINATION ${CUMULUS_CMAKE_INSTALL_DIR})

# The programs of docs/launch.md, training.md, spot.md, comm.md, configuration.md and
# observability.md (cumulus-report). They link the internal libraries statically, not
# libcumulus.so. Left out: the developer tools of bench/ (cumulus-sha256-bench, ...) and the
# multihost probe, which run from the build tree.
set(CUMULUS_INSTALLED_PROGRAMS
    cumulus-run cumulus-train cumulus-spot cumulus-bench cumulus-ps cumulus-config cumulus-report)
install(TARGETS ${CUMULUS_INSTALLED_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/CumulusConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/CumulusConfig.cmake
                              INSTALL_DESTINATION ${CUMULUS_CMAKE_INSTALL_DIR})
# 0.x: the shared library's SONAME is X.Y, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/CumulusConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/CumulusConfig.cmake
              ${PROJECT_BINARY_DIR}/CumulusConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/CumulusTorchTarget.cmake
        DESTINATION ${CUMULUS_CMAKE_INSTALL_DIR})

# cumulus.pc. The public headers include LibTorch's, so its flags are part of Cumulus's: the
# -D_GLIBCXX_USE_CXX11_ABI=... it was built with (a program built with the other ABI does not
# link), its include directories and its CPU libraries, in the torch wheel Cumulus was built with.
set(CUMULUS_PC_CFLAGS "-D_GLIBCXX_USE_CXX11_ABI=${CUMULUS_TORCH_CXX11_ABI}")
foreach(dir include include/torch/csrc/api/include)
  string(APPEND CUMULUS_PC_CFLAGS " -I${CUMULUS_TORCH_DIR}/${dir}")
endforeach()
set(CUMULUS_PC_LIBS
    "-L${CUMULUS_TORCH_DIR}/lib -Wl,-rpath,${CUMULUS_TORCH_DIR}/lib -ltorch_cpu -lc10 -pthread")
# ${pcfiledir}/<this many ..> is the prefix, wherever the tree was installed or moved.
file(RELATIVE_PATH CUMULUS_PC_TO_PREFIX
     /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" CUMULUS_PC_TO_PREFIX "${CUMULUS_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/cumulus.pc.in ${PROJECT_BINARY_DIR}/cumulus.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cumulus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
