# The build id in kiln's version "<PROJECT_VERSION>+<build id>" (docs/cache.md,
# "kiln_version"). Run at every build, not only at configure time, by the
# custom target kiln_build_id (src/CMakeLists.txt):
#
#   cmake -DKILN_SOURCE_DIR=<repo> -DKILN_VERSION=<x.y.z> -DKILN_OUTPUT=<header> -P cmake/build_id.cmake
#
# The id is the first 12 hex digits of a SHA-256 over the sorted list of
# "<path relative to the repository>\t<SHA-256 of the file's bytes>" of every
# file that defines the compiled code: the top CMakeLists.txt, cmake/**, src/**
# and include/** (tests/, docs/, bench/, tools/, python/, ort_ep/ do not make
# programs). Contents only: no git (an sdist has no .git), no timestamps, no
# absolute paths, so the same tree gives the same id in any directory, from
# `pip install .` as from scripts/build.sh, and any edit, committed or not,
# gives another. Hidden files and editor backups (~) are left out.
#
# KILN_OUTPUT is written only when its text changes: a build with no source
# change leaves it untouched (ninja restats the byproduct) and relinks nothing;
# a change recompiles src/support/version.cpp alone.
#
# -DKILN_PRINT_ID=ON prints the id on stdout instead (tests/cmake/test_build_id.cmake).
cmake_minimum_required(VERSION 3.25)

foreach(_v KILN_SOURCE_DIR KILN_VERSION)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "build_id.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(NOT KILN_PRINT_ID AND NOT DEFINED KILN_OUTPUT)
  message(FATAL_ERROR "build_id.cmake: -DKILN_OUTPUT=<header> (or -DKILN_PRINT_ID=ON) is required")
endif()

file(GLOB_RECURSE _files LIST_DIRECTORIES false RELATIVE "${KILN_SOURCE_DIR}"
     "${KILN_SOURCE_DIR}/cmake/*" "${KILN_SOURCE_DIR}/src/*" "${KILN_SOURCE_DIR}/include/*")
if(EXISTS "${KILN_SOURCE_DIR}/CMakeLists.txt")
  list(APPEND _files CMakeLists.txt)
endif()
list(FILTER _files EXCLUDE REGEX "(^|/)\\.|~$|(^|/)__pycache__/")
# Byte order, whatever order the file system lists a directory in.
list(SORT _files COMPARE STRING CASE SENSITIVE)
if(NOT _files)
  message(FATAL_ERROR "build_id.cmake: no sources under ${KILN_SOURCE_DIR}")
endif()

set(_manifest "")
foreach(_f IN LISTS _files)
  file(SHA256 "${KILN_SOURCE_DIR}/${_f}" _h)
  string(APPEND _manifest "${_f}\t${_h}\n")
endforeach()
string(SHA256 _id "${_manifest}")
string(SUBSTRING "${_id}" 0 12 _id)

if(KILN_PRINT_ID)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${_id}")
  return()
endif()

set(_text "// Generated at build time by cmake/build_id.cmake from the sources' contents; do not edit.
// Included by src/support/version.cpp only.
#pragma once
#define KILN_PROJECT_VERSION \"${KILN_VERSION}\"
#define KILN_BUILD_ID \"${_id}\"
")
set(_old "")
if(EXISTS "${KILN_OUTPUT}")
  file(READ "${KILN_OUTPUT}" _old)
endif()
if(NOT _old STREQUAL _text)
  # Written next to the target and renamed: an interrupted build never leaves half a header.
  file(WRITE "${KILN_OUTPUT}.tmp" "${_text}")
  file(RENAME "${KILN_OUTPUT}.tmp" "${KILN_OUTPUT}")
  message(STATUS "kiln: build id ${_id} (version ${KILN_VERSION}+${_id})")
endif()
