# Notifications out with the real server and a receiver on loopback (libmicrohttpd in the test).
add_executable(test_notifications ${CMAKE_CURRENT_LIST_DIR}/test_notifications.c)
ty_target(test_notifications)
target_link_libraries(test_notifications PRIVATE ty_test_support PkgConfig::MHD PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA OpenSSL::Crypto Threads::Threads)
add_dependencies(test_notifications trainyard)
add_test(NAME test_notifications
         COMMAND test_notifications $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_notifications PROPERTIES LABELS integration TIMEOUT 180)
