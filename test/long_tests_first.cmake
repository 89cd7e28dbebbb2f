# Read by ctest after the suite's tests are known (TEST_INCLUDE_FILES; `perfwire_tests` is the
# suite's path): at -j N the long tests start first, [longest] then [long] (a minute or more
# under a sanitizer or on a loaded machine), so that none of them is left running alone at the
# end while the other job slots idle. CTest runs the tests of higher COST first.
foreach(tag_cost "[long]=100" "[longest]=1000")
    string(REGEX MATCH "^(.*)=(.*)$" _ "${tag_cost}")
    set(tag "${CMAKE_MATCH_1}")
    set(cost "${CMAKE_MATCH_2}")
    # (Its exit status is the number of tests listed. Not built yet: no order, nothing lost.)
    execute_process(COMMAND "${perfwire_tests}" --list-test-names-only "${tag}"
                    OUTPUT_VARIABLE names ERROR_QUIET)
    string(REPLACE "\n" ";" names "${names}")
    foreach(name IN LISTS names)
        if(NOT name STREQUAL "")
            set_tests_properties("${name}" PROPERTIES COST ${cost})
        endif()
    endforeach()
endforeach()
