# Unit tests of notifications in the store: subscriptions, the outbox written with a job's end.
ty_unit_test(test_store_notify ${CMAKE_CURRENT_LIST_DIR}/test_store_notify.c ty_store)
