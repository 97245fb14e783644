# `pip install .` (pyproject.toml: scikit-build-core) configures this project
# with SKBUILD set, in the persistent build directory build-py/. Its compiles
# go through ccache with the settings scripts/build.sh gives the main build:
# the repository root as CCACHE_BASEDIR, the working directory left out of the
# hash (CCACHE_NOHASHDIR), locale sloppiness. build/ and build-py/ sit at the
# same depth and both compile with c++ (pyproject.toml), so every kiln
# object's ccache key is the same in both and the pip build replays the main
# build's objects instead of compiling them again.
# Included right after project(), before any target exists (a target takes
# its launcher when it is created).
if(NOT SKBUILD)
  return()
endif()
find_program(KILN_CCACHE ccache)
if(KILN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(_kiln_sloppiness "$ENV{CCACHE_SLOPPINESS}")
  if(NOT _kiln_sloppiness)
    set(_kiln_sloppiness locale)
  endif()
  set(_kiln_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
                     CCACHE_SLOPPINESS=${_kiln_sloppiness} ${KILN_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${_kiln_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_kiln_launcher})
  message(STATUS "kiln: pip build through ccache (base dir ${PROJECT_SOURCE_DIR})")
endif()
