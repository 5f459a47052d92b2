# `cmake --install`: libkvdice.a, the library's headers (include/kvdice/<area>/*.h), an exported
# kvdiceConfig.cmake for find_package(kvdice) (target kvdice::kvdice) and kvdice.pc for pkg-config.
# The kvdice binary installs too. What is stable in that API is listed in docs/api.md.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVDICE_VERSION 0.2.0)
set_target_properties(kvdice_lib PROPERTIES EXPORT_NAME kvdice)
install(TARGETS kvdice_lib EXPORT kvdiceTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Every header but the CLI's (argument parsing only) and the CUDA backend's internals.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvdice
        FILES_MATCHING PATTERN "*.h"
        PATTERN "cli" EXCLUDE PATTERN "cuda" EXCLUDE)
install(EXPORT kvdiceTargets NAMESPACE kvdice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvdice)
set(KVDICE_CONFIG_CUDA ${KVDICE_CUDA})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kvdiceConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kvdiceConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvdice)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvdiceConfigVersion.cmake VERSION ${KVDICE_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvdiceConfig.cmake ${CMAKE_BINARY_DIR}/kvdiceConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvdice)
# pkg-config: a static library, so every dependency is in Requires/Libs (not .private).
if(KVDICE_CUDA)
  # cuBLASLt is a shared library outside the default search path: the rpath lets the program find it.
  set(KVDICE_PC_CUDA "-L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lcublasLt -lpthread -ldl -lrt")
  set(KVDICE_PC_CFLAGS_CUDA "-DKVDICE_WITH_CUDA=1 -I${CUDAToolkit_INCLUDE_DIRS}")
endif()
# prefix is found from the .pc file's own place, so the installed tree can be moved (or installed with
# `cmake --install --prefix`).
string(REGEX REPLACE "[^/]+" ".." KVDICE_PC_PREFIX "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${CMAKE_SOURCE_DIR}/cmake/kvdice.pc.in ${CMAKE_BINARY_DIR}/kvdice.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kvdice.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
