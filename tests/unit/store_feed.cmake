# store/store_feed.c: the change feed with each event's job, for the live event stream.
ty_unit_test(test_store_feed ${CMAKE_CURRENT_LIST_DIR}/test_store_feed.c ty_store)
