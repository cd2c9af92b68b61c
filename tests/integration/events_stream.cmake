# The live event streams (Server-Sent Events) end to end: followers read with libcurl while
# jobs run, filters, resumption with Last-Event-ID, refusals, and their end at shutdown.
add_executable(test_events_stream ${CMAKE_CURRENT_LIST_DIR}/test_events_stream.c)
ty_target(test_events_stream)
target_link_libraries(test_events_stream PRIVATE ty_test_support PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA Threads::Threads)
add_dependencies(test_events_stream trainyard)
add_test(NAME test_events_stream
         COMMAND test_events_stream $<TARGET_FILE:trainyard>
                 ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_events_stream PROPERTIES LABELS integration TIMEOUT 180)
