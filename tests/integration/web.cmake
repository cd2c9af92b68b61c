# test_web: the web page in headless Chromium, driven through chromedriver (WebDriver over
# libcurl) against the real server; its screenshots land in web-artifacts/ of this directory.
add_executable(test_web ${CMAKE_CURRENT_LIST_DIR}/test_web.c)
ty_target(test_web)
target_link_libraries(test_web PRIVATE ty_test_support ty_net PkgConfig::SQLITE PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA OpenSSL::Crypto)
add_dependencies(test_web trainyard)
add_test(NAME test_web
         COMMAND test_web $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml
                 ${CMAKE_CURRENT_BINARY_DIR}/web-artifacts)
set_tests_properties(test_web PROPERTIES LABELS integration TIMEOUT 300)
