# Writes OUT from the template IN, with @FERRYD_OPTIONS@ set to what `FERRYD --print-options
# FORMAT` prints (src/server/options.c: the one table of ferryd's options) and the other
# @VARIABLES@ from -D: ferryd(8) and ferryd.conf.
execute_process(COMMAND ${FERRYD} --print-options ${FORMAT} OUTPUT_VARIABLE FERRYD_OPTIONS
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FERRYD} --print-options ${FORMAT} failed (${rc})")
endif()
string(REGEX REPLACE "\n$" "" FERRYD_OPTIONS "${FERRYD_OPTIONS}")
configure_file(${IN} ${OUT} @ONLY)
