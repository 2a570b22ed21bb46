# Test registration. Conventions:
#   tests/unit/<module>/test_*.c   one executable each, label "unit" (label
#                                  "kernels" for module kernels); it links
#                                  its module's layer, inferd_<module> (so
#                                  building the kernel tests builds only the
#                                  kernels and base), or UNIT_TEST_LAYER_<name>
#                                  when it drives a layer above its module
#   tests/fuzz/<target>/           fuzz_<target>.c + corpus/, replayed by ctest
#                                  (label "fuzz") through a plain main() driver
#   tests/<group>/test_*.sh        script tests, label = group (see below)
set(UNIT_TEST_LAYER_test_grammar_engine engine) # structured output through the engine
file(GLOB_RECURSE UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/*/test_*.c)
foreach(src ${UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  get_filename_component(dir ${src} DIRECTORY)
  get_filename_component(module ${dir} NAME)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  if(DEFINED UNIT_TEST_LAYER_${name})
    target_link_libraries(${name} PRIVATE inferd_${UNIT_TEST_LAYER_${name}})
  elseif(TARGET inferd_${module})
    target_link_libraries(${name} PRIVATE inferd_${module})
  else()
    target_link_libraries(${name} PRIVATE inferd_core)
  endif()
  set(label unit)
  if(module STREQUAL "kernels")
    set(label kernels)
  endif()
  add_test(NAME ${module}/${name} COMMAND ${name})
  set_tests_properties(${module}/${name} PROPERTIES LABELS "${label}"
                       ENVIRONMENT "INFERD_BIN=$<TARGET_FILE:inferd>;INFERD_SRC=${CMAKE_SOURCE_DIR}")
endforeach()

# Fuzz targets: each tests/fuzz/<t>/fuzz_<t>.c defines LLVMFuzzerTestOneInput.
# The replay driver runs it over every file in the corpus directory.
file(GLOB FUZZ_DIRS CONFIGURE_DEPENDS LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/tests/fuzz/*)
foreach(dir ${FUZZ_DIRS})
  if(IS_DIRECTORY ${dir})
    get_filename_component(t ${dir} NAME)
    add_executable(fuzz_${t}_replay ${dir}/fuzz_${t}.c ${CMAKE_SOURCE_DIR}/tests/fuzz/replay.c)
    target_link_libraries(fuzz_${t}_replay PRIVATE inferd_core)
    add_test(NAME fuzz/${t} COMMAND fuzz_${t}_replay ${dir}/corpus)
    set_tests_properties(fuzz/${t} PROPERTIES LABELS fuzz)
    if(INFERD_FUZZ)
      add_executable(fuzz_${t} ${dir}/fuzz_${t}.c)
      target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
      target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
      target_link_libraries(fuzz_${t} PRIVATE inferd_core)
    endif()
  endif()
endforeach()

# Script tests get INFERD_BIN and a scratch directory; the folder is the label:
#   reference/  numpy forward pass      cli/   command-line behaviour
#   diff/       differential tests against the npm oracles (tokenizers, templates)
#   e2e/        the API server driven by the official SDKs
#   kv/         KV tiers through the server, with real Redis
#   cluster/    workers and a gateway as separate processes on loopback
#   lint/       formatting, include directions between layers
file(GLOB SCRIPT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/reference/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/cli/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/diff/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/e2e/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/kv/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/cluster/test_*.sh
                                         ${CMAKE_SOURCE_DIR}/tests/lint/test_*.sh)
foreach(sh ${SCRIPT_TESTS})
  get_filename_component(name ${sh} NAME_WE)
  get_filename_component(dir ${sh} DIRECTORY)
  get_filename_component(group ${dir} NAME)
  add_test(NAME ${group}/${name} COMMAND bash ${sh})
  set_tests_properties(${group}/${name} PROPERTIES LABELS ${group}
    ENVIRONMENT "INFERD_BIN=$<TARGET_FILE:inferd>;INFERD_SRC=${CMAKE_SOURCE_DIR};INFERD_SCRATCH=${CMAKE_BINARY_DIR}/scratch;INFERD_LAYERS=${INFERD_LAYERS_FILE}")
endforeach()

# The engine-level invariance tests again with each SIMD level below the
# CPU's best forced (INFERD_ISA), so the avx2 and avxvnni kernels are also
# proven inside the whole engine on a machine that would pick avx512; the
# kernel tests already run every level the CPU has, each forced in turn.
# Skipped (exit 77) where the CPU lacks the level.
foreach(level avx2 avxvnni)
  add_test(NAME engine/test_engine@${level}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/isa_forced.sh ${level} $<TARGET_FILE:test_engine>)
  add_test(NAME cli/test_invariance@${level}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/isa_forced.sh ${level} bash
                   ${CMAKE_SOURCE_DIR}/tests/cli/test_invariance.sh)
  set_tests_properties(engine/test_engine@${level} PROPERTIES LABELS unit SKIP_RETURN_CODE 77
    ENVIRONMENT "INFERD_BIN=$<TARGET_FILE:inferd>;INFERD_SRC=${CMAKE_SOURCE_DIR}")
  set_tests_properties(cli/test_invariance@${level} PROPERTIES LABELS cli SKIP_RETURN_CODE 77
    ENVIRONMENT "INFERD_BIN=$<TARGET_FILE:inferd>;INFERD_SRC=${CMAKE_SOURCE_DIR};INFERD_SCRATCH=${CMAKE_BINARY_DIR}/scratch")
endforeach()
