# api/feed.c and api/events.c: the fan-out of the live event streams and the streams over it,
# read through their read() against a real store.
ty_unit_test(test_api_feed ${CMAKE_CURRENT_LIST_DIR}/test_api_feed.c ty_api)
