# Runs an example and compares its standard output with the expected text.
# cmake -DEXE=<program> -DEXPECTED=<file> -P run_example.cmake
execute_process(COMMAND ${EXE} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} exited with ${rc}\n${err}")
endif()
file(READ ${EXPECTED} want)
if(NOT out STREQUAL want)
  message(FATAL_ERROR "output of ${EXE} differs from ${EXPECTED}\n--- got ---\n${out}\n--- expected ---\n${want}")
endif()
message(STATUS "example output matches ${EXPECTED}")
