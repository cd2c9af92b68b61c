# server/retention.c: the background purge thread over a real store.
ty_unit_test(test_retention ${CMAKE_CURRENT_LIST_DIR}/test_retention.c ty_server)
