# The C++ SDK: `cmake --install build --prefix P` puts under P
#   include/kiln/*.h                   the public API (include/kiln)
#   lib/libkiln_*.a                    kiln_runtime, kiln_compiler and the internal static
#                                      libraries they link (position-independent code)
#   lib/cmake/kiln/                    the CMake package: find_package(kiln) gives the
#                                      targets kiln::runtime and kiln::compiler
#   bin/kiln                           the command line
# (components: sdk = headers, libraries and package; cli = bin/kiln).
#
# The libraries are static; the package config finds their dependencies again
# (oneDNN, fmt, spdlog, FlatBuffers, OpenMP, the CUDA toolkit when built with
# it; protobuf and ONNX for kiln::compiler only) from this distribution's -dev
# packages: the SDK is for the distribution it was built on. A program that
# links only kiln::runtime gets no protobuf, ONNX importer or passes (DESIGN.md).
#
# Nothing here changes how the build tree compiles: include directories that
# point into the source or build tree are only wrapped in $<BUILD_INTERFACE:>.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The kiln targets reachable from the given ones through their link libraries
# (into `out_targets`, the given ones first) and every other link item met on
# the way (into `out_external`: imported targets, library paths and names).
function(kiln_link_closure out_targets out_external)
  set(seen "")
  set(external "")
  set(queue ${ARGN})
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(libs ${t} LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    foreach(l IN LISTS libs)
      set(imported FALSE)
      if(TARGET ${l})
        get_target_property(imported ${l} IMPORTED)
      endif()
      if(TARGET ${l} AND NOT imported)
        list(APPEND queue ${l})
      else()
        list(APPEND external ${l})
      endif()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES external)
  set(${out_targets} ${seen} PARENT_SCOPE)
  set(${out_external} ${external} PARENT_SCOPE)
endfunction()

# find_dependency() lines for the imported targets in `items` (one per package).
function(kiln_find_dependency_lines out)
  set(lines "")
  foreach(item IN LISTS ARGN)
    set(dep "")
    if(item MATCHES "^fmt::")
      set(dep "fmt")
    elseif(item MATCHES "^spdlog::")
      set(dep "spdlog")
    elseif(item MATCHES "^Threads::")
      set(dep "Threads")
    elseif(item MATCHES "^OpenMP::")
      set(dep "OpenMP")
    elseif(item MATCHES "^DNNL::")
      set(dep "dnnl CONFIG")
    elseif(item MATCHES "^flatbuffers::")
      set(dep "FlatBuffers")
    elseif(item MATCHES "^nlohmann_json::")
      set(dep "nlohmann_json")
    elseif(item MATCHES "^protobuf::")
      set(dep "Protobuf")
    elseif(item MATCHES "^onnx")
      set(dep "ONNX")
    elseif(item MATCHES "^CUDA::")
      set(dep "CUDAToolkit")
    elseif(TARGET ${item})
      message(WARNING "kiln install: no package is known for the link target '${item}'; "
                      "add it to kiln_find_dependency_lines (cmake/install.cmake)")
    endif()
    if(dep)
      list(APPEND lines "find_dependency(${dep})")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES lines)
  list(JOIN lines "\n" text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

kiln_link_closure(_kiln_rt_targets _kiln_rt_external kiln_runtime)
kiln_link_closure(_kiln_all_targets _kiln_all_external kiln_compiler)
set(_kiln_cc_targets ${_kiln_all_targets})
list(REMOVE_ITEM _kiln_cc_targets ${_kiln_rt_targets})
set(_kiln_cc_external ${_kiln_all_external})
list(REMOVE_ITEM _kiln_cc_external ${_kiln_rt_external})

# Include directories into the source or build tree are for the build tree
# only; installed consumers get <prefix>/include (the public headers).
foreach(t IN LISTS _kiln_all_targets)
  get_target_property(inc ${t} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT inc)
    continue()
  endif()
  set(wrapped "")
  foreach(d IN LISTS inc)
    if(d MATCHES "^\\$<")
      list(APPEND wrapped "${d}")
    else()
      list(APPEND wrapped "$<BUILD_INTERFACE:${d}>")
    endif()
  endforeach()
  set_property(TARGET ${t} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${wrapped}")
endforeach()
set_property(TARGET kiln_runtime APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES
             "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
set_property(TARGET kiln_runtime PROPERTY EXPORT_NAME runtime)
set_property(TARGET kiln_compiler PROPERTY EXPORT_NAME compiler)

set(_kiln_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT sdk)
install(TARGETS ${_kiln_rt_targets} EXPORT kilnRuntimeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdk)
install(TARGETS ${_kiln_cc_targets} EXPORT kilnCompilerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdk)
install(EXPORT kilnRuntimeTargets NAMESPACE kiln:: DESTINATION ${_kiln_cmake_dir} COMPONENT sdk)
install(EXPORT kilnCompilerTargets NAMESPACE kiln:: DESTINATION ${_kiln_cmake_dir} COMPONENT sdk)

kiln_find_dependency_lines(KILN_RUNTIME_DEPENDENCIES ${_kiln_rt_external})
kiln_find_dependency_lines(KILN_COMPILER_DEPENDENCIES ${_kiln_cc_external})
set(KILN_CUDA_ROOT "")
if(KILN_WITH_CUDA AND CUDAToolkit_BIN_DIR)
  get_filename_component(KILN_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfig.cmake
                              INSTALL_DESTINATION ${_kiln_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfigVersion.cmake
        DESTINATION ${_kiln_cmake_dir} COMPONENT sdk)

# The command line; its run-time search path keeps library directories outside
# the build tree (e.g. the CUDA toolkit's), as in the build tree.
set_property(TARGET kiln PROPERTY INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
