# Checks cmake/build_id.cmake, the build id in kiln's version (docs/cache.md,
# "kiln_version"), on small trees made here:
#   cmake -DKILN_BUILD_ID_SCRIPT=<cmake/build_id.cmake> -DWORK_DIR=<scratch dir>
#         [-DKILN_SOURCE_DIR=<repo> -DKILN_VERSION=<x.y.z> -DKILN_BIN=<kiln>] -P test_build_id.cmake
# With KILN_BIN, also that the kiln built from KILN_SOURCE_DIR reports
# "<KILN_VERSION>+<the id of that tree now>" (the build step ran and its
# header is what was compiled).
cmake_minimum_required(VERSION 3.25)

# check("<if() condition>" "what"): counts a failure when the condition is false.
set(_failures 0)
macro(check cond what)
  cmake_language(EVAL CODE "if(${cond})\nset(_ok TRUE)\nelse()\nset(_ok FALSE)\nendif()")
  if(NOT _ok)
    message(SEND_ERROR "FAILED: ${what}")
    math(EXPR _failures "${_failures} + 1")
  endif()
endmacro()

function(build_id dir out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DKILN_SOURCE_DIR=${dir} -DKILN_VERSION=1.2.3 -DKILN_PRINT_ID=ON
                          -P ${KILN_BUILD_ID_SCRIPT}
                  OUTPUT_VARIABLE id ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0 OR NOT id MATCHES "^[0-9a-f]+$")
    message(FATAL_ERROR "build_id.cmake on ${dir}: rc ${rc}, '${id}' ${err}")
  endif()
  set(${out_var} ${id} PARENT_SCOPE)
endfunction()

function(write_header dir header)
  execute_process(COMMAND ${CMAKE_COMMAND} -DKILN_SOURCE_DIR=${dir} -DKILN_VERSION=1.2.3 -DKILN_OUTPUT=${header}
                          -P ${KILN_BUILD_ID_SCRIPT}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build_id.cmake -> ${header}: rc ${rc} ${err}")
  endif()
endfunction()

# A tree of the files that count (top CMakeLists.txt, cmake/, src/, include/)
# and of some that do not; `order` is the order the files are created in.
set(_names CMakeLists.txt cmake/x.cmake src/a.cpp src/sub/b.h src/sub/c.cpp include/kiln/d.h
           tests/t.cpp docs/e.md bench/f.py)
function(make_tree dir order)
  file(REMOVE_RECURSE ${dir})
  set(names ${_names})
  if(order STREQUAL "reverse")
    list(REVERSE names)
  endif()
  foreach(n IN LISTS names)
    file(WRITE ${dir}/${n} "// ${n}\nint x_${order} = 0;\n")
    # The content must not depend on the order: rewrite it without it.
    file(WRITE ${dir}/${n} "// ${n}\nint x = 0;\n")
  endforeach()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(A ${WORK_DIR}/a)
set(B ${WORK_DIR}/somewhere/else/b)
make_tree(${A} forward)
make_tree(${B} reverse)
build_id(${A} id_a)
build_id(${B} id_b)
string(REGEX MATCH "^[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]$"
       hex "${id_a}")
check("hex" "12 hex digits: '${id_a}'")
check("id_a STREQUAL id_b" "same contents in another directory, created in another order: same id (${id_a} ${id_b})")
build_id(${A} again)
check("again STREQUAL id_a" "same tree twice: same id")

# The header: written once, then left alone (its mtime kept) while the id holds.
set(H ${WORK_DIR}/out/build_id.h)
file(MAKE_DIRECTORY ${WORK_DIR}/out)
write_header(${A} ${H})
file(READ ${H} text)
string(FIND "${text}" "#define KILN_BUILD_ID \"${id_a}\"" at)
check("at GREATER -1" "header has the id: ${text}")
string(FIND "${text}" "#define KILN_PROJECT_VERSION \"1.2.3\"" at)
check("at GREATER -1" "header has the release: ${text}")
string(FIND "${text}" "${WORK_DIR}" at)
check("at EQUAL -1" "no absolute path in the header")
execute_process(COMMAND touch -d "2000-01-01 00:00:00" ${H} RESULT_VARIABLE rc)
check("rc EQUAL 0" "touch -d")
write_header(${B} ${H})
file(TIMESTAMP ${H} year "%Y")
check("year STREQUAL 2000" "an unchanged id leaves the header untouched (mtime year ${year})")
check("NOT EXISTS ${H}.tmp" "no temporary left")

# Files outside the hashed folders, hidden files and editor backups do not count.
file(APPEND ${A}/tests/t.cpp "// a test changed\n")
file(APPEND ${A}/docs/e.md "more docs\n")
file(WRITE ${A}/src/.a.cpp.swp "editor state")
file(WRITE ${A}/src/a.cpp~ "backup")
build_id(${A} id)
check("id STREQUAL id_a" "tests/, docs/, hidden files and backups do not change the id")

# One byte changed in any hashed file changes it; changed back, it is back.
foreach(n CMakeLists.txt cmake/x.cmake src/a.cpp src/sub/b.h include/kiln/d.h)
  file(READ ${A}/${n} orig)
  string(REPLACE "x = 0" "x = 1" changed "${orig}")
  file(WRITE ${A}/${n} "${changed}")
  build_id(${A} id)
  check("NOT id STREQUAL id_a" "one byte changed in ${n} changes the id")
  file(WRITE ${A}/${n} "${orig}")
  build_id(${A} id)
  check("id STREQUAL id_a" "${n} changed back gives the first id again")
endforeach()

# A new file, a removed file and a renamed file (same bytes) each change it.
file(WRITE ${A}/src/new.cpp "int y = 0;\n")
build_id(${A} id)
check("NOT id STREQUAL id_a" "a new source changes the id")
file(REMOVE ${A}/src/new.cpp)
file(RENAME ${A}/src/sub/c.cpp ${A}/src/sub/c2.cpp)
build_id(${A} id)
check("NOT id STREQUAL id_a" "a renamed source changes the id")
file(REMOVE ${A}/src/sub/c2.cpp)
build_id(${A} id)
check("NOT id STREQUAL id_a" "a removed source changes the id")

# Now the header follows the id: rewritten, with the new one.
write_header(${A} ${H})
file(TIMESTAMP ${H} year "%Y")
check("NOT year STREQUAL 2000" "a new id rewrites the header")
file(READ ${H} text)
string(FIND "${text}" "#define KILN_BUILD_ID \"${id}\"" at)
check("at GREATER -1" "rewritten header has the new id: ${text}")

# The kiln built from this repository reports the id of its sources.
if(KILN_BIN)
  execute_process(COMMAND ${CMAKE_COMMAND} -DKILN_SOURCE_DIR=${KILN_SOURCE_DIR} -DKILN_VERSION=${KILN_VERSION}
                          -DKILN_PRINT_ID=ON -P ${KILN_BUILD_ID_SCRIPT}
                  OUTPUT_VARIABLE tree_id OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${KILN_BIN} --version OUTPUT_VARIABLE v OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  check("rc EQUAL 0" "kiln --version exits 0")
  set(want "${KILN_VERSION}+${tree_id}")
  check("v STREQUAL want"
        "kiln --version is '${v}', the sources give '${KILN_VERSION}+${tree_id}' (built from other sources? rebuild)")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
if(_failures GREATER 0)
  message(FATAL_ERROR "${_failures} check(s) failed")
endif()
message(STATUS "build_id.cmake: all checks passed")
