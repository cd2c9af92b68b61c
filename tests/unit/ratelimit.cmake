# The token-bucket table of common/ty_ratelimit.c (rate limits of /v1/hooks).
ty_unit_test(test_ty_ratelimit ${CMAKE_CURRENT_LIST_DIR}/test_ty_ratelimit.c ty_common)
