# Unit tests of CI webhooks: registrations and sealed secrets in the store.
ty_unit_test(test_webhook_store ${CMAKE_CURRENT_LIST_DIR}/test_webhook_store.c ty_store)
